// JUnit XML, the test-report format CI dashboards read (Jenkins' junit step, GitLab's
// artifacts:reports:junit, GitHub actions that publish test results): a <testsuites> document of
// <testsuite>s holding <testcase>s, each passed, or holding one <failure>, <error> or <skipped>.
// verify/junit.xsd states the subset written here; the tests validate every document against it.
//
// Much of what goes into a report is text flashcheck did not write (a kernel's error message, its
// name, a file path): any bytes at all. Every string is escaped here so the document stays
// well-formed whatever it holds: invalid UTF-8 becomes U+FFFD, characters XML 1.0 cannot carry (C0
// controls other than tab and newlines, U+FFFE, U+FFFF) are shown as \xNN / \uNNNN, and markup
// characters become entities, so neither "]]>" nor "</failure>" in a message ends anything.
#pragma once
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace flashcheck {

struct JunitCase {
  // passed: no child element. failed: the code under test was wrong (a kernel's verdict, exit 1).
  // error: the test itself could not run (flashcheck cannot test, exit 125). skipped: not run.
  enum class Outcome { passed, failed, error, skipped };
  std::string classname;  // dashboards group by it: "flashcheck.<kernel>"
  std::string name;
  Outcome outcome = Outcome::passed;
  std::string message;  // the failure's, error's or skip's one-line message (an attribute)
  std::string type;     // the failure's or error's type, e.g. the failed criteria
  std::string detail;   // the failure's or error's text (several lines)
  std::string out;      // <system-out>: what else the case says ("" for none)
};

struct JunitSuite {
  std::string name;
  std::vector<std::pair<std::string, std::string>> properties;  // <properties>: the campaign's seed, ...
  std::vector<JunitCase> cases;
  std::string out;  // the suite's <system-out> ("" for none)
};

// The document: <testsuites name="..."> with each suite's tests/failures/errors/skipped counted
// from its cases, and the totals on <testsuites>. No times or timestamps: a campaign's document
// depends only on its verdicts, so a merge of shards gives the unsharded run's bytes.
std::string junit_xml(const std::string& name, const std::vector<JunitSuite>& suites);

// Why a command cannot test (exit 125), as a suite "flashcheck" of one case holding an <error>:
// alone, it is the JUnit report of a command refused before any work (a stale report would read as
// this run's); beside a campaign's suites, the failure that cut it short.
JunitSuite cannot_test_suite(const std::string& command, const std::string& why);

// Any bytes as XML character data (attribute: also escapes quotes, tab and newlines, which an
// attribute would otherwise fold into spaces).
std::string xml_escaped(std::string_view text, bool attribute);

}  // namespace flashcheck
