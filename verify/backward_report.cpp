#include "verify/backward_report.h"

#include <cmath>
#include <sstream>

#include "verify/untrusted_text.h"

namespace flashcheck {

namespace {

// JSON has no Inf/NaN: non-finite values are strings, as in the forward's report.
nlohmann::json num(double x) {
  if (std::isfinite(x)) return x;
  return std::isnan(x) ? "nan" : (x > 0 ? "inf" : "-inf");
}

// What a gradient's location means: query rows for dQ, keys for dK and dV, heads for the sinks'.
std::string where(const GradientVerdict& g, const GradientLocation& w, bool varlen) {
  std::ostringstream os;
  os.precision(6);
  if (g.name == "dsinks") {
    os << "(h=" << w.h << ")";
  } else {
    os << "(" << (varlen ? "sequence " : "b=") << w.b << (g.name == "dq" ? ", h=" : ", kv head=") << w.h
       << (g.name == "dq" ? ", row=" : ", key=") << w.row << ", col=" << w.col << ")";
  }
  os << " kernel=" << w.kernel << " oracle=" << w.oracle;
  return os.str();
}

nlohmann::json criterion_json(const Criterion& c) {
  const bool computed = c.role != Criterion::Role::not_computed;
  return {{"name", c.name},
          {"pass", c.pass},
          {"status", status_text(status_of(c))},
          {"role", c.role == Criterion::Role::judged          ? "judged"
                   : c.role == Criterion::Role::reported_only ? "reported_only"
                                                              : "not_computed"},
          {"bound", c.bound == Criterion::Bound::at_least ? "at_least" : "at_most"},
          {"value", computed ? num(c.value) : nlohmann::json(nullptr)},
          {"limit", num(c.limit)},
          {"text", comparison_text(c)},
          {"detail", c.detail}};
}

// One criterion's line in the text: status, name, comparison with its limit, detail.
std::string criterion_line(const Criterion& c) {
  std::string st = status_text(status_of(c));
  if (st.size() < 4) st += std::string(4 - st.size(), ' ');
  return st + " " + c.name + ": " + comparison_text(c) + " \u2014 " + printable_line(c.detail);
}

}  // namespace

std::string to_text(const BackwardReport& r) {
  std::ostringstream os;
  os.precision(6);
  os << (r.pass() ? "PASS" : "FAIL") << "  backward  " << to_string(r.problem) << "\n";
  for (const GradientVerdict& g : r.gradients) {
    os << "  " << g.name << " (" << (g.pass() ? "pass" : "FAIL") << "): " << g.elements << " elements, " << g.compared
       << " compared" << (g.unresolved ? ", " + std::to_string(g.unresolved) + " in rows fp32 cannot resolve" : std::string()) << "\n";
    for (const Criterion& c : g.criteria) os << "    " << criterion_line(c) << "\n";
    if (g.compared == 0)
      os << "    metrics: n/a (no element could be compared)\n";
    else
      os << "    metrics: cos=" << g.cosine << " rel_l2=" << g.rel_l2 << " max_abs=" << g.max_abs
         << " baseline_max_abs=" << g.baseline_max_abs << " max|r|=" << g.max_ref << "\n";
    if (g.worst) os << "    worst element: " << where(g, *g.worst, r.problem.varlen()) << "\n";
  }
  for (const Criterion& c : r.checks) os << "  " << criterion_line(c) << "\n";
  for (const std::string& n : r.notes) os << "  note: " << printable_line(n) << "\n";
  if (!r.pass()) {
    os << "  failed:";
    for (const std::string& f : r.failed()) os << " [" << f << "]";
    os << "\n";
    if (!r.repro.empty()) os << "  reproduce: " << printable_line(r.repro) << "\n";
  }
  return os.str();
}

nlohmann::json to_json(const BackwardReport& r) {
  nlohmann::json j;
  j["pass"] = r.pass();
  j["problem"] = to_string(r.problem);
  j["failed"] = r.failed();
  j["gradients"] = nlohmann::json::array();
  for (const GradientVerdict& g : r.gradients) {
    nlohmann::json gj;
    gj["name"] = g.name;
    gj["pass"] = g.pass();
    for (const Criterion& c : g.criteria) gj["criteria"].push_back(criterion_json(c));
    // With nothing compared the value metrics describe nothing: null, never a perfect-looking 1.
    auto measured = [&](double x) { return g.compared ? num(x) : nlohmann::json(nullptr); };
    gj["metrics"] = {{"cosine", measured(g.cosine)},
                     {"rel_l2", measured(g.rel_l2)},
                     {"max_abs", measured(g.max_abs)},
                     {"baseline_max_abs", measured(g.baseline_max_abs)},
                     {"max_ref", num(g.max_ref)},
                     {"atol_ref", num(g.atol_ref)},
                     {"elements", g.elements},
                     {"compared", g.compared},
                     {"unwritten", g.unwritten},
                     {"nan_mismatches", g.nan_mismatches},
                     {"zero_violations", g.zero_violations},
                     {"unresolved", g.unresolved}};
    if (g.worst)
      gj["worst"] = {{"b", g.worst->b},     {"h", g.worst->h},           {"row", g.worst->row},
                     {"col", g.worst->col}, {"kernel", num(g.worst->kernel)}, {"oracle", num(g.worst->oracle)}};
    j["gradients"].push_back(std::move(gj));
  }
  j["checks"] = nlohmann::json::array();
  for (const Criterion& c : r.checks) j["checks"].push_back(criterion_json(c));
  j["notes"] = r.notes;
  j["repro"] = r.repro;
  return j;
}

BackwardReport backward_report_from_json(const nlohmann::json& j) {
  auto at = [](const nlohmann::json& o, const char* key) -> const nlohmann::json& {
    if (!o.is_object() || !o.contains(key)) throw std::runtime_error(std::string("backward report: no '") + key + "'");
    return o.at(key);
  };
  auto value = [](const nlohmann::json& x, const char* key) -> double {
    if (x.is_number()) return x.get<double>();
    if (x == "nan") return std::nan("");
    if (x == "inf") return INFINITY;
    if (x == "-inf") return -INFINITY;
    throw std::runtime_error(std::string("backward report: '") + key + "' is not a number");
  };
  auto whole = [](const nlohmann::json& x, const char* key) -> int64_t {
    if (!x.is_number_integer()) throw std::runtime_error(std::string("backward report: '") + key + "' is not a whole number");
    return x.get<int64_t>();
  };
  BackwardReport r;
  try {
    r.problem = parse_problem(at(j, "problem").get<std::string>());
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("backward report: 'problem': ") + e.what());
  }
  for (const nlohmann::json& gj : at(j, "gradients")) {
    GradientVerdict g;
    g.name = at(gj, "name").get<std::string>();
    if (gj.contains("criteria"))
      for (const nlohmann::json& c : gj.at("criteria")) g.criteria.push_back(criterion_from_json(c));
    const nlohmann::json& m = at(gj, "metrics");
    g.elements = whole(at(m, "elements"), "elements");
    g.compared = whole(at(m, "compared"), "compared");
    g.unwritten = whole(at(m, "unwritten"), "unwritten");
    g.nan_mismatches = whole(at(m, "nan_mismatches"), "nan_mismatches");
    g.zero_violations = whole(at(m, "zero_violations"), "zero_violations");
    g.unresolved = whole(at(m, "unresolved"), "unresolved");
    // Null when nothing was compared: the value stays the struct's own (to_json writes null again).
    auto measured = [&](const char* key, double& into) {
      if (!at(m, key).is_null()) into = value(m.at(key), key);
    };
    measured("cosine", g.cosine);
    measured("rel_l2", g.rel_l2);
    measured("max_abs", g.max_abs);
    measured("baseline_max_abs", g.baseline_max_abs);
    g.max_ref = value(at(m, "max_ref"), "max_ref");
    g.atol_ref = value(at(m, "atol_ref"), "atol_ref");
    if (gj.contains("worst")) {
      const nlohmann::json& w = gj.at("worst");
      g.worst = GradientLocation{whole(at(w, "b"), "b"), whole(at(w, "h"), "h"), whole(at(w, "row"), "row"),
                                 whole(at(w, "col"), "col"), value(at(w, "kernel"), "kernel"), value(at(w, "oracle"), "oracle")};
    }
    if (at(gj, "pass").get<bool>() != g.pass())
      throw std::runtime_error("backward report: " + g.name + "'s 'pass' disagrees with its criteria");
    r.gradients.push_back(std::move(g));
  }
  for (const nlohmann::json& c : at(j, "checks")) r.checks.push_back(criterion_from_json(c));
  r.notes = at(j, "notes").get<std::vector<std::string>>();
  r.repro = at(j, "repro").get<std::string>();
  if (at(j, "pass").get<bool>() != r.pass()) throw std::runtime_error("backward report: 'pass' disagrees with its criteria");
  return r;
}

}  // namespace flashcheck
