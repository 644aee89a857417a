#include "verify/report.h"

#include <algorithm>
#include <cmath>
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

std::string to_text(const Report& r) {
  std::ostringstream os;
  os.precision(6);
  os << (r.pass() ? "PASS" : "FAIL") << "  " << to_string(r.problem) << "\n";
  os << "  rows checked per (b,h): " << r.rows_checked << (r.sampled ? " (sampled)" : "") << ", elements: " << r.elements
     << "\n";
  for (auto& c : r.criteria)
    os << "  " << (c.pass ? "ok  " : "FAIL") << " " << c.name << ": " << c.value << " (limit " << c.limit << ") — "
       << c.detail << "\n";
  os << "  metrics: cos=" << r.cosine << " rel_l2=" << r.rel_l2 << " max_abs=" << r.max_abs
     << " baseline_max_abs=" << r.baseline_max_abs << " ulp_max=" << (r.ulp_max == kNanUlp ? -1.0 : double(r.ulp_max))
     << " ulp_mean=" << r.ulp_mean << " rounding_bias=" << r.rounding_bias;
  if (r.lse_max_abs) os << " lse_max_abs=" << *r.lse_max_abs << " lse_max_rel=" << *r.lse_max_rel;
  os << "\n";
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
  j["metrics"] = {{"cosine", num(r.cosine)},         {"rel_l2", num(r.rel_l2)},
                  {"max_abs", num(r.max_abs)},       {"baseline_max_abs", num(r.baseline_max_abs)},
                  {"ulp_max", r.ulp_max == kNanUlp ? nlohmann::json("nan") : nlohmann::json(r.ulp_max)},
                  {"ulp_mean", num(r.ulp_mean)},     {"ulp_over_n", r.ulp_over_n},
                  {"rounding_bias", num(r.rounding_bias)},
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
  return j;
}

}  // namespace flashcheck
