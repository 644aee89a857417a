// One judged output as JUnit test cases (verify/junit_xml.h): what `check --junit` writes, and
// what a campaign's kept failure and `run --problem`'s case say in theirs.
#pragma once
#include <string>

#include "verify/backward_criteria.h"
#include "verify/junit_xml.h"
#include "verify/report.h"

namespace flashcheck {

// `check FILE --junit`: one suite, named after the file, with a test case per criterion (a
// dashboard then tracks "lse" or "ulp" of a kernel's file across builds). A failed criterion's
// message is its comparison with the limit and the reproduce line; one with nothing to measure is
// skipped (never passed); the report's text is the suite's output.
JunitSuite check_junit(const Report& r, const std::string& file);
// A file's gradients (`check --junit` on a file with do, dq, dk, dv): a second suite, a test case per
// gradient and criterion ("dk: baseline_relative"), the backward report's text as its output.
JunitSuite check_backward_junit(const BackwardReport& r, const std::string& file);

// One case judged as a whole (a campaign's kept failure, `run --problem`): failed when a criterion
// failed, with "<failed criteria>; reproduce: <command>" as its message (or flaky_note's own words
// for a failure that did not fail every re-run) and the report's text as its detail.
JunitCase report_case(const Report& r, const std::string& classname, const std::string& name,
                      const std::string& reproduce, const std::string& flaky_note = "");
// A backward case (`run --backward`): the same, failed when the forward or the backward failed,
// its type the failed criteria as CaseOutcome::failed names them ("dq: cosine", "forward: lse"),
// both reports' text as its detail.
JunitCase report_case(const Report& r, const BackwardReport& b, const std::string& classname, const std::string& name,
                      const std::string& reproduce, const std::string& flaky_note = "");

}  // namespace flashcheck
