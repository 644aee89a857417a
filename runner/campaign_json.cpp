#include "runner/campaign_json.h"

#include "verify/backward_report.h"

#include <cmath>
#include <map>
#include <stdexcept>

namespace flashcheck {

namespace {

// JSON has no NaN or infinity: verdicts carry them as strings (as a report's criteria do), so a
// merge recounts exactly what the run counted.
nlohmann::json num(double x) {
  if (std::isfinite(x)) return x;
  return std::isnan(x) ? "nan" : (x > 0 ? "inf" : "-inf");
}

[[noreturn]] void bad(const std::string& what) { throw std::runtime_error(what); }

const nlohmann::json& at(const nlohmann::json& o, const char* key, const std::string& where) {
  if (!o.is_object() || !o.contains(key)) bad(where + ": no '" + key + "'");
  return o.at(key);
}

double read_num(const nlohmann::json& x, const std::string& where) {
  if (x.is_number()) return x.get<double>();
  if (x.is_null() || x == "nan") return std::nan("");  // the summary's own numbers: nlohmann writes NaN as null
  if (x == "inf") return INFINITY;
  if (x == "-inf") return -INFINITY;
  bad(where + " is not a number");
}

int64_t read_whole(const nlohmann::json& x, const std::string& where) {
  if (!x.is_number_integer()) bad(where + " is not a whole number");
  return x.get<int64_t>();
}

std::string read_text(const nlohmann::json& x, const std::string& where) {
  if (!x.is_string()) bad(where + " is not a string");
  return x.get<std::string>();
}

nlohmann::json failure_json(const CaseOutcome& f, int64_t index, const std::string& page) {
  nlohmann::json fj = to_json(f.report);
  if (f.backward) fj["backward"] = to_json(*f.backward);  // a backward case's gradients, apart from its forward's report
  if (f.reproduced) fj["reproduced"] = to_json(*f.reproduced);
  // The case as shrunk (its problem is the report's) and how it ended: the overview page says both.
  fj["case"] = index;
  fj["dist"] = std::string(to_string(f.c.dist));
  fj["input_seed"] = f.c.seed;
  if (f.error) fj["error"] = *f.error;
  if (f.abnormal) fj["abnormal"] = {{"criterion", f.abnormal->criterion}, {"detail", f.abnormal->detail}, {"timed_out", f.abnormal->timed_out}};
  if (!page.empty()) fj["html_page"] = page;
  return fj;
}

const char* bound_name(Criterion::Bound b) {
  return b == Criterion::Bound::at_least ? "at_least" : b == Criterion::Bound::magnitude_at_most ? "magnitude_at_most" : "at_most";
}

Criterion::Bound bound_from(const std::string& s, const std::string& where) {
  if (s == "at_most") return Criterion::Bound::at_most;
  if (s == "at_least") return Criterion::Bound::at_least;
  if (s == "magnitude_at_most") return Criterion::Bound::magnitude_at_most;
  bad(where + ": bound '" + s + "' is none of at_most, at_least, magnitude_at_most");
}

// The space drawn from (axes, declared values); the counts per point are the verdicts'.
nlohmann::json coverage_json(const Coverage& c) { return {{"axes", c.axes}, {"declared", c.declared}}; }

nlohmann::json variant_json(const VariantSummary& s, const std::vector<std::string>& pages) {
  nlohmann::json v{{"name", s.name}, {"cases", s.cases}, {"passed", s.passed}, {"failed", s.failed},
                   {"skipped", s.skipped}, {"worst_ulp", s.worst_ulp}, {"worst_cos", s.worst_cos}};
  if (s.unavailable) v["unavailable"] = *s.unavailable;
  v["judged"] = s.judged;
  if (!s.judged) v["worst_ulp"] = v["worst_cos"] = nullptr;  // nothing judged: no number
  if (!s.failed_by.empty()) v["failed_by"] = s.failed_by;
  if (!s.skipped_by.empty()) v["skipped_by"] = s.skipped_by;
  if (s.first_abnormal) v["first_abnormal"] = *s.first_abnormal;
  if (s.not_run) v["not_run"] = s.not_run;
  if (s.unload_failure) v["unload_failure"] = *s.unload_failure;
  if (s.tightest)
    v["tightest"] = {{"criterion", s.tightest->criterion}, {"value", s.tightest->value},
                     {"limit", s.tightest->limit}, {"case", s.tightest->case_index}, {"text", to_text(*s.tightest)},
                     {"ratio", std::isfinite(s.tightest->ratio) ? nlohmann::json(s.tightest->ratio) : nlohmann::json("inf")}};
  if (!s.unavailable) v["coverage"] = coverage_json(s.coverage);
  for (size_t k = 0; k < s.failures.size(); ++k)
    v["failures"].push_back(failure_json(s.failures[k], k < s.failure_cases.size() ? s.failure_cases[k] : -1,
                                         k < pages.size() ? pages[k] : ""));
  v["verdicts"] = nlohmann::json::array();
  for (const CaseVerdict& c : s.verdicts) v["verdicts"].push_back(to_json(c));
  return v;
}

CaseVerdict verdict_from_json(const nlohmann::json& j, const std::string& where) {
  CaseVerdict v;
  v.index = read_whole(at(j, "case", where), where + " 'case'");
  const std::string w = where + " case " + std::to_string(v.index);
  const std::string kind = read_text(at(j, "verdict", w), w + " 'verdict'");
  if (kind == "passed") v.kind = CaseVerdict::Kind::passed;
  else if (kind == "failed") v.kind = CaseVerdict::Kind::failed;
  else if (kind == "skipped") v.kind = CaseVerdict::Kind::skipped;
  else bad(w + ": verdict '" + kind + "' is none of passed, failed, skipped");
  if (j.contains("skipped")) v.skipped = read_text(j.at("skipped"), w + " 'skipped'");
  if (j.contains("failed_by"))
    for (const auto& f : j.at("failed_by")) v.failed_by.push_back(read_text(f, w + " 'failed_by'"));
  v.judged = j.value("judged", false);
  v.error = j.value("error", false);
  v.lost = j.value("lost", false);
  if (j.contains("abnormal")) {
    const nlohmann::json& a = j.at("abnormal");
    v.abnormal = AbnormalEnd{read_text(at(a, "criterion", w), w + " abnormal 'criterion'"),
                             read_text(at(a, "detail", w), w + " abnormal 'detail'"), a.value("timed_out", false)};
  }
  if (j.contains("point")) {
    const nlohmann::json& pt = j.at("point");
    if (!pt.is_object()) bad(w + " 'point' is not an object");
    for (const auto& [axis, value] : pt.items()) v.point[axis] = read_text(value, w + " point '" + axis + "'");
  }
  if (v.judged) {
    const nlohmann::json& u = at(j, "ulp_max", w);
    if (!u.is_number_unsigned()) bad(w + " 'ulp_max' is not a whole number");
    v.ulp_max = u.get<uint64_t>();
    if (j.contains("cosine")) v.cosine = read_num(j.at("cosine"), w + " 'cosine'");
    if (j.contains("tightest")) {
      const nlohmann::json& t = j.at("tightest");
      v.tightest = Tightness{read_text(at(t, "criterion", w), w + " tightest 'criterion'"), read_num(at(t, "value", w), w + " tightest 'value'"),
                             read_num(at(t, "limit", w), w + " tightest 'limit'"), read_num(at(t, "ratio", w), w + " tightest 'ratio'"),
                             v.index, bound_from(read_text(at(t, "bound", w), w + " tightest 'bound'"), w)};
    }
  }
  return v;
}

Reproduction reproduction_from_json(const nlohmann::json& j, const std::string& where) {
  Reproduction r;
  r.runs = static_cast<int>(read_whole(at(j, "runs", where), where + " 'runs'"));
  r.failed = static_cast<int>(read_whole(at(j, "failed", where), where + " 'failed'"));
  r.fresh_processes = at(j, "fresh_processes", where).get<bool>();
  return r;
}

}  // namespace

nlohmann::json campaign_identity(const CampaignOptions& opt, const std::string& kernel, const std::vector<std::string>& plugins) {
  nlohmann::json dtypes = nlohmann::json::array();
  for (DType d : opt.dtypes) dtypes.push_back(std::string(to_string(d)));
  nlohmann::json allowed = nullptr, required = nlohmann::json::array();  // null: every declared variant
  if (opt.variants.allowed) {
    allowed = nlohmann::json::array();
    for (VariantName n : *opt.variants.allowed) allowed.push_back(std::string(to_string(n)));
  }
  for (VariantName n : opt.variants.required) required.push_back(std::string(to_string(n)));
  return {{"seed", opt.seed},
          {"cases", opt.cases},
          {"kernel", kernel},
          {"plugins", plugins},
          {"dtypes", dtypes},
          {"max_seq", opt.max_seq},
          {"max_work", opt.max_work},
          {"max_rows", opt.max_rows},
          {"load", opt.load},
          {"big", opt.big},
          {"oracle", opt.oracle == OracleChoice::cpu ? "cpu" : opt.oracle == OracleChoice::gpu ? "gpu" : "auto"},
          {"shrink", opt.shrink},
          {"fail_fast", opt.fail_fast},
          {"isolation", opt.isolation.enabled},
          {"timeout_s", opt.isolation.timeout_s ? nlohmann::json(*opt.isolation.timeout_s) : nlohmann::json(nullptr)},
          {"max_timeouts", opt.max_timeouts},
          {"max_failures_kept", opt.max_failures_kept},
          {"confirm_runs", opt.confirm_runs},
          {"variants", allowed},
          {"require", required}};
}

CampaignRules campaign_rules(const nlohmann::json& id) {
  CampaignRules r;
  const std::string w = "campaign";
  r.cases = read_whole(at(id, "cases", w), "campaign 'cases'");
  const nlohmann::json& seed = at(id, "seed", w);
  if (!seed.is_number_unsigned() && !(seed.is_number_integer() && seed.get<int64_t>() >= 0)) bad("campaign 'seed' is not a whole number");
  r.seed = seed.get<uint64_t>();
  r.max_timeouts = read_whole(at(id, "max_timeouts", w), "campaign 'max_timeouts'");
  r.max_failures_kept = read_whole(at(id, "max_failures_kept", w), "campaign 'max_failures_kept'");
  const nlohmann::json& ff = at(id, "fail_fast", w);
  if (!ff.is_boolean()) bad("campaign 'fail_fast' is not true or false");
  r.fail_fast = ff.get<bool>();
  if (r.cases < 1 || r.max_timeouts < 0 || r.max_failures_kept < 0) bad("campaign: 'cases', 'max_timeouts' or 'max_failures_kept' out of range");
  return r;
}

nlohmann::json to_json(const Reproduction& r) {
  return {{"runs", r.runs}, {"failed", r.failed}, {"flaky", !r.confirmed()}, {"fresh_processes", r.fresh_processes}};
}

nlohmann::json to_json(const CaseVerdict& v) {
  nlohmann::json j{{"case", v.index},
                   {"verdict", v.kind == CaseVerdict::Kind::passed   ? "passed"
                               : v.kind == CaseVerdict::Kind::failed ? "failed"
                                                                     : "skipped"}};
  if (v.kind == CaseVerdict::Kind::skipped) j["skipped"] = v.skipped;
  if (!v.failed_by.empty()) j["failed_by"] = v.failed_by;
  if (v.error) j["error"] = true;
  if (v.lost) j["lost"] = true;
  if (v.abnormal) j["abnormal"] = {{"criterion", v.abnormal->criterion}, {"detail", v.abnormal->detail}, {"timed_out", v.abnormal->timed_out}};
  if (!v.point.empty()) j["point"] = v.point;
  if (v.judged) {
    j["judged"] = true;
    j["ulp_max"] = v.ulp_max;
    if (v.cosine) j["cosine"] = num(*v.cosine);
    if (v.tightest)
      j["tightest"] = {{"criterion", v.tightest->criterion}, {"value", num(v.tightest->value)},
                       {"limit", num(v.tightest->limit)}, {"ratio", num(v.tightest->ratio)},
                       {"bound", bound_name(v.tightest->bound)}};
  }
  return j;
}

nlohmann::json to_json(const CampaignReport& r) {
  nlohmann::json j;
  j["seed"] = r.campaign.value("seed", nlohmann::json(nullptr));
  j["shard"] = std::to_string(r.shard_index) + "/" + std::to_string(r.shard_count);
  j["cases"] = r.campaign.value("cases", nlohmann::json(nullptr));
  j["campaign"] = r.campaign;
  j["finished"] = r.finished;
  j["variants"] = nlohmann::json::array();
  for (size_t k = 0; k < r.variants.size(); ++k)
    j["variants"].push_back(variant_json(r.variants[k], k < r.pages.size() ? r.pages[k] : std::vector<std::string>{}));
  return j;
}

CampaignReport campaign_report_from_json(const nlohmann::json& j) {
  CampaignReport r;
  if (!j.is_object()) bad("not a flashcheck run report (not a JSON object)");
  if (!j.contains("campaign"))
    bad("not a flashcheck run --json report of this version (no 'campaign': written by an older flashcheck, or by another command)");
  r.campaign = j.at("campaign");
  (void)campaign_rules(r.campaign);  // the fields a merge needs are there and in range
  const std::string shard = read_text(at(j, "shard", "report"), "'shard'");
  const size_t slash = shard.find('/');
  try {
    if (slash == std::string::npos) throw std::invalid_argument("no /");
    size_t used = 0;
    r.shard_index = std::stoll(shard.substr(0, slash), &used);
    if (used != slash) throw std::invalid_argument("trailing");
    r.shard_count = std::stoll(shard.substr(slash + 1), &used);
    if (used != shard.size() - slash - 1) throw std::invalid_argument("trailing");
  } catch (const std::exception&) {
    bad("'shard' is not i/N: '" + shard + "'");
  }
  if (r.shard_count < 1 || r.shard_index < 0 || r.shard_index >= r.shard_count) bad("'shard' is not i/N with 0 <= i < N: '" + shard + "'");
  const nlohmann::json& fin = at(j, "finished", "report");
  if (!fin.is_boolean()) bad("'finished' is not true or false");
  r.finished = fin.get<bool>();
  if (j.contains("error")) r.error = read_text(j.at("error"), "'error'");
  const nlohmann::json& variants = at(j, "variants", "report");
  if (!variants.is_array()) bad("'variants' is not a list");
  for (const nlohmann::json& vj : variants) {
    const std::string name = read_text(at(vj, "name", "a variant"), "a variant's 'name'");
    const std::string where = "variant '" + name + "'";
    // Everything counted is counted again from the verdicts, as the run counted it: a report whose
    // numbers are not its verdicts' is damaged or edited, and refused.
    VariantSummary s;
    s.name = name;
    if (vj.contains("coverage")) {
      const nlohmann::json& cov = vj.at("coverage");
      try {
        s.coverage.axes = at(cov, "axes", where).get<std::vector<std::string>>();
        s.coverage.declared = at(cov, "declared", where).get<std::map<std::string, std::vector<std::string>>>();
      } catch (const nlohmann::json::exception&) {
        bad(where + ": 'coverage' is not axes and declared values");
      }
    }
    for (const nlohmann::json& c : at(vj, "verdicts", where)) count_case(s, verdict_from_json(c, where));
    finish_counts(s);
    if (vj.contains("unavailable")) s.unavailable = read_text(vj.at("unavailable"), where + " 'unavailable'");
    if (vj.contains("not_run")) s.not_run = read_whole(vj.at("not_run"), where + " 'not_run'");
    if (vj.contains("unload_failure")) s.unload_failure = read_text(vj.at("unload_failure"), where + " 'unload_failure'");
    std::vector<std::string> pages;
    if (vj.contains("failures"))
      for (const nlohmann::json& fj : vj.at("failures")) {
        CaseOutcome f;
        try {
          f.report = report_from_json(fj);
        } catch (const std::exception& e) {
          bad(where + ": a failure's " + e.what());
        }
        f.c.problem = f.report.problem;
        try {
          f.c.dist = parse_dist(read_text(at(fj, "dist", where + " failure"), where + " failure 'dist'"));
        } catch (const std::invalid_argument& e) {
          bad(where + ": a failure's 'dist': " + e.what());
        }
        const nlohmann::json& seed = at(fj, "input_seed", where + " failure");
        if (!seed.is_number_unsigned()) bad(where + ": a failure's 'input_seed' is not a whole number");
        f.c.seed = seed.get<uint64_t>();
        if (fj.contains("error")) f.error = read_text(fj.at("error"), where + " failure 'error'");
        if (fj.contains("abnormal")) {
          const nlohmann::json& a = fj.at("abnormal");
          f.abnormal = AbnormalEnd{read_text(at(a, "criterion", where), where + " failure abnormal 'criterion'"),
                                   read_text(at(a, "detail", where), where + " failure abnormal 'detail'"), a.value("timed_out", false)};
        }
        if (fj.contains("reproduced")) f.reproduced = reproduction_from_json(fj.at("reproduced"), where + " 'reproduced'");
        if (fj.contains("backward")) {  // a backward case's gradients, judged apart from its forward
          try {
            f.backward = backward_report_from_json(fj.at("backward"));
          } catch (const std::exception& e) {
            bad(where + ": a failure's " + e.what());
          }
        }
        s.failures.push_back(std::move(f));
        s.repro.push_back(s.failures.back().report.repro);
        s.failure_cases.push_back(read_whole(at(fj, "case", where + " failure"), where + " failure 'case'"));
        pages.push_back(fj.contains("html_page") ? read_text(fj.at("html_page"), where + " 'html_page'") : "");
      }
    // Compared as written (NaN is written as null), key by key, to name the field that differs.
    const nlohmann::json again = variant_json(s, pages);
    for (const auto& [key, value] : vj.items())
      if (!again.contains(key) || again.at(key).dump() != value.dump())
        bad(where + ": '" + key + "' is not what its verdicts and failures give (the file was damaged or edited)");
    for (const auto& [key, value] : again.items())
      if (!vj.contains(key)) bad(where + ": no '" + key + "'");
    r.variants.push_back(std::move(s));
    r.pages.push_back(std::move(pages));
  }
  return r;
}

}  // namespace flashcheck
