#include "verify/report.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
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

bool within_limit(const Criterion& c) {
  switch (c.bound) {
    case Criterion::Bound::at_least: return c.value >= c.limit;
    case Criterion::Bound::magnitude_at_most: return std::fabs(c.value) <= c.limit;
    case Criterion::Bound::at_most: break;
  }
  return c.value <= c.limit;
}

CriterionStatus status_of(const Criterion& c) {
  if (!c.pass) return CriterionStatus::fail;
  if (c.role == Criterion::Role::not_computed) return CriterionStatus::not_computed;
  const bool within = within_limit(c);
  if (c.role == Criterion::Role::reported_only)
    return within ? CriterionStatus::reported_only : CriterionStatus::over_limit_reported_only;
  return within ? CriterionStatus::ok : CriterionStatus::over_limit;
}

const char* status_text(CriterionStatus s) {
  switch (s) {
    case CriterionStatus::ok: return "ok";
    case CriterionStatus::fail: return "FAIL";
    case CriterionStatus::reported_only: return "reported only";
    case CriterionStatus::over_limit_reported_only: return "over limit (reported only)";
    case CriterionStatus::over_limit: return "over limit";
    case CriterionStatus::not_computed: return "n/a";
  }
  return "?";
}

namespace {

std::string number(double x, int precision) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  std::ostringstream os;
  os.precision(precision);
  os << x;
  return os.str();
}

// Value and limit printed so that their difference shows: at 3 digits 0.99995 against 0.9999
// prints as "1 ≥ 1" or "1 ≥ 0.9999", true and useless. Digits are added until each printed
// number lies within a tenth of the gap between the two (or is exact).
std::pair<std::string, std::string> distinct_numbers(double a, double b, int precision) {
  const double gap = std::fabs(a - b) / 10;
  auto close = [&](const std::string& s, double x) {
    return !std::isfinite(x) || std::fabs(std::strtod(s.c_str(), nullptr) - x) <= gap;
  };
  std::string x = number(a, precision), y = number(b, precision);
  for (int p = precision + 1; (!close(x, a) || !close(y, b)) && p <= 17; ++p) x = number(a, p), y = number(b, p);
  return {x, y};
}

}  // namespace

std::string limit_text(const Criterion& c, int precision) {
  const std::string l = number(c.limit, precision);
  switch (c.bound) {
    case Criterion::Bound::at_least: return "\u2265 " + l;
    case Criterion::Bound::magnitude_at_most: return "|x| \u2264 " + l;
    case Criterion::Bound::at_most: break;
  }
  return "\u2264 " + l;
}

std::string comparison_text(const Criterion& c, int precision) {
  if (c.role == Criterion::Role::not_computed) return "n/a (limit " + limit_text(c, precision) + ")";
  auto [v, l] = distinct_numbers(c.value, c.limit, precision);
  if (std::isnan(c.value)) return v + " (limit " + limit_text(c, precision) + ")";
  const bool within = within_limit(c);
  switch (c.bound) {
    case Criterion::Bound::at_least: return v + (within ? " \u2265 " : " < ") + l;
    case Criterion::Bound::magnitude_at_most: return "|" + v + (within ? "| \u2264 " : "| > ") + l;
    case Criterion::Bound::at_most: break;
  }
  return v + (within ? " \u2264 " : " > ") + l;
}

double limit_used(const Criterion& c) {
  if (c.role == Criterion::Role::not_computed) return NAN;
  const double v = c.bound == Criterion::Bound::magnitude_at_most ? std::fabs(c.value) : c.value;
  if (std::isnan(v)) return INFINITY;
  if (c.bound == Criterion::Bound::at_least) {
    if (c.limit < 1) return std::max(0.0, (1 - v) / (1 - c.limit));  // the share of the margin below 1 used
    return v >= c.limit ? 0.0 : INFINITY;
  }
  if (c.limit > 0) return v / c.limit;
  return v > 0 ? INFINITY : 0.0;  // a count held to 0
}

std::string to_text(const Report& r) {
  std::ostringstream os;
  os.precision(6);
  os << (r.pass() ? "PASS" : "FAIL") << "  " << to_string(r.problem) << "\n";
  auto status = [](const Criterion& c) {
    std::string st = status_text(status_of(c));
    return st.size() < 4 ? st + std::string(4 - st.size(), ' ') : st;
  };
  if (r.elements == 0) {
    // No output was judged (the kernel crashed, hung, exited or reported an error): only what
    // happened is printed, never metrics of an output that does not exist.
    for (auto& c : r.criteria) os << "  " << status(c) << " " << c.name << ": " << c.detail << "\n";
  } else {
    os << "  rows checked per (b,h): " << r.rows_checked << (r.sampled ? " (sampled)" : "") << ", elements: " << r.elements
       << "\n";
    for (auto& c : r.criteria) os << "  " << status(c) << " " << c.name << ": " << comparison_text(c) << " \u2014 " << c.detail << "\n";
    if (r.compared == 0) {
      os << "  metrics: n/a (no element could be compared)";
    } else {
      os << "  metrics: cos=" << r.cosine << " rel_l2=" << r.rel_l2 << " max_abs=" << r.max_abs
         << " baseline_max_abs=" << r.baseline_max_abs << " ulp_max=" << (r.ulp_max == kNanUlp ? -1.0 : double(r.ulp_max))
         << " ulp_mean=" << r.ulp_mean << " rounding_bias=" << r.rounding_bias;
    }
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
  for (auto& c : r.criteria) {
    const bool computed = c.role != Criterion::Role::not_computed;
    j["criteria"].push_back({{"name", c.name},
                             {"pass", c.pass},
                             {"status", status_text(status_of(c))},
                             {"role", c.role == Criterion::Role::judged          ? "judged"
                                      : c.role == Criterion::Role::reported_only ? "reported_only"
                                                                                 : "not_computed"},
                             {"bound", c.bound == Criterion::Bound::at_least            ? "at_least"
                                       : c.bound == Criterion::Bound::magnitude_at_most ? "magnitude_at_most"
                                                                                        : "at_most"},
                             {"value", computed ? num(c.value) : nlohmann::json(nullptr)},
                             {"limit", num(c.limit)},
                             {"text", comparison_text(c)},
                             {"detail", c.detail}});
  }
  // With no element compared the value metrics describe nothing: null, never a perfect-looking 1 or 0.
  auto measured = [&](nlohmann::json v) { return r.compared ? v : nlohmann::json(nullptr); };
  j["metrics"] = {{"cosine", measured(num(r.cosine))},
                  {"rel_l2", measured(num(r.rel_l2))},
                  {"max_abs", measured(num(r.max_abs))},
                  {"baseline_max_abs", measured(num(r.baseline_max_abs))},
                  {"ulp_max", measured(r.ulp_max == kNanUlp ? nlohmann::json("nan") : nlohmann::json(r.ulp_max))},
                  {"ulp_mean", measured(num(r.ulp_mean))},
                  {"ulp_over_n", r.ulp_over_n},
                  {"rounding_bias", measured(num(r.rounding_bias))},
                  {"distinct_pairs", r.distinct_pairs},
                  {"compared", r.compared},
                  {"elements", r.elements},
                  {"nan_mismatches", r.nan_mismatches},
                  {"unwritten", r.unwritten},
                  {"empty_row_violations", r.empty_row_violations}};
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
