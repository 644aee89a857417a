#include "verify/names.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <random>

#include "testing/test_seed.h"

namespace flashcheck {
namespace {

const std::vector<std::string>& meta() { return check_file_names().metadata; }
const std::vector<std::string>& tensors() { return check_file_names().tensors; }

TEST(Names, DistanceCountsSlipsCaseInsensitively) {
  EXPECT_EQ(name_distance("causal", "causal"), 0u);
  EXPECT_EQ(name_distance("CAUSAL", "causal"), 0u);
  EXPECT_EQ(name_distance("casual", "causal"), 1u);  // one transposition, not two substitutions
  EXPECT_EQ(name_distance("scael", "scale"), 1u);
  EXPECT_EQ(name_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(name_distance("", "lse"), 3u);
  EXPECT_EQ(name_distance("lse", ""), 3u);
  EXPECT_EQ(name_distance("ca", "abc"), 3u);  // optimal string alignment: no edit of a transposed pair
  EXPECT_EQ(name_distance("emptyrowlse", "empty_row_lse"), 2u);
}

TEST(Names, DistanceIsSymmetricAndBoundedOnRandomNames) {
  std::mt19937_64 gen(flashcheck::testing::seed_for(401));
  const std::string alphabet = "abcsleCAUSL_-. 0";
  std::uniform_int_distribution<size_t> len(0, 12), pick(0, alphabet.size() - 1);
  for (int i = 0; i < 2000; ++i) {
    std::string a, b;
    for (size_t n = len(gen); n--;) a += alphabet[pick(gen)];
    for (size_t n = len(gen); n--;) b += alphabet[pick(gen)];
    const size_t d = name_distance(a, b);
    ASSERT_EQ(d, name_distance(b, a)) << a << " | " << b;
    ASSERT_LE(d, std::max(a.size(), b.size())) << a << " | " << b;
    ASSERT_GE(d, a.size() > b.size() ? a.size() - b.size() : b.size() - a.size()) << a << " | " << b;
    ASSERT_EQ(name_distance(a, a), 0u);
  }
}

TEST(Names, RealTyposAreNearMisses) {
  const std::vector<std::pair<std::string, std::string>> metadata_typos = {
      {"casual", "causal"},         {"Causal", "causal"},         {"CAUSAL", "causal"},
      {"causl", "causal"},          {"cuasal", "causal"},         {"causal ", "causal"},
      {" causal", "causal"},        {"causa", "causal"},          {"caussal", "causal"},
      {"scael", "scale"},           {"Scale", "scale"},           {"scle", "scale"},
      {"scales", "scale"},          {"sclae", "scale"},           {"scale ", "scale"},
      {"lse-base", "lse_base"},     {"lsebase", "lse_base"},      {"LSE_BASE", "lse_base"},
      {"lse_base2", "lse_base"},    {"lse_bsae", "lse_base"},     {"lse base", "lse_base"},
      {"lse_bse", "lse_base"},      {"empty_rows_lse", "empty_row_lse"}, {"Empty_Row_LSE", "empty_row_lse"},
      {"emptyrowlse", "empty_row_lse"}, {"empty_row_lsee", "empty_row_lse"}, {"empty-row-lse", "empty_row_lse"},
  };
  for (const auto& [typo, meant] : metadata_typos) EXPECT_EQ(near_miss(typo, meta()), meant) << typo;
  const std::vector<std::pair<std::string, std::string>> tensor_typos = {
      {"Q", "q"}, {"K", "k"}, {"V", "v"}, {"O", "o"}, {"LSE", "lse"}, {"Lse", "lse"},
      {"lse ", "lse"}, {"lsee", "lse"}, {"ls", "lse"}, {"sle", "lse"}, {"lse_", "lse"},
  };
  for (const auto& [typo, meant] : tensor_typos) EXPECT_EQ(near_miss(typo, tensors()), meant) << typo;
}

TEST(Names, RealExtrasAreNotNearMisses) {
  // Keys and names real files carry: torch/safetensors' own, training state, model names, the
  // goldens' provenance fields. None may be refused as a typo.
  for (const char* key : {"format", "pt", "np", "step", "epoch", "seed", "dist", "problem", "format_version", "model",
                          "model_name", "llama-2-7b", "Meta-Llama-3-8B", "mistral-7b-v0.1", "gpt2", "bert-base-uncased",
                          "version", "framework", "torch_version", "dtype", "shape", "name", "kernel", "commit", "date",
                          "author", "license", "is_causal", "softmax_scale", "sm_scale", "window_size", "alibi",
                          "dropout_p", "softcap", "base", "lse", "empty", "row", "total_tokens", "lr", "causality_check"})
    EXPECT_EQ(near_miss(key, meta()), std::nullopt) << key;
  for (const char* name : {"out", "output", "attn", "mask", "bias", "q_proj", "k_cache", "v_cache", "o_f32", "lse_f64",
                           "x", "y", "w", "s", "m", "l", "P", "kv", "qk", "qkv", "o_ref", "dout", "model.layers.0.weight",
                           "softmax_lse", "logsumexp", "seq"})
    EXPECT_EQ(near_miss(name, tensors()), std::nullopt) << name;
  // Exact names are known, never near misses of themselves or of each other.
  for (const auto& k : meta()) EXPECT_EQ(near_miss(k, meta()), std::nullopt) << k;
  for (const auto& k : tensors()) EXPECT_EQ(near_miss(k, tensors()), std::nullopt) << k;
}

// Any one slip (case change, transposition, insertion, deletion, substitution) in a known name of
// three letters or more, and any change of case in any known name, is caught and mapped back.
TEST(Names, RandomSlipsOfKnownNamesAreCaught) {
  std::mt19937_64 gen(flashcheck::testing::seed_for(402));
  const std::string letters = "abcdefghijklmnopqrstuvwxyz_-0123456789 ";
  auto pick = [&](size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(gen); };
  int checked = 0;
  for (int i = 0; i < 4000; ++i) {
    const bool is_meta = pick(2) == 0;
    const auto& known = is_meta ? meta() : tensors();
    const std::string name = known[pick(known.size())];
    std::string typo = name;
    const int op = name.size() >= 3 ? static_cast<int>(pick(5)) : 0;
    switch (op) {
      case 0:  // change of case of some letters (at least one)
        for (bool changed = false; !changed;)
          for (char& c : typo)
            if (pick(2) && std::isalpha(static_cast<unsigned char>(c))) c = static_cast<char>(std::toupper(c)), changed = true;
        break;
      case 1: {
        const size_t p = pick(typo.size() - 1);
        std::swap(typo[p], typo[p + 1]);
        break;
      }
      case 2: typo.insert(typo.begin() + static_cast<ptrdiff_t>(pick(typo.size() + 1)), letters[pick(letters.size())]); break;
      case 3: typo.erase(pick(typo.size()), 1); break;
      case 4: typo[pick(typo.size())] = letters[pick(letters.size())]; break;
    }
    if (std::find(known.begin(), known.end(), typo) != known.end()) continue;  // the slip undid itself
    // Caught, and mapped back to the nearest known name: the one it came from, or one exactly as near
    // (`d_descale` is one slip from q_, k_ and v_descale alike).
    const auto got = near_miss(typo, known);
    ASSERT_TRUE(got.has_value()) << "'" << typo << "' from '" << name << "' (op " << op << ")";
    ASSERT_EQ(name_distance(typo, *got), name_distance(typo, name)) << "'" << typo << "' from '" << name << "' went to '" << *got << "'";
    ++checked;
  }
  EXPECT_GT(checked, 3000);
}

SafetensorsFile file_with(std::map<std::string, std::string> metadata, std::vector<std::string> tensor_names) {
  SafetensorsFile f;
  f.metadata = std::move(metadata);
  for (auto& n : tensor_names) f.tensors[n] = make_f32_tensor({1}, {1.5f});
  return f;
}

TEST(Names, AuditSortsKnownNearMissAndIgnored) {
  const NameAudit a = audit_names(file_with({{"causal", "top_left"}, {"casual", "none"}, {"format", "pt"}, {"softmax_scale", "0.1"}},
                                            {"q", "k", "v", "o", "LSE", "o_f32"}));
  EXPECT_TRUE(a.refused());
  EXPECT_EQ(a.known, (std::vector<std::string>{"causal", "k", "o", "q", "v"}));
  ASSERT_EQ(a.near_misses.size(), 2u);
  EXPECT_EQ(a.near_misses[0].name, "casual");
  EXPECT_EQ(a.near_misses[0].suggestion, "causal");
  EXPECT_EQ(a.near_misses[1].name, "LSE");
  EXPECT_EQ(a.near_misses[1].suggestion, "lse");
  const std::string why = a.refusal();
  EXPECT_NE(why.find("metadata key 'casual' is not one flashcheck reads; did you mean 'causal'?"), std::string::npos) << why;
  EXPECT_NE(why.find("tensor 'LSE' is not one flashcheck reads; did you mean 'lse'?"), std::string::npos) << why;
  const auto lines = a.ignored_lines();
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], "metadata key 'format' = \"pt\" ignored");
  EXPECT_EQ(lines[1], "metadata key 'softmax_scale' = \"0.1\" ignored (flashcheck reads 'scale')");
  EXPECT_EQ(lines[2], "tensor 'o_f32' ignored (flashcheck reads 'o')");
}

TEST(Names, GoldenAndPlainFilesAreNotRefused) {
  // A golden carries provenance metadata and o_f32; a minimal file carries nothing extra.
  const NameAudit golden = audit_names(file_with({{"causal", "none"}, {"lse_base", "e"}, {"problem", "b=1 hq=2"}, {"dist", "normal"},
                                                  {"seed", "1"}, {"format_version", "1"}, {"scale", "0.5"}},
                                                 {"q", "k", "v", "o", "o_f32", "lse"}));
  EXPECT_FALSE(golden.refused()) << golden.refusal();
  EXPECT_EQ(golden.ignored.size(), 5u);
  EXPECT_EQ(golden.refusal(), "");
  const NameAudit plain = audit_names(file_with({}, {"q", "k", "v", "o"}));
  EXPECT_FALSE(plain.refused());
  EXPECT_TRUE(plain.ignored.empty());
  EXPECT_EQ(plain.known.size(), 4u);
}

TEST(Names, HostileNamesCannotForgeReportLines) {
  const NameAudit a = audit_names(file_with({{"x\nok   cosine: 1", "a\"b\x01"}, {std::string(100000, 'c'), "v"}}, {"Q\n"}));
  for (const auto& l : a.ignored_lines()) {
    EXPECT_EQ(l.find('\n'), std::string::npos) << l;
    EXPECT_LT(l.size(), 300u);
  }
  EXPECT_EQ(a.ignored_lines()[1], "metadata key 'x\\x0aok   cosine: 1' = \"a\\\"b\\x01\" ignored");
  EXPECT_EQ(a.refusal(), "");  // "Q\n" is a slip beyond case from "q": more than a one-letter name admits
  EXPECT_EQ(near_miss("Q\n", tensors()), std::nullopt);
}

}  // namespace
}  // namespace flashcheck
