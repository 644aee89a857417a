#include "verify/report.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <stdexcept>

#include "verify/metrics.h"
#include "verify/untrusted_text.h"

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
    // Details can carry a kernel's own error text: one printable line each, so it can neither
    // break the report's layout nor drive the terminal (a forged "reproduce:" line, ANSI escapes).
    for (auto& c : r.criteria) os << "  " << status(c) << " " << c.name << ": " << printable_line(c.detail) << "\n";
  } else {
    os << "  rows checked " << (r.problem.varlen() ? "per head over every sequence: " : "per (b,h): ") << r.rows_checked
       << (r.sampled ? " (sampled)" : "") << ", elements: " << r.elements << "\n";
    for (auto& c : r.criteria)
      os << "  " << status(c) << " " << c.name << ": " << comparison_text(c) << " \u2014 " << printable_line(c.detail) << "\n";
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
    os << "  worst element: (" << (r.problem.varlen() ? "sequence " : "b=") << w.b << ", h=" << w.h << ", row=" << w.row
       << ", col=" << w.col << ") kernel=" << w.kernel << " oracle=" << w.oracle << " in q-tile " << w.q_tile << ", kv-tile "
       << w.kv_tile << " (the row's last visible key)\n";
  }
  if (!r.sequences.empty()) {
    // Which sequence failed: the failing ones (the first few), or that every one passed.
    int64_t failing = 0;
    for (const SequenceVerdict& v : r.sequences) failing += v.pass ? 0 : 1;
    if (failing == 0) {
      os << "  sequences: all " << r.sequences.size() << " pass\n";
    } else {
      os << "  sequences: " << failing << " of " << r.sequences.size() << " fail\n";
      constexpr int64_t kShown = 8;
      int64_t shown = 0;
      for (const SequenceVerdict& v : r.sequences) {
        if (v.pass) continue;
        if (shown++ == kShown) {
          os << "    ... and " << failing - kShown << " more (see --json)\n";
          break;
        }
        os << "    FAIL sequence " << v.b << " (sq=" << v.sq << ", skv=" << v.skv << "): " << v.flagged
           << " flagged elements (unwritten, NaN/Inf, non-zero empty rows, outside contenders), " << v.lse_over
           << " LSE rows past their limit, max|o-r| " << v.max_abs
           << (std::isfinite(v.max_abs_limit) && v.max_abs > v.max_abs_limit ? " > " : " \u2264 ") << v.max_abs_limit << "\n";
      }
    }
  }
  for (const auto& n : r.notes) os << "  note: " << printable_line(n) << "\n";
  if (!r.pass()) {
    os << "  failed:";
    for (auto& f : r.failed()) os << " " << f;
    os << "\n";
  }
  if (!r.repro.empty() && !r.pass()) os << "  reproduce: " << printable_line(r.repro) << "\n";
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
  for (const SequenceVerdict& v : r.sequences)
    j["sequences"].push_back({{"b", v.b}, {"sq", v.sq}, {"skv", v.skv}, {"pass", v.pass}, {"compared", v.compared},
                              {"flagged", v.flagged}, {"lse_over", v.lse_over}, {"max_abs", num(v.max_abs)},
                              {"max_abs_limit", num(v.max_abs_limit)}});
  j["repro"] = r.repro;
  j["notes"] = r.notes;
  for (const auto& [phase, s] : r.timings) j["timings_s"][phase] = s;
  return j;
}

namespace {

// Each read names its field: a shard file cut or edited by hand is refused, never half read.
const nlohmann::json& json_at(const nlohmann::json& o, const char* key) {
  if (!o.is_object() || !o.contains(key)) throw std::runtime_error(std::string("report: no '") + key + "'");
  return o.at(key);
}
double json_num(const nlohmann::json& x, const char* key) {  // to_json's strings for NaN and infinities
  if (x.is_number()) return x.get<double>();
  if (x == "nan") return std::nan("");
  if (x == "inf") return INFINITY;
  if (x == "-inf") return -INFINITY;
  throw std::runtime_error(std::string("report: '") + key + "' is not a number");
}
size_t json_one_of(const nlohmann::json& x, const char* key, std::initializer_list<const char*> names) {
  size_t k = 0;
  for (const char* n : names) {
    if (x == n) return k;
    ++k;
  }
  throw std::runtime_error(std::string("report: '") + key + "' is " + x.dump());
}

}  // namespace

