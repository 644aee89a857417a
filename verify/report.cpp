#include "verify/report.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <sstream>

#include "verify/metrics.h"

namespace flashcheck {

bool Report::pass() const {
  return std::all_of(criteria.begin(), criteria.end(), [](const Criterion& c) { return c.pass; });
}

std::vector<std::string> Report::failed() const {
  std::vector<std::string> f;
  for (auto& c : criteria)
    if (!c.pass) f.push_back(c.name);
  return f;
}

namespace {

// A criterion's status word as printed: never "ok" for a value past the limit it prints.
std::string status_of(const Criterion& c, bool nothing_compared) {
  if (!c.pass) return "FAIL";
  if (c.detail.rfind("reported only", 0) == 0 || c.detail.rfind("not applicable", 0) == 0) return "(reported only, not judged)";
  static const char* kValueCriteria[] = {"cosine", "rel_l2", "baseline_relative", "ulp"};
  const bool value_criterion = std::find_if(std::begin(kValueCriteria), std::end(kValueCriteria),
                                            [&](const char* n) { return c.name == n; }) != std::end(kValueCriteria);
  // With every element unwritten or NaN-mismatched, the value criteria saw nothing: their passing
  // numbers (cosine 1 of an empty sum) mean nothing either.
  if (value_criterion && nothing_compared) return "n/a (no element could be compared)";
  const bool at_least = c.name == "cosine";
  const bool within = at_least ? c.value >= c.limit : c.value <= c.limit;
  if (!within) return "ok (within its per-element limit; the printed limit is its flat part)";
  return "ok";
}

}  // namespace

std::string to_text(const Report& r) {
  std::ostringstream os;
  os.precision(6);
  os << (r.pass() ? "PASS" : "FAIL") << "  " << to_string(r.problem) << "\n";
  if (r.elements == 0) {
    // No output was judged (the kernel crashed, hung, exited or reported an error): only what
    // happened is printed, never metrics of an output that does not exist.
    for (auto& c : r.criteria) os << "  " << (c.pass ? "ok  " : "FAIL") << " " << c.name << ": " << c.detail << "\n";
  } else {
    os << "  rows checked per (b,h): " << r.rows_checked << (r.sampled ? " (sampled)" : "") << ", elements: " << r.elements
       << "\n";
    const bool nothing_compared = r.compared == 0;
    for (auto& c : r.criteria) {
      const std::string st = status_of(c, nothing_compared);
      os << "  " << (st.size() < 4 ? st + std::string(4 - st.size(), ' ') : st) << " " << c.name << ": " << c.value << " (limit "
         << c.limit << ") — " << c.detail << "\n";
    }
    os << "  metrics: cos=" << r.cosine << " rel_l2=" << r.rel_l2 << " max_abs=" << r.max_abs
       << " baseline_max_abs=" << r.baseline_max_abs << " ulp_max=" << (r.ulp_max == kNanUlp ? -1.0 : double(r.ulp_max))
       << " ulp_mean=" << r.ulp_mean << " rounding_bias=" << r.rounding_bias;
    if (nothing_compared) os << " (over no element: nothing could be compared)";
    if (r.lse_max_abs) os << " lse_max_abs=" << *r.lse_max_abs << " lse_max_rel=" << *r.lse_max_rel;
    os << "\n";
  }
  if (r.worst) {
    const Location& w = *r.worst;
    os << "  worst element: (b=" << w.b << ", h=" << w.h << ", row=" << w.row << ", col=" << w.col << ") kernel=" << w.kernel
       << " oracle=" << w.oracle << " in q-tile " << w.q_tile << ", kv-tile " << w.kv_tile << " (the row's last visible key)\n";
  }
  for (const auto& n : r.notes) os << "  note: " << n << "\n";
  if (!r.pass()) {
    os << "  failed:";
    for (auto& f : r.failed()) os << " " << f;
    os << "\n";
  }
  if (!r.repro.empty() && !r.pass()) os << "  reproduce: " << r.repro << "\n";
  return os.str();
}

nlohmann::json to_json(const Report& r) {
  // JSON has no Inf/NaN: non-finite values are written as strings.
  auto num = [](double x) -> nlohmann::json {
    if (std::isfinite(x)) return x;
    return std::isnan(x) ? "nan" : (x > 0 ? "inf" : "-inf");
  };
  nlohmann::json j;
  j["pass"] = r.pass();
  j["problem"] = to_string(r.problem);
  j["rows_checked"] = r.rows_checked;
  j["sampled"] = r.sampled;
  j["failed"] = r.failed();
  for (auto& c : r.criteria)
    j["criteria"].push_back({{"name", c.name}, {"pass", c.pass}, {"value", num(c.value)}, {"limit", num(c.limit)}, {"detail", c.detail}});
  j["metrics"] = {{"cosine", r.compared ? num(r.cosine) : nlohmann::json(nullptr)},         {"rel_l2", num(r.rel_l2)},
                  {"max_abs", num(r.max_abs)},       {"baseline_max_abs", num(r.baseline_max_abs)},
                  {"ulp_max", r.ulp_max == kNanUlp ? nlohmann::json("nan") : nlohmann::json(r.ulp_max)},
                  {"ulp_mean", num(r.ulp_mean)},     {"ulp_over_n", r.ulp_over_n},
                  {"rounding_bias", num(r.rounding_bias)},   {"compared", r.compared},
                  {"elements", r.elements},          {"nan_mismatches", r.nan_mismatches},
                  {"unwritten", r.unwritten},        {"empty_row_violations", r.empty_row_violations}};
  if (r.lse_max_abs) {
    j["metrics"]["lse_max_abs"] = num(*r.lse_max_abs);
    j["metrics"]["lse_max_rel"] = num(*r.lse_max_rel);
  }
  if (r.worst) {
    const Location& w = *r.worst;
    j["worst"] = {{"b", w.b}, {"h", w.h}, {"row", w.row}, {"col", w.col}, {"q_tile", w.q_tile},
                  {"kv_tile", w.kv_tile}, {"kernel", num(w.kernel)}, {"oracle", num(w.oracle)}};
  }
  j["repro"] = r.repro;
  j["notes"] = r.notes;
  for (const auto& [phase, s] : r.timings) j["timings_s"][phase] = s;
  return j;
}

}  // namespace flashcheck
