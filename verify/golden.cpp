#include "verify/golden.h"

#include <openssl/evp.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "reference/naive.h"
#include "verify/check_file.h"
#include "verify/safetensors.h"

namespace flashcheck {

namespace {
constexpr int kFormatVersion = 1;
Problem P(int64_t b, int64_t hq, int64_t hkv, int64_t sq, int64_t skv, int64_t dqk, int64_t dv, Causal c, DType d) {
  return Problem{b, hq, hkv, sq, skv, dqk, dv, c, {}, d};
}
}  // namespace

const std::vector<GoldenCase>& golden_cases() {
  using C = Causal;
  using D = DType;
  static const std::vector<GoldenCase> cases = [] {
    std::vector<GoldenCase> v{
        {"bf16_basic_d64", P(1, 2, 2, 128, 128, 64, 64, C::none, D::bf16), Dist::normal, 1},
        {"bf16_gqa_tails_br", P(1, 4, 2, 97, 113, 128, 128, C::bottom_right, D::bf16), Dist::normal, 2},
        {"f16_sq_gt_skv_tl", P(2, 2, 2, 113, 97, 64, 64, C::top_left, D::f16), Dist::normal, 3},
        {"f32_empty_rows_br", P(1, 2, 2, 200, 50, 32, 32, C::bottom_right, D::f32), Dist::normal, 4},
        {"bf16_dqk192_dv128", P(1, 1, 1, 65, 65, 192, 128, C::none, D::bf16), Dist::normal, 5},
        {"f16_mqa_d256_br", P(1, 8, 1, 129, 129, 256, 256, C::bottom_right, D::f16), Dist::normal, 6},
        {"bf16_large_values", P(1, 2, 2, 64, 64, 64, 64, C::none, D::bf16), Dist::large, 7},
        {"bf16_outlier_keys_tl", P(1, 2, 2, 256, 256, 128, 128, C::top_left, D::bf16), Dist::outlier_keys, 8},
        {"f32_equal_scores", P(1, 2, 1, 33, 47, 80, 80, C::none, D::f32), Dist::equal_scores, 9},
        {"bf16_constant_rows_br", P(1, 2, 2, 31, 300, 96, 96, C::bottom_right, D::bf16), Dist::constant_rows, 10},
        {"f16_single_key", P(1, 1, 1, 1, 1, 32, 32, C::none, D::f16), Dist::normal, 11},
        {"bf16_s1023_d128_br", P(1, 2, 2, 1023, 1023, 128, 128, C::bottom_right, D::bf16), Dist::normal, 12},
        {"f16_uniform_sq_lt_skv_br", P(1, 3, 1, 17, 255, 40, 40, C::bottom_right, D::f16), Dist::uniform, 13},
    };
    v.push_back({"f32_custom_scale", P(1, 2, 2, 64, 80, 16, 16, C::top_left, D::f32), Dist::normal, 14});
    v.back().problem.scale = 0.5;
    return v;
  }();
  return cases;
}

std::string sha256_hex(const std::vector<uint8_t>& bytes) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), md, &len, EVP_sha256(), nullptr) != 1)
    throw std::runtime_error("OpenSSL SHA-256 failed");
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (unsigned i = 0; i < len; ++i) {
    s += hex[md[i] >> 4];
    s += hex[md[i] & 15];
  }
  return s;
}

std::vector<uint8_t> golden_bytes(const GoldenCase& c) {
  const Problem& p = c.problem;
  const Inputs in = make_inputs(p, c.seed, c.dist);
  const OracleResult r = naive_attention(p, in);
  std::vector<float> o32(r.o.size()), lse(r.lse.size());
  for (size_t i = 0; i < r.o.size(); ++i) o32[i] = static_cast<float>(r.o[i]);
  for (size_t i = 0; i < r.lse.size(); ++i) lse[i] = static_cast<float>(r.lse[i]);
  SafetensorsFile f;
  f.tensors["q"] = make_tensor(p.dtype, {p.batch, p.heads_q, p.seq_q, p.head_dim_qk}, in.q);
  f.tensors["k"] = make_tensor(p.dtype, {p.batch, p.heads_kv, p.seq_kv, p.head_dim_qk}, in.k);
  f.tensors["v"] = make_tensor(p.dtype, {p.batch, p.heads_kv, p.seq_kv, p.head_dim_v}, in.v);
  f.tensors["o"] = make_tensor(p.dtype, {p.batch, p.heads_q, p.seq_q, p.head_dim_v}, o32);  // rounded to nearest even
  f.tensors["o_f32"] = make_f32_tensor({p.batch, p.heads_q, p.seq_q, p.head_dim_v}, o32);
  f.tensors["lse"] = make_f32_tensor({p.batch, p.heads_q, p.seq_q}, lse);
  f.metadata = {{"causal", std::string(to_string(p.causal))},
                {"lse_base", "e"},
                {"problem", to_string(p)},
                {"dist", std::string(to_string(c.dist))},
                {"seed", std::to_string(c.seed)},
                {"format_version", std::to_string(kFormatVersion)}};
  if (p.scale) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", *p.scale);
    f.metadata["scale"] = buf;
  }
  return serialize_safetensors(f);
}

namespace {
std::vector<uint8_t> read_all(const std::filesystem::path& p) {
  std::ifstream is(p, std::ios::binary);
  return {(std::istreambuf_iterator<char>(is)), std::istreambuf_iterator<char>()};
}
}  // namespace

