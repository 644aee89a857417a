#include "runner/campaign_junit.h"

#include <map>

#include "verify/report_junit.h"
#include "verify/untrusted_text.h"

namespace flashcheck {

namespace {

std::string joined(const std::vector<std::string>& xs, const char* sep = ", ") {
  std::string s;
  for (const std::string& x : xs) s += (s.empty() ? "" : sep) + x;
  return s;
}

// "dtype=bf16 causal=bottom_right". Cases are grouped by the axes with few declared values: a
// dashboard tracks a test case by its name from build to build, so the names must recur whatever the
// seed draws. Head dims and variant combinations are many and drawn: grouped by them, nearly every
// case would be a group of its own under a name the next seed never draws again.
std::string group_name(const Coverage::Point& point) {
  std::string name;
  for (const char* axis : {"dtype", "causal"}) {
    auto it = point.find(axis);
    if (it != point.end() && !it->second.empty()) name += (name.empty() ? "" : " ") + std::string(axis) + "=" + it->second;
  }
  return name.empty() ? "cases" : name;
}

// The whole point a failed case was drawn at: "causal=none dtype=bf16 head_dim=64 heads=GQA variants=plain".
std::string point_text(const Coverage::Point& point) {
  std::string text;
  for (const auto& [axis, value] : point)
    if (!value.empty()) text += (text.empty() ? "" : " ") + axis + "=" + value;
  return text;
}

// "0, 4, 9" (at most `max` numbers, then how many more).
std::string case_list(const std::vector<int64_t>& cases, size_t max = 50) {
  std::string s;
  for (size_t i = 0; i < cases.size() && i < max; ++i) s += (i ? ", " : "") + std::to_string(cases[i]);
  if (cases.size() > max) s += " and " + std::to_string(cases.size() - max) + " more";
  return s;
}

struct Group {
  std::vector<int64_t> passed, skipped;
  std::map<std::string, int64_t> reasons;  // why its cases were skipped
};

JunitCase group_case(const std::string& classname, const std::string& name, const Group& g) {
  JunitCase t;
  t.classname = classname;
  t.name = name;
  std::vector<std::string> why;
  for (const auto& [reason, n] : g.reasons) why.push_back(std::to_string(n) + " x " + printable_line(reason));
  if (g.passed.empty()) {  // nothing here was judged: a dashboard must not count it as passed
    t.outcome = JunitCase::Outcome::skipped;
    t.message = std::to_string(g.skipped.size()) + " case" + (g.skipped.size() == 1 ? "" : "s") + " skipped: " + joined(why, "; ");
    return t;
  }
  t.out = std::to_string(g.passed.size()) + " passed (cases " + case_list(g.passed) + ")";
  t.out += "\n";
  if (!g.skipped.empty()) t.out += std::to_string(g.skipped.size()) + " skipped (cases " + case_list(g.skipped) + "): " + joined(why, "; ") + "\n";
  return t;
}

JunitCase failed_case(const std::string& classname, const VariantSummary& s, const CaseVerdict& v) {
  const std::string drawn = point_text(v.point);
  for (size_t k = 0; k < s.failures.size() && k < s.failure_cases.size(); ++k) {
    if (s.failure_cases[k] != v.index) continue;
    const CaseOutcome& f = s.failures[k];
    const std::string repro = k < s.repro.size() ? s.repro[k] : f.report.repro;
    const bool flaky = f.reproduced && !f.reproduced->confirmed();
    const std::string note = flaky ? "flaky (" + to_text(*f.reproduced) + ")" : "";
    JunitCase t = f.backward ? report_case(f.report, *f.backward, classname, "case " + std::to_string(v.index), repro, note)
                             : report_case(f.report, classname, "case " + std::to_string(v.index), repro, note);
    t.outcome = JunitCase::Outcome::failed;  // the verdict failed, whatever the kept report says
    if (t.type.empty()) t.type = joined(v.failed_by);
    std::string how = "drawn as case " + std::to_string(v.index) + " (" + drawn + "), shrunk to " + to_string(f.c.problem) +
                      " dist=" + std::string(to_string(f.c.dist)) + " input_seed=" + std::to_string(f.c.seed);
    if (f.reproduced) how += "; re-run: " + to_text(*f.reproduced);
    t.detail = how + "\n" + t.detail;
    return t;
  }
  // A failure past those kept (the run shrinks and re-runs only its first few): no reproduce line of its own.
  JunitCase t;
  t.classname = classname;
  t.name = "case " + std::to_string(v.index);
  t.outcome = JunitCase::Outcome::failed;
  t.type = joined(v.failed_by);
  t.message = t.type;
  if (v.abnormal) t.message += ": " + printable_line(v.abnormal->detail);
  t.message += v.lost ? "" : "; not shrunk: only the kernel's first failures are kept with reproduce lines";
  t.detail = "case " + std::to_string(v.index) + " (" + drawn + ") failed " + t.type + "\n";
  return t;
}

}  // namespace

std::vector<JunitSuite> campaign_junit(const CampaignReport& report, const std::string& command,
                                       const std::optional<std::string>& error) {
  std::vector<std::pair<std::string, std::string>> properties;
  for (const auto& [key, value] : report.campaign.items())
    properties.emplace_back(key, value.is_string() ? value.get<std::string>() : value.dump());
  if (report.shard_count > 1)
    properties.emplace_back("shard", std::to_string(report.shard_index) + "/" + std::to_string(report.shard_count));

  std::vector<JunitSuite> suites;
  for (const VariantSummary& s : report.variants) {
    JunitSuite suite;
    suite.name = s.name;
    suite.properties = properties;
    const std::string classname = "flashcheck." + s.name;
    if (s.unavailable) {
      suite.cases.push_back({classname, "available", JunitCase::Outcome::skipped, "unavailable: " + printable_line(*s.unavailable)});
      suites.push_back(std::move(suite));
      continue;
    }
    std::map<std::string, Group> groups;
    std::vector<JunitCase> failed;
    for (const CaseVerdict& v : s.verdicts) {
      const std::string group = group_name(v.point);
      if (v.kind == CaseVerdict::Kind::failed) {
        failed.push_back(failed_case(classname, s, v));
      } else if (v.kind == CaseVerdict::Kind::skipped) {
        groups[group].skipped.push_back(v.index);
        ++groups[group].reasons[v.skipped];
      } else {
        groups[group].passed.push_back(v.index);
      }
    }
    for (const auto& [name, g] : groups) suite.cases.push_back(group_case(classname, name, g));
    for (JunitCase& t : failed) suite.cases.push_back(std::move(t));
    if (s.not_run)
      suite.cases.push_back({classname, "cases not run", JunitCase::Outcome::skipped,
                             std::to_string(s.not_run) + " cases not run after " + std::to_string(s.timed_out) + " timeouts"});
    if (s.unload_failure)
      suite.cases.push_back({classname, "unload", JunitCase::Outcome::failed, "its plugin " + printable_line(*s.unload_failure),
                             "unload_failure", "its plugin " + *s.unload_failure + "\n"});
    suite.out = std::to_string(s.cases) + " cases: " + std::to_string(s.passed) + " passed, " + std::to_string(s.failed) +
                " failed, " + std::to_string(s.skipped) + " skipped" +
                (s.tightest ? "; closest to its limit: " + to_text(*s.tightest) : "") + "\n";
    suites.push_back(std::move(suite));
  }
  if (error) suites.push_back(cannot_test_suite(command, *error));
  return suites;
}

}  // namespace flashcheck
