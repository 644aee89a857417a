#include "verify/check_file.h"

#include <cmath>

#include "verify/judge.h"
#include "verify/names.h"
#include "verify/safetensors.h"
#include "verify/untrusted_text.h"

namespace flashcheck {

namespace {
const StTensor& need(const SafetensorsFile& f, const std::string& name) {
  auto it = f.tensors.find(name);
  if (it == f.tensors.end()) throw CannotTest("missing tensor '" + name + "'");
  return it->second;
}

void expect_shape(const std::string& name, const StTensor& t, const std::vector<int64_t>& want) {
  auto str = [](const std::vector<int64_t>& s) {
    std::string r = "[";
    for (size_t i = 0; i < s.size(); ++i) r += (i ? "," : "") + std::to_string(s[i]);
    return r + "]";
  };
  if (t.shape != want) throw CannotTest("tensor '" + name + "' has shape " + str(t.shape) + ", expected " + str(want));
}

void refuse_nonfinite(const std::string& name, const std::vector<float>& x, const std::vector<int64_t>& shape) {
  // The first non-finite element, found over all threads (inputs reach 10^9 elements).
  int64_t first = static_cast<int64_t>(x.size());
  const int64_t n = first;
#pragma omp parallel for reduction(min : first) schedule(static)
  for (int64_t j = 0; j < n; ++j)
    if (!std::isfinite(x[static_cast<size_t>(j)]) && j < first) first = j;
  for (size_t i = static_cast<size_t>(first); i < x.size(); ++i) {
    if (std::isfinite(x[i])) continue;
    std::string at;
    size_t rem = i;
    std::vector<int64_t> idx(shape.size());
    for (size_t d = shape.size(); d-- > 0;) {
      idx[d] = static_cast<int64_t>(rem % static_cast<size_t>(shape[d]));
      rem /= static_cast<size_t>(shape[d]);
    }
    for (size_t d = 0; d < idx.size(); ++d) at += (d ? "," : "") + std::to_string(idx[d]);
    throw CannotTest("input '" + name + "' holds " + (std::isnan(x[i]) ? "NaN" : "Inf") + " at [" + at +
                     "]; pass --allow-nonfinite-inputs to check NaN/Inf propagation instead");
  }
}
}  // namespace

Report check_file(const std::filesystem::path& path, const CheckFileOptions& opt) {
  std::vector<std::pair<std::string, double>> timings;
  PhaseTimer clock(timings);
  auto lap = [&](const char* phase) { clock.lap(phase); };
  SafetensorsFile f;
  try {
    f = read_safetensors(path);
  } catch (const SafetensorsError& e) {
    throw CannotTest(e.what());
  }
  lap("read file");
  // A misspelt name (`casual`, `LSE`) would otherwise be judged as absent: the default causal mode,
  // or no LSE check at all. Near misses are refused; other unknown names are read past and said.
  const NameAudit names = audit_names(f);
  if (names.refused()) throw CannotTest(names.refusal());
  const StTensor &q = need(f, "q"), &k = need(f, "k"), &v = need(f, "v"), &o = need(f, "o");
  for (auto [name, t] : {std::pair{"q", &q}, {"k", &k}, {"v", &v}, {"o", &o}}) {
    if (t->dtype != StDType::BF16 && t->dtype != StDType::F16 && t->dtype != StDType::F32)
      throw CannotTest(std::string("tensor '") + name + "' has dtype " + to_string(t->dtype) + "; expected BF16, F16 or F32");
    if (t->dtype != o.dtype)
      throw CannotTest(std::string("tensor '") + name + "' is " + to_string(t->dtype) + " but o is " + to_string(o.dtype) +
                       ": q, k, v and o must share one dtype");
    if (t->shape.size() != 4) throw CannotTest(std::string("tensor '") + name + "' must have 4 dimensions [B,H,S,D]");
  }
  Problem p;
  p.dtype = o.dtype == StDType::BF16 ? DType::bf16 : o.dtype == StDType::F16 ? DType::f16 : DType::f32;
  p.batch = q.shape[0];
  p.heads_q = q.shape[1];
  p.seq_q = q.shape[2];
  p.head_dim_qk = q.shape[3];
  p.heads_kv = k.shape[1];
  p.seq_kv = k.shape[2];
  p.head_dim_v = v.shape[3];
  auto meta = [&](const std::string& key, const std::string& dflt) {
    auto it = f.metadata.find(key);
    return it == f.metadata.end() ? dflt : it->second;
  };
  try {
    p.causal = parse_causal(meta("causal", "none"));
    if (f.metadata.count("scale")) {
      const std::string s = f.metadata.at("scale");
      size_t pos = 0;
      double x = std::stod(s, &pos);
      if (pos != s.size()) throw std::invalid_argument("trailing characters");
      p.scale = x;
    }
    validate(p);
  } catch (const std::exception& e) {
    throw CannotTest(std::string("bad problem in file metadata or shapes: ") + e.what());
  }
  const std::string base = meta("lse_base", "e");
  if (base != "e" && base != "2") throw CannotTest("metadata lse_base must be 'e' or '2', got '" + base + "'");
  const std::string empty = meta("empty_row_lse", "-inf");
  if (empty != "-inf" && empty != "+inf") throw CannotTest("metadata empty_row_lse must be '-inf' or '+inf', got '" + empty + "'");
  expect_shape("k", k, {p.batch, p.heads_kv, p.seq_kv, p.head_dim_qk});
  expect_shape("v", v, {p.batch, p.heads_kv, p.seq_kv, p.head_dim_v});
  expect_shape("o", o, {p.batch, p.heads_q, p.seq_q, p.head_dim_v});

  Inputs in{q.to_f32("q"), k.to_f32("k"), v.to_f32("v")};
  const std::vector<float> o_f32 = o.to_f32("o");
  lap("widen to fp32");
  if (!opt.allow_nonfinite_inputs) {
    refuse_nonfinite("q", in.q, q.shape);
    refuse_nonfinite("k", in.k, k.shape);
    refuse_nonfinite("v", in.v, v.shape);
    lap("scan inputs for NaN/Inf");
  }
  std::vector<float> lse;
  KernelOutput out{o_f32, std::nullopt, std::nullopt};
  if (auto it = f.tensors.find("lse"); it != f.tensors.end()) {
    const StTensor& l = it->second;
    if (l.dtype != StDType::F32) throw CannotTest("tensor 'lse' has dtype " + to_string(l.dtype) + "; expected F32");
    expect_shape("lse", l, {p.batch, p.heads_q, p.seq_q});
    lse = l.to_f32("lse");
    out.lse = lse;
  }
  const Declared declared{base == "2" ? LseBase::two : LseBase::e,
                          empty == "-inf" ? EmptyRowLse::neg_inf : EmptyRowLse::pos_inf, opt.tile_q, opt.tile_kv};
  lap("lse");
  Report r = judge(p, in, out, declared, JudgeOptions{opt.max_rows, opt.error_maps, opt.oracle, opt.timings});
  if (opt.timings) r.timings.insert(r.timings.begin(), timings.begin(), timings.end());
  r.repro = "flashcheck check " + shell_word(path.string());  // runs as printed, whatever the path holds
  if (!out.lse) r.notes.push_back("lse: not checked (the file has no 'lse' tensor)");
  for (auto& line : names.ignored_lines()) r.notes.push_back(line);
  return r;
}

}  // namespace flashcheck