GoldenStatus golden_regen(const std::filesystem::path& dir, bool force, std::ostream& log) {
  std::filesystem::create_directories(dir);
  GoldenStatus st;
  nlohmann::ordered_json manifest;
  manifest["format_version"] = kFormatVersion;
  manifest["generator"] = "flashcheck golden regen (Philox4x32-10 inputs, fp64 oracle)";
  manifest["cases"] = nlohmann::json::array();
  for (const GoldenCase& c : golden_cases()) {
    const auto bytes = golden_bytes(c);
    const std::string file = c.name + ".safetensors";
    const auto path = dir / file;
    std::string hash = sha256_hex(bytes);
    if (std::filesystem::exists(path)) {
      const auto old = read_all(path);
      if (old == bytes) {
        ++st.unchanged;
      } else if (!force) {
        ++st.refused;
        hash = sha256_hex(old);  // the manifest keeps describing what is on disk
        log << "refused: " << path.string() << " differs from what this build generates; --force overwrites it\n";
      } else {
        write_file_atomic(path, bytes);
        ++st.written;
        log << "overwrote: " << path.string() << "\n";
      }
    } else {
      write_file_atomic(path, bytes);
      ++st.written;
      log << "wrote: " << path.string() << "\n";
    }
    manifest["cases"].push_back({{"name", c.name},
                                 {"file", file},
                                 {"problem", to_string(c.problem)},
                                 {"dist", to_string(c.dist)},
                                 {"seed", c.seed},
                                 {"bytes", bytes.size()},
                                 {"sha256", hash}});
  }
  const std::string text = manifest.dump(2) + "\n";
  const auto mpath = dir / "manifest.json";
  const std::vector<uint8_t> mbytes(text.begin(), text.end());
  if (!std::filesystem::exists(mpath) || read_all(mpath) != mbytes) {
    if (std::filesystem::exists(mpath) && !force && st.refused == 0 && st.written == 0)
      log << "manifest.json described other cases; rewritten to match the files\n";
    write_file_atomic(mpath, mbytes);
  }
  return st;
}

int golden_verify(const std::filesystem::path& dir, std::ostream& log) {
  const auto mpath = dir / "manifest.json";
  if (!std::filesystem::exists(mpath)) throw CannotTest("no manifest at " + mpath.string());
  nlohmann::json manifest;
  try {
    manifest = nlohmann::json::parse(read_all(mpath));
  } catch (const std::exception& e) {
    throw CannotTest("malformed " + mpath.string() + ": " + e.what());
  }
  if (!manifest.contains("cases") || !manifest["cases"].is_array()) throw CannotTest(mpath.string() + " has no 'cases' array");
  int failures = 0;
  size_t listed = 0;
  for (const GoldenCase& c : golden_cases()) {
    auto fail = [&](const std::string& why) {
      ++failures;
      log << "FAIL " << c.name << ": " << why << "\n";
    };
    const nlohmann::json* entry = nullptr;
    for (auto& e : manifest["cases"])
      if (e.value("name", "") == c.name) entry = &e;
    if (!entry) {
      fail("not listed in manifest.json");
      continue;
    }
    ++listed;
    const auto path = dir / entry->value("file", c.name + ".safetensors");
    if (!std::filesystem::exists(path)) {
      fail("file " + path.string() + " is missing");
      continue;
    }
    const auto bytes = read_all(path);
    if (sha256_hex(bytes) != entry->value("sha256", "")) {
      fail("SHA-256 of " + path.string() + " does not match the manifest");
      continue;
    }
    SafetensorsFile have, want;
    try {
      have = parse_safetensors(bytes);
      want = parse_safetensors(golden_bytes(c));
    } catch (const SafetensorsError& e) {
      fail(e.what());
      continue;
    }
    bool ok = true;
    for (const char* t : {"q", "k", "v"})
      if (!have.tensors.count(t) || have.tensors.at(t).data != want.tensors.at(t).data) {
        fail(std::string("input '") + t + "' differs from the regenerated bits");
        ok = false;
      }
    for (const char* t : {"o", "o_f32", "lse"}) {
      if (!have.tensors.count(t) || have.tensors.at(t).shape != want.tensors.at(t).shape) {
        fail(std::string("tensor '") + t + "' missing or reshaped");
        ok = false;
        continue;
      }
      const auto a = have.tensors.at(t).to_f32(t), b = want.tensors.at(t).to_f32(t);
      const DType d = std::string(t) == "o" ? c.problem.dtype : DType::f32;
      for (size_t i = 0; i < a.size() && ok; ++i) {
        const bool same = (std::isnan(a[i]) && std::isnan(b[i])) || a[i] == b[i] ||
                          (std::isfinite(a[i]) && std::isfinite(b[i]) && std::fabs(a[i] - b[i]) <=
                               std::fabs(b[i]) * (d == DType::f32 ? 0x1p-23 : 2 * unit_roundoff(d)));
        if (!same) {
          fail(std::string("tensor '") + t + "' element " + std::to_string(i) + ": stored " + std::to_string(a[i]) +
               ", recomputed " + std::to_string(b[i]));
          ok = false;
        }
      }
    }
    if (ok) log << "ok   " << c.name << "\n";
  }
  if (manifest["cases"].size() != listed) {
    ++failures;
    log << "FAIL manifest.json lists " << manifest["cases"].size() << " cases, this build knows " << listed << " of them\n";
  }
  return failures;
}

}  // namespace flashcheck
