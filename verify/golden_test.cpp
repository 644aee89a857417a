// Goldens cannot be corrupted silently: a corrupted copy of data/ is caught by verify, named by
// what changed, and a refused regen leaves every byte on disk as it was (it used to rewrite the
// manifest's hash to the corrupted file's, after which verify passed).
#include "verify/golden.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "testing/test_seed.h"
#include "verify/check_file.h"
#include "verify/backward_report.h"
#include "verify/check_file_format.h"
#include "verify/safetensors.h"

namespace flashcheck {
namespace {

namespace fs = std::filesystem;
using Snapshot = std::map<std::string, std::vector<uint8_t>>;

std::vector<uint8_t> slurp(const fs::path& p) {
  std::ifstream is(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(is), std::istreambuf_iterator<char>()};
}
void spit(const fs::path& p, const std::vector<uint8_t>& bytes) {
  std::ofstream os(p, std::ios::binary | std::ios::trunc);
  os.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// Every entry of `dir` (a leftover temporary file would show up as a new name).
Snapshot snapshot(const fs::path& dir) {
  Snapshot s;
  for (const auto& e : fs::directory_iterator(dir))
    s[e.path().filename().string()] = e.is_regular_file() ? slurp(e.path()) : std::vector<uint8_t>{};
  return s;
}

// A private copy of the committed goldens: data/ itself is never written.
fs::path copy_of_data(const std::string& what) {
  const fs::path dir = fs::temp_directory_path() / ("fc_golden_" + what + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(FLASHCHECK_DATA_DIR))
    if (e.path().extension() == ".safetensors" || e.path().filename() == "manifest.json") fs::copy_file(e.path(), dir / e.path().filename());
  return dir;
}

// Where tensor `name`'s bytes begin in a safetensors file.
size_t tensor_offset(const std::vector<uint8_t>& file, const std::string& name) {
  uint64_t hlen;
  std::memcpy(&hlen, file.data(), 8);
  const auto header = nlohmann::json::parse(file.begin() + 8, file.begin() + 8 + static_cast<ptrdiff_t>(hlen));
  return 8 + hlen + header.at(name).at("data_offsets").at(0).get<size_t>();
}

const GoldenCaseResult& result_for(const GoldenReport& r, const std::string& name) {
  for (const auto& c : r.cases)
    if (c.name == name) return c;
  throw std::runtime_error("no result for " + name);
}

std::string joined(const GoldenCaseResult& c) {
  std::string s;
  for (const auto& d : c.details) s += d + "\n";
  return s;
}

// A random case and a random element of its o_f32 that is normal, nonzero and bit-identical to
// what this build regenerates, so one flip of its lowest mantissa bit stays within tolerance.
struct Flip {
  const GoldenCase* c;
  size_t byte;  // file offset of the element's lowest byte
};
Flip pick_element(std::mt19937_64& gen, const std::string& tensor) {
  const auto& cases = golden_cases();
  const GoldenCase& c = cases[std::uniform_int_distribution<size_t>(0, cases.size() - 1)(gen)];
  const auto file = slurp(fs::path(FLASHCHECK_DATA_DIR) / (c.name + ".safetensors"));
  const auto fresh = golden_bytes(c);
  const size_t at = tensor_offset(file, tensor), fresh_at = tensor_offset(fresh, tensor);
  const size_t n = parse_safetensors(file).tensors.at(tensor).data.size() / 4;
  for (int tries = 0; tries < 100000; ++tries) {
    const size_t i = std::uniform_int_distribution<size_t>(0, n - 1)(gen);
    float x;
    std::memcpy(&x, file.data() + at + 4 * i, 4);
    if (std::isnormal(x) && std::memcmp(file.data() + at + 4 * i, fresh.data() + fresh_at + 4 * i, 4) == 0) return {&c, at + 4 * i};
  }
  throw std::runtime_error("no normal element in " + c.name);
}

// The sequence from issue 13: flip one bit of o_f32 within value tolerance -> verify fails ->
// regen is refused -> nothing on disk changed -> verify still fails; --force restores the golden.
TEST(Golden, RefusedRegenChangesNothingAndVerifyStillFails) {
  std::mt19937_64 gen(flashcheck::testing::seed_for(601));
  const fs::path dir = copy_of_data("flip");
  const Snapshot committed = snapshot(dir);
  const Flip f = pick_element(gen, "o_f32");
  const fs::path file = dir / (f.c->name + ".safetensors");
  auto bytes = slurp(file);
  bytes[f.byte] ^= 1;  // lowest mantissa bit: 1 ulp, inside the 1-ulp value tolerance
  spit(file, bytes);
  const Snapshot corrupted = snapshot(dir);
  SCOPED_TRACE(f.c->name + " at byte " + std::to_string(f.byte));

  GoldenReport r = golden_check(dir);
  EXPECT_EQ(r.failures(), 1);
  const GoldenCaseResult& c = result_for(r, f.c->name);
  EXPECT_EQ(c.verdict(), "hash only") << joined(c);
  EXPECT_TRUE(c.hash_mismatch);
  EXPECT_FALSE(c.values || c.input_bits || c.layout || c.unreadable);
  EXPECT_NE(joined(c).find("tensor 'o_f32': 1 element(s) differ in their bits, all within tolerance"), std::string::npos) << joined(c);
  std::ostringstream log;
  EXPECT_EQ(golden_verify(dir, log), 1);
  EXPECT_NE(log.str().find("FAIL " + f.c->name + " [hash only]"), std::string::npos) << log.str();

  std::ostringstream regen_log;
  const GoldenStatus st = golden_regen(dir, false, regen_log);
  EXPECT_EQ(st.refused, 1);
  EXPECT_EQ(st.written, 0);
  EXPECT_NE(regen_log.str().find("nothing written"), std::string::npos) << regen_log.str();
  EXPECT_TRUE(snapshot(dir) == corrupted) << "a refused regen changed files in " << dir;

  std::ostringstream again;
  EXPECT_EQ(golden_verify(dir, again), 1) << again.str();
  EXPECT_EQ(result_for(golden_check(dir), f.c->name).verdict(), "hash only");

  std::ostringstream forced;
  const GoldenStatus st2 = golden_regen(dir, true, forced);
  EXPECT_EQ(st2.refused, 0);
  EXPECT_EQ(st2.written, 1) << forced.str();
  EXPECT_TRUE(snapshot(dir) == committed) << "--force did not restore the committed bytes";
  std::ostringstream after;
  EXPECT_EQ(golden_verify(dir, after), 0) << after.str();
  fs::remove_all(dir);
}

TEST(Golden, VerifyNamesWhatChanged) {
  std::mt19937_64 gen(flashcheck::testing::seed_for(602));
  {  // A flip far outside tolerance (lowest exponent bit: the value doubles or halves).
    const fs::path dir = copy_of_data("values");
    const Flip f = pick_element(gen, "o_f32");
    auto bytes = slurp(dir / (f.c->name + ".safetensors"));
    bytes[f.byte + 2] ^= 0x80;
    spit(dir / (f.c->name + ".safetensors"), bytes);
    const auto c = result_for(golden_check(dir), f.c->name);
    EXPECT_EQ(c.verdict(), "hash and values") << joined(c);
    EXPECT_NE(joined(c).find("tensor 'o_f32': 1 element(s) beyond tolerance"), std::string::npos) << joined(c);
    fs::remove_all(dir);
  }
  {  // One bit of an input.
    const fs::path dir = copy_of_data("inputs");
    const GoldenCase& c = golden_cases()[std::uniform_int_distribution<size_t>(0, golden_cases().size() - 1)(gen)];
    const fs::path file = dir / (c.name + ".safetensors");
    auto bytes = slurp(file);
    const size_t q = tensor_offset(bytes, "q");
    bytes[q + std::uniform_int_distribution<size_t>(0, 63)(gen)] ^= static_cast<uint8_t>(1u << (gen() % 8));
    spit(file, bytes);
    const auto r = result_for(golden_check(dir), c.name);
    EXPECT_EQ(r.verdict(), "input bits") << joined(r);
    EXPECT_NE(joined(r).find("input 'q' differs"), std::string::npos) << joined(r);
    fs::remove_all(dir);
  }
  {  // The manifest's hash, not the file, changed: verify says so, and a plain regen repairs it.
    const fs::path dir = copy_of_data("manifest");
    const GoldenCase& c = golden_cases()[std::uniform_int_distribution<size_t>(0, golden_cases().size() - 1)(gen)];
    auto text = slurp(dir / "manifest.json");
    std::string s(text.begin(), text.end());
    const std::string want = sha256_hex(slurp(dir / (c.name + ".safetensors")));
    const size_t at = s.find(want);
    ASSERT_NE(at, std::string::npos);
    s[at + 10] = s[at + 10] == '0' ? '1' : '0';
    spit(dir / "manifest.json", {s.begin(), s.end()});
    const auto r = result_for(golden_check(dir), c.name);
    EXPECT_EQ(r.verdict(), "hash only") << joined(r);
    EXPECT_NE(joined(r).find("manifest.json's hash is what changed"), std::string::npos) << joined(r);
    std::ostringstream log;
    const GoldenStatus st = golden_regen(dir, false, log);
    EXPECT_EQ(st.refused, 0);
    EXPECT_EQ(st.written, 0);
    EXPECT_NE(log.str().find("rewrote: "), std::string::npos) << log.str();
    std::ostringstream v;
    EXPECT_EQ(golden_verify(dir, v), 0) << v.str();
    EXPECT_EQ(slurp(dir / "manifest.json"), slurp(fs::path(FLASHCHECK_DATA_DIR) / "manifest.json"));
    fs::remove_all(dir);
  }
  {  // Metadata edited in place (same length, so the file stays well-formed).
    const fs::path dir = copy_of_data("metadata");
    const GoldenCase& c = golden_cases()[std::uniform_int_distribution<size_t>(0, golden_cases().size() - 1)(gen)];
    auto bytes = slurp(dir / (c.name + ".safetensors"));
    std::string s(bytes.begin(), bytes.end());
    const std::string from = "\"dist\":\"";
    const size_t at = s.find(from);
    ASSERT_NE(at, std::string::npos);
    s[at + from.size()] = s[at + from.size()] == 'X' ? 'Y' : 'X';
    spit(dir / (c.name + ".safetensors"), {s.begin(), s.end()});
    const auto r = result_for(golden_check(dir), c.name);
    EXPECT_EQ(r.verdict(), "metadata/layout") << joined(r);
    EXPECT_NE(joined(r).find("metadata 'dist' is"), std::string::npos) << joined(r);
    fs::remove_all(dir);
  }
  {  // A golden replaced by a FIFO: refused by name, never opened for a blocking read.
    const fs::path dir = copy_of_data("fifo");
    const GoldenCase& c = golden_cases()[std::uniform_int_distribution<size_t>(0, golden_cases().size() - 1)(gen)];
    const fs::path file = dir / (c.name + ".safetensors");
    fs::remove(file);
    ASSERT_EQ(::mkfifo(file.c_str(), 0600), 0);
    const auto r = result_for(golden_check(dir), c.name);
    EXPECT_EQ(r.verdict(), "unreadable") << joined(r);
    EXPECT_NE(joined(r).find("FIFO"), std::string::npos) << joined(r);
    const Snapshot before = snapshot(dir);
    std::ostringstream log;
    EXPECT_THROW(golden_regen(dir, false, log), SafetensorsError);
    EXPECT_TRUE(snapshot(dir) == before);
    fs::remove_all(dir);
  }
  {  // Manifest problems: a duplicated entry, a duplicated key, an unknown case.
    const fs::path dir = copy_of_data("dups");
    auto m = nlohmann::ordered_json::parse(slurp(dir / "manifest.json"));
    m["cases"].push_back(m["cases"][0]);
    auto extra = m["cases"][0];
    extra["name"] = "no_such_case";
    m["cases"].push_back(extra);
    const std::string text = m.dump(2);
    spit(dir / "manifest.json", {text.begin(), text.end()});
    const GoldenReport r = golden_check(dir);
    EXPECT_EQ(r.failures(), 2);
    ASSERT_EQ(r.manifest_problems.size(), 2u);
    EXPECT_NE(r.manifest_problems[0].find("twice"), std::string::npos);
    EXPECT_NE(r.manifest_problems[1].find("'no_such_case', a case this build does not know"), std::string::npos);
    std::string dup = text;
    dup.replace(dup.find("\"sha256\""), 8, "\"sha256\": \"0\", \"sha256\"");
    spit(dir / "manifest.json", {dup.begin(), dup.end()});
    try {
      golden_check(dir);
      ADD_FAILURE() << "accepted a manifest with a duplicate key";
    } catch (const CannotTest& e) {
      EXPECT_NE(std::string(e.what()).find("duplicate key 'sha256'"), std::string::npos) << e.what();
    }
    fs::remove_all(dir);
  }
}

// Problem model 2: one golden per variant, each the file a kernel's harness writes (thd with padding
// for varlen, a paged cache with its block table, the side tensors and metadata), read back by
// `check` as exactly the case's problem and inputs, and judged clean.
TEST(Golden, VariantGoldensAreTheFilesKernelsWrite) {
  int variants = 0;
  bool thd = false, paged = false, fp8 = false, bshd = false, used = false;
  for (const GoldenCase& c : golden_cases()) {
    const Problem& p = c.problem;
    if (p.plain()) continue;
    ++variants;
    SCOPED_TRACE(c.name + ": " + to_string(p));
    SafetensorsFile f = read_safetensors(fs::path(FLASHCHECK_DATA_DIR) / (c.name + ".safetensors"));
    const Inputs in = make_inputs(p, c.seed, c.dist);
    const CheckFileCase got = read_check_case(f, false);
    Problem want = p;
    want.page_order = PageOrder::identity;  // a file holds the table, not how it was drawn
    if (is_fp8(p.dtype) && !want.out_dtype) want.out_dtype = DType::bf16;
    EXPECT_EQ(got.problem, want);
    EXPECT_EQ(got.inputs.q, in.q);
    EXPECT_EQ(got.inputs.k, in.k);
    EXPECT_EQ(got.inputs.v, in.v);
    EXPECT_EQ(got.inputs.block_table, in.block_table);
    EXPECT_EQ(got.inputs.alibi_slopes, in.alibi_slopes);
    EXPECT_EQ(got.inputs.sinks, in.sinks);
    EXPECT_EQ(got.inputs.descale_k, in.descale_k);
    if (p.layout == Layout::thd) {
      thd = true;
      EXPECT_GT(c.pad, 0);
      EXPECT_EQ(got.padding_written, 0);  // poisoned padding, untouched
      EXPECT_TRUE(std::find(p.seqlens_q.begin(), p.seqlens_q.end(), 0) != p.seqlens_q.end()) << "an empty sequence";
      EXPECT_TRUE(std::find(p.seqlens_q.begin(), p.seqlens_q.end(), 1) != p.seqlens_q.end()) << "a one-token sequence";
    }
    if (p.paged()) {
      paged = true;
      EXPECT_EQ(p.page_order, PageOrder::shared);
      bool partial = false;
      for (int64_t b = 0; b < p.batch; ++b) partial = partial || p.skv(b) % p.page_size != 0;
      EXPECT_TRUE(partial) << "a partly filled last page";
    }
    fp8 = fp8 || (is_fp8(p.dtype) && p.descale == Descale::head);
    bshd = bshd || p.layout == Layout::bshd;
    used = used || !p.seqused_kv.empty();
    const Report r = check_file(fs::path(FLASHCHECK_DATA_DIR) / (c.name + ".safetensors"), CheckFileOptions{}).forward;
    EXPECT_TRUE(r.pass()) << to_text(r);
  }
  EXPECT_GE(variants, 11);
  EXPECT_TRUE(thd && paged && fp8 && bshd && used);
}

// A side tensor of a variant golden (block table, cu_seqlens, slopes, descales) is an input like q:
// one bit changed is named, regen refuses to overwrite it, --force restores it.
TEST(Golden, ChangedSideTensorIsNamedAndProtected) {
  std::mt19937_64 gen(flashcheck::testing::seed_for(604));
  const fs::path dir = copy_of_data("side");
  const Snapshot committed = snapshot(dir);
  const std::vector<std::pair<std::string, std::string>> sides = {{"f16_paged_shared_bshd", "block_table"},
                                                                  {"bf16_varlen_thd", "cu_seqlens_k"},
                                                                  {"bf16_alibi_signed_per_batch", "alibi_slopes"},
                                                                  {"e4m3_head_descale", "v_descale"},
                                                                  {"bf16_sinks_tl", "sinks"},
                                                                  {"bf16_seqused_bshd", "seqused_k"}};
  const auto& [name, tensor] = sides[std::uniform_int_distribution<size_t>(0, sides.size() - 1)(gen)];
  SCOPED_TRACE(name + " tensor " + tensor);
  const fs::path file = dir / (name + ".safetensors");
  auto bytes = slurp(file);
  bytes[tensor_offset(bytes, tensor)] ^= static_cast<uint8_t>(1u << (gen() % 3));  // a low bit of its first element
  spit(file, bytes);
  const auto r = result_for(golden_check(dir), name);
  EXPECT_EQ(r.verdict(), "input bits") << joined(r);
  EXPECT_NE(joined(r).find("input '" + tensor + "' differs"), std::string::npos) << joined(r);
  const Snapshot corrupted = snapshot(dir);
  std::ostringstream log;
  EXPECT_EQ(golden_regen(dir, false, log).refused, 1);
  EXPECT_TRUE(snapshot(dir) == corrupted);
  EXPECT_EQ(golden_regen(dir, true, log).written, 1);
  EXPECT_TRUE(snapshot(dir) == committed);
  fs::remove_all(dir);
}

int cli(const std::string& args, const fs::path& log) {
  const std::string cmd = std::string("'") + FLASHCHECK_CLI + "' " + args + " >>'" + log.string() + "' 2>&1";
  const int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// The same sequence through the command line, as `git bisect run` and CI see it.
TEST(Golden, CommandLineExitCodes) {
  std::mt19937_64 gen(flashcheck::testing::seed_for(603));
  const fs::path dir = copy_of_data("cli");
  const fs::path log = fs::temp_directory_path() / ("fc_golden_cli_" + std::to_string(::getpid()) + ".log");
  const std::string d = "--dir '" + dir.string() + "'";
  auto log_text = [&] {
    const auto t = slurp(log);
    return std::string(t.begin(), t.end());
  };
  ASSERT_EQ(cli("golden verify " + d, log), 0) << log_text();
  const Flip f = pick_element(gen, "o_f32");
  auto bytes = slurp(dir / (f.c->name + ".safetensors"));
  bytes[f.byte] ^= 1;
  spit(dir / (f.c->name + ".safetensors"), bytes);
  const Snapshot corrupted = snapshot(dir);
  EXPECT_EQ(cli("golden verify " + d, log), kMismatch);
  EXPECT_EQ(cli("golden regen " + d, log), kMismatch);
  EXPECT_TRUE(snapshot(dir) == corrupted);
  EXPECT_EQ(cli("golden verify " + d, log), kMismatch);
  EXPECT_EQ(cli("golden regen --force " + d, log), kPass);
  EXPECT_EQ(cli("golden verify " + d, log), kPass);
  spit(dir / "manifest.json", {'{', '}'});
  EXPECT_EQ(cli("golden verify " + d, log), kCannotTest);
  const std::string out = log_text();
  EXPECT_NE(out.find("[hash only]"), std::string::npos) << out;
  EXPECT_NE(out.find("nothing written"), std::string::npos) << out;
  fs::remove(log);
  fs::remove_all(dir);
}

// Gradients (issue 23). The cases that carry them, drawn at random by a test.
std::vector<const GoldenCase*> gradient_cases() {
  std::vector<const GoldenCase*> v;
  for (const GoldenCase& c : golden_cases())
    if (carries_gradients(c)) v.push_back(&c);
  return v;
}
const char* const kGradientTensors[] = {"golden_dq", "golden_dk", "golden_dv", "golden_dq_f32", "golden_dk_f32", "golden_dv_f32"};

// Every variant has a golden with gradients; a case that carries them holds dO as make_d_out draws
// it and the oracle's gradients, which `check` reads as a kernel's once the prefix is dropped and
// passes (forward and backward), while the golden itself is judged on its forward output alone.
TEST(Golden, GradientsAreTheOraclesForTheSeedsDo) {
  bool gqa = false, sinks = false, varlen = false, paged = false, fp8 = false, window = false, softcap = false, alibi = false;
  int forward_only = 0;
  for (const GoldenCase& c : golden_cases()) {
    const fs::path path = fs::path(FLASHCHECK_DATA_DIR) / (c.name + ".safetensors");
    SafetensorsFile f = read_safetensors(path);
    SCOPED_TRACE(c.name);
    if (!carries_gradients(c)) {
      ++forward_only;
      for (const auto& [name, t] : f.tensors) EXPECT_NE(name.rfind("golden_", 0), 0u) << name;
      continue;
    }
    const Problem& p = c.problem;
    gqa |= p.heads_q != p.heads_kv, sinks |= p.sinks, varlen |= p.varlen(), paged |= p.paged(), fp8 |= is_fp8(p.dtype);
    window |= !p.window.none(), softcap |= p.softcap != 0, alibi |= p.alibi != Alibi::none;
    for (const char* t : kGradientTensors) EXPECT_TRUE(f.tensors.count(t)) << t;
    EXPECT_EQ(f.tensors.count("golden_dsinks"), p.sinks ? 1u : 0u);
    // The golden as it is: the forward judged, nothing read as a kernel's gradient.
    const CheckFileVerdict as_is = check_file(path, CheckFileOptions{});
    EXPECT_TRUE(as_is.forward.pass()) << to_text(as_is.forward);
    EXPECT_FALSE(as_is.backward.has_value());
    // Without the prefix: a check file whose kernel is the rounded oracle. Its dO must be the
    // seed's (check judges against the oracle for the file's dO, so only this ties them).
    SafetensorsFile renamed = read_safetensors(path);
    for (const char* t : {"do", "dq", "dk", "dv", "dsinks"})
      if (renamed.tensors.count(std::string("golden_") + t)) renamed.tensors[t] = renamed.tensors.at(std::string("golden_") + t);
    for (auto it = renamed.tensors.begin(); it != renamed.tensors.end();)
      it = it->first.rfind("golden_", 0) == 0 ? renamed.tensors.erase(it) : std::next(it);
    SafetensorsFile reread = parse_safetensors(serialize_safetensors(renamed));
    const CheckFileCase kernel_file = [&] {
      try {
        return read_check_case(reread, false);
      } catch (const CannotTest& e) {  // a paged cache whose sequences share a slot: not judged yet
        EXPECT_TRUE(p.paged()) << e.what();
        return CheckFileCase{};
      }
    }();
    if (!kernel_file.gradients) continue;
    EXPECT_EQ(kernel_file.gradients->d_out, make_d_out(p, c.seed));
    const fs::path out = fs::temp_directory_path() / ("fc_golden_grad_" + std::to_string(::getpid()) + ".safetensors");
    spit(out, serialize_safetensors(renamed));
    const CheckFileVerdict v = check_file(out, CheckFileOptions{});
    fs::remove(out);
    ASSERT_TRUE(v.backward.has_value());
    EXPECT_TRUE(v.pass()) << to_text(v.forward) << to_text(*v.backward);
  }
  EXPECT_GE(forward_only, 1);
  EXPECT_TRUE(gqa && sinks && varlen && paged && fp8 && window && softcap && alibi);
}

// One element of a gradient changed well past tolerance is found, named by its tensor, and
// protected like an output: regen refuses to overwrite it, --force restores the committed bytes.
TEST(Golden, AlteredGradientElementIsNamed) {
  std::mt19937_64 gen(flashcheck::testing::seed_for(605));
  // Any gradient tensor of any case, but one that is not all zeros (with one-hot softmax rows, as
  // Dist::large's, dS and so dQ and dK are exactly 0).
  std::vector<std::pair<const GoldenCase*, std::string>> candidates;
  for (const GoldenCase* g : gradient_cases()) {
    const SafetensorsFile f = read_safetensors(fs::path(FLASHCHECK_DATA_DIR) / (g->name + ".safetensors"));
    for (const auto& [name, t] : f.tensors) {
      if (name.rfind("golden_d", 0) != 0 || name == "golden_do") continue;
      const auto x = t.to_f32(name);
      if (std::any_of(x.begin(), x.end(), [](float e) { return std::isfinite(e) && e != 0; })) candidates.emplace_back(g, name);
    }
  }
  ASSERT_GE(candidates.size(), 20u);
  const auto& [cp, tensor] = candidates[std::uniform_int_distribution<size_t>(0, candidates.size() - 1)(gen)];
  const GoldenCase& c = *cp;
  const fs::path dir = copy_of_data("grad");
  const Snapshot committed = snapshot(dir);
  const fs::path file = dir / (c.name + ".safetensors");
  SafetensorsFile f = read_safetensors(file);
  StTensor& t = f.tensors.at(tensor);
  std::vector<float> x = t.to_f32(tensor);
  float big = 0;
  for (float e : x) big = std::max(big, std::isfinite(e) ? std::fabs(e) : 0.0f);
  size_t at = 0;  // an element far above the 2^-30 of the largest that verify allows
  do at = std::uniform_int_distribution<size_t>(0, x.size() - 1)(gen);
  while (!(std::fabs(x[at]) >= big * 0x1p-10f));
  x[at] *= 2;
  t = make_tensor(from_st(t.dtype).value(), t.shape, x);
  spit(file, serialize_safetensors(f));
  SCOPED_TRACE(c.name + " tensor " + tensor + " element " + std::to_string(at));
  const auto r = result_for(golden_check(dir), c.name);
  EXPECT_EQ(r.verdict(), "hash and values") << joined(r);
  EXPECT_NE(joined(r).find("tensor '" + tensor + "': 1 element(s) beyond tolerance, first " + std::to_string(at)), std::string::npos)
      << joined(r);
  std::ostringstream log;
  EXPECT_EQ(golden_regen(dir, false, log).refused, 1);
  EXPECT_EQ(golden_regen(dir, true, log).written, 1);
  EXPECT_TRUE(snapshot(dir) == committed);
  fs::remove_all(dir);
}

// A gradient tensor missing from a case that carries them is a layout finding naming it (the
// file still parses and its forward checks clean, so nothing else would notice).
TEST(Golden, MissingGradientIsALayoutFinding) {
  std::mt19937_64 gen(flashcheck::testing::seed_for(606));
  const auto cases = gradient_cases();
  const GoldenCase& c = *cases[std::uniform_int_distribution<size_t>(0, cases.size() - 1)(gen)];
  std::vector<std::string> names(std::begin(kGradientTensors), std::end(kGradientTensors));
  names.push_back("golden_do");
  const std::string tensor = names[std::uniform_int_distribution<size_t>(0, names.size() - 1)(gen)];
  const fs::path dir = copy_of_data("nograd");
  const fs::path file = dir / (c.name + ".safetensors");
  SafetensorsFile f = read_safetensors(file);
  ASSERT_EQ(f.tensors.erase(tensor), 1u);
  spit(file, serialize_safetensors(f));
  SCOPED_TRACE(c.name + " without " + tensor);
  const auto r = result_for(golden_check(dir), c.name);
  EXPECT_EQ(r.verdict(), "metadata/layout") << joined(r);
  EXPECT_NE(joined(r).find("tensor '" + tensor + "' is missing"), std::string::npos) << joined(r);
  const fs::path log = fs::temp_directory_path() / ("fc_golden_nograd_" + std::to_string(::getpid()) + ".log");
  EXPECT_EQ(cli("golden verify --dir '" + dir.string() + "'", log), kMismatch);
  const auto bytes = slurp(log);
  const std::string text(bytes.begin(), bytes.end());
  const size_t line = text.find("FAIL " + c.name + " [metadata/layout]");
  EXPECT_NE(line, std::string::npos) << text;
  EXPECT_LT(text.find("tensor '" + tensor + "' is missing", line), text.find('\n', line)) << text;
  fs::remove(log);
  fs::remove_all(dir);
}

// Regen is idempotent: into an empty folder it writes the committed bytes (gradients included),
// and a second regen there writes nothing.
// A golden committed on a machine whose BLAS sums in another order: an output element one bit off
// what this build generates, and manifest.json's hash of that very file (as a commit from there
// records it). regen keeps it byte for byte (nothing refused, nothing written) and says so; verify
// passes it. (Refused before: f32_equal_scores's dQ, fp64 noise where the truth is 0, took other bits
// under OpenBLAS's Cooperlake kernels than under its Haswell ones.) The same flip without the
// manifest's hash is corruption, refused (RefusedRegenChangesNothingAndVerifyStillFails).
TEST(Golden, AGoldenCommittedWithAnotherBlasIsKept) {
  std::mt19937_64 gen(flashcheck::testing::seed_for(609));
  const fs::path dir = copy_of_data("otherblas");
  const Flip f = pick_element(gen, "o_f32");
  const fs::path file = dir / (f.c->name + ".safetensors");
  auto bytes = slurp(file);
  const std::string old_hash = sha256_hex(bytes);
  bytes[f.byte] ^= 1;  // 1 ulp: within golden verify's tolerance
  spit(file, bytes);
  auto manifest = slurp(dir / "manifest.json");
  std::string text(manifest.begin(), manifest.end());
  const size_t at = text.find(old_hash);
  ASSERT_NE(at, std::string::npos);
  text.replace(at, old_hash.size(), sha256_hex(bytes));
  spit(dir / "manifest.json", std::vector<uint8_t>(text.begin(), text.end()));
  const Snapshot committed = snapshot(dir);
  SCOPED_TRACE(f.c->name + " at byte " + std::to_string(f.byte));

  std::ostringstream log;
  const GoldenStatus st = golden_regen(dir, false, log);
  EXPECT_EQ(st.refused, 0) << log.str();
  EXPECT_EQ(st.written, 0) << log.str();
  EXPECT_EQ(st.unchanged, static_cast<int>(golden_cases().size())) << log.str();
  EXPECT_NE(log.str().find("kept: " + file.string()), std::string::npos) << log.str();
  EXPECT_TRUE(snapshot(dir) == committed) << "regen changed a golden it should keep";
  std::ostringstream v;
  EXPECT_EQ(golden_verify(dir, v), 0) << v.str();
  fs::remove_all(dir);
}

TEST(Golden, RegenIsIdempotent) {
  const fs::path dir = fs::temp_directory_path() / ("fc_golden_regen_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  std::ostringstream log;
  EXPECT_EQ(golden_regen(dir, false, log).written, static_cast<int>(golden_cases().size()));
  const Snapshot first = snapshot(dir);
  const GoldenStatus again = golden_regen(dir, false, log);
  EXPECT_EQ(again.written, 0);
  EXPECT_EQ(again.unchanged, static_cast<int>(golden_cases().size()));
  EXPECT_TRUE(snapshot(dir) == first);
  // data/ is what this build generates, up to the oracle's reproducibility (another BLAS kernel's
  // summation order): a regen over it writes and refuses nothing.
  const fs::path committed = copy_of_data("regen");
  const Snapshot before = snapshot(committed);
  std::ostringstream over;
  const GoldenStatus st = golden_regen(committed, false, over);
  EXPECT_EQ(st.written + st.refused, 0) << "data/ is not what this build generates: flashcheck golden regen --force\n" << over.str();
  EXPECT_TRUE(snapshot(committed) == before) << over.str();
  fs::remove_all(committed);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace flashcheck