Criterion criterion_from_json(const nlohmann::json& c) {
  Criterion k;
  k.name = json_at(c, "name").get<std::string>();
  k.pass = json_at(c, "pass").get<bool>();
  k.role = static_cast<Criterion::Role>(json_one_of(json_at(c, "role"), "role", {"judged", "reported_only", "not_computed"}));
  k.bound = static_cast<Criterion::Bound>(json_one_of(json_at(c, "bound"), "bound", {"at_most", "at_least", "magnitude_at_most"}));
  if (k.role != Criterion::Role::not_computed) k.value = json_num(json_at(c, "value"), "value");  // else null: no value at all
  k.limit = json_num(json_at(c, "limit"), "limit");
  k.detail = json_at(c, "detail").get<std::string>();
  return k;
}

Report report_from_json(const nlohmann::json& j) {
  constexpr auto at = json_at;
  constexpr auto num = json_num;
  auto whole = [](const nlohmann::json& x, const char* key) -> int64_t {
    if (!x.is_number_integer()) throw std::runtime_error(std::string("report: '") + key + "' is not a whole number");
    return x.get<int64_t>();
  };
  Report r;
  try {
    r.problem = parse_problem(at(j, "problem").get<std::string>());
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("report: 'problem': ") + e.what());
  }
  r.rows_checked = whole(at(j, "rows_checked"), "rows_checked");
  r.sampled = at(j, "sampled").get<bool>();
  if (j.contains("criteria"))
    for (const auto& c : j.at("criteria")) r.criteria.push_back(criterion_from_json(c));
  const nlohmann::json& m = at(j, "metrics");
  r.compared = whole(at(m, "compared"), "compared");
  // With no element compared the value metrics are null: what they hold then is never written.
  auto measured = [&](const char* key, double& into) {
    if (!at(m, key).is_null()) into = num(m.at(key), key);
  };
  measured("cosine", r.cosine);
  measured("rel_l2", r.rel_l2);
  measured("max_abs", r.max_abs);
  measured("baseline_max_abs", r.baseline_max_abs);
  const nlohmann::json& ulp = at(m, "ulp_max");
  if (ulp == "nan") r.ulp_max = kNanUlp;
  else if (ulp.is_number_unsigned()) r.ulp_max = ulp.get<uint64_t>();
  else if (!ulp.is_null()) throw std::runtime_error("report: 'ulp_max' is not a whole number");
  measured("ulp_mean", r.ulp_mean);
  r.ulp_over_n = whole(at(m, "ulp_over_n"), "ulp_over_n");
  measured("rounding_bias", r.rounding_bias);
  r.distinct_pairs = num(at(m, "distinct_pairs"), "distinct_pairs");
  r.elements = whole(at(m, "elements"), "elements");
  r.nan_mismatches = whole(at(m, "nan_mismatches"), "nan_mismatches");
  r.unwritten = whole(at(m, "unwritten"), "unwritten");
  r.empty_row_violations = whole(at(m, "empty_row_violations"), "empty_row_violations");
  if (m.contains("lse_max_abs")) {
    r.lse_max_abs = num(m.at("lse_max_abs"), "lse_max_abs");
    r.lse_max_rel = num(at(m, "lse_max_rel"), "lse_max_rel");
  }
  if (j.contains("worst")) {
    const nlohmann::json& w = j.at("worst");
    r.worst = Location{whole(at(w, "b"), "b"),           whole(at(w, "h"), "h"),
                       whole(at(w, "row"), "row"),       whole(at(w, "col"), "col"),
                       whole(at(w, "q_tile"), "q_tile"), whole(at(w, "kv_tile"), "kv_tile"),
                       num(at(w, "kernel"), "kernel"),   num(at(w, "oracle"), "oracle")};
  }
  if (j.contains("sequences"))
    for (const auto& q : j.at("sequences"))
      r.sequences.push_back({whole(at(q, "b"), "b"), whole(at(q, "sq"), "sq"), whole(at(q, "skv"), "skv"),
                             whole(at(q, "compared"), "compared"), whole(at(q, "flagged"), "flagged"),
                             whole(at(q, "lse_over"), "lse_over"), num(at(q, "max_abs"), "max_abs"),
                             num(at(q, "max_abs_limit"), "max_abs_limit"), at(q, "pass").get<bool>()});
  r.repro = at(j, "repro").get<std::string>();
  r.notes = at(j, "notes").get<std::vector<std::string>>();
  if (j.contains("timings_s"))
    for (const auto& [phase, s] : j.at("timings_s").items()) r.timings.emplace_back(phase, num(s, "timings_s"));
  if (at(j, "pass").get<bool>() != r.pass()) throw std::runtime_error("report: 'pass' disagrees with its criteria");
  return r;
}

}  // namespace flashcheck
