#include "verify/report_junit.h"

#include "verify/backward_report.h"
#include "verify/untrusted_text.h"

namespace flashcheck {

namespace {

std::string joined(const std::vector<std::string>& xs) {
  std::string s;
  for (const std::string& x : xs) s += (s.empty() ? "" : ", ") + x;
  return s;
}

}  // namespace

namespace {
// One criterion as a test case named `name`: failed with its comparison and the reproduce line,
// skipped when nothing was measured (never reported as a pass), else passed with what it measured.
JunitCase criterion_case(const Criterion& c, const std::string& name, const std::string& repro) {
  JunitCase t;
  t.classname = "flashcheck.check";
  t.name = name;
  const CriterionStatus status = status_of(c);
  const std::string said = std::string(status_text(status)) + ": " + comparison_text(c) + (c.detail.empty() ? "" : " (" + c.detail + ")");
  if (!c.pass) {
    t.outcome = JunitCase::Outcome::failed;
    t.type = name;
    t.message = comparison_text(c) + "; reproduce: " + repro;
    t.detail = said + "\nreproduce: " + repro + "\n";
  } else if (status == CriterionStatus::not_computed) {
    t.outcome = JunitCase::Outcome::skipped;
    t.message = said;
  } else {
    t.out = said;
  }
  return t;
}
}  // namespace

JunitSuite check_junit(const Report& r, const std::string& file) {
  JunitSuite suite;
  suite.name = "check " + printable_line(file);
  suite.properties = {{"problem", to_string(r.problem)}, {"rows_checked", std::to_string(r.rows_checked)}};
  const Report shown = printable_report(r);
  suite.out = to_text(shown);
  for (const Criterion& c : shown.criteria) suite.cases.push_back(criterion_case(c, c.name, shown.repro));
  return suite;
}

JunitSuite check_backward_junit(const BackwardReport& r, const std::string& file) {
  JunitSuite suite;
  suite.name = "check backward " + printable_line(file);
  suite.properties = {{"problem", to_string(r.problem)}};
  suite.out = to_text(r);
  const std::string repro = printable_line(r.repro);
  for (const GradientVerdict& g : r.gradients)
    for (const Criterion& c : g.criteria) {
      Criterion shown = c;
      shown.detail = printable_line(c.detail);
      suite.cases.push_back(criterion_case(shown, g.name + ": " + c.name, repro));
    }
  return suite;
}

JunitCase report_case(const Report& r, const std::string& classname, const std::string& name, const std::string& reproduce,
                      const std::string& flaky_note) {
  JunitCase t;
  t.classname = classname;
  t.name = name;
  Report shown = printable_report(r);
  if (!flaky_note.empty()) shown.repro.clear();  // a flaky failure's command may pass: never a plain reproduce line
  if (r.pass()) {
    t.out = to_text(shown);
    return t;
  }
  t.outcome = JunitCase::Outcome::failed;
  t.type = joined(r.failed());
  const std::string line = printable_line(reproduce);
  t.message = t.type + "; " + (flaky_note.empty() ? "reproduce: " + line : printable_line(flaky_note) + ": " + line);
  t.detail = to_text(shown);
  return t;
}

JunitCase report_case(const Report& r, const BackwardReport& b, const std::string& classname, const std::string& name,
                      const std::string& reproduce, const std::string& flaky_note) {
  JunitCase t = report_case(r, classname, name, reproduce, flaky_note);
  BackwardReport shown = b;
  if (!flaky_note.empty()) shown.repro.clear();
  std::vector<std::string> failed = b.failed();
  for (const std::string& c : r.failed()) failed.push_back("forward: " + c);
  if (failed.empty()) {
    t.out += to_text(shown);
    return t;
  }
  if (r.pass()) {
    Report forward = printable_report(r);
    if (!flaky_note.empty()) forward.repro.clear();
    t.detail = to_text(forward);
  }
  t.outcome = JunitCase::Outcome::failed;
  t.type = joined(failed);
  const std::string line = printable_line(reproduce);
  t.message = t.type + "; " + (flaky_note.empty() ? "reproduce: " + line : printable_line(flaky_note) + ": " + line);
  t.detail += to_text(shown);
  return t;
}

}  // namespace flashcheck
