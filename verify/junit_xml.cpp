#include "verify/junit_xml.h"

#include <cstdio>

#include "verify/untrusted_text.h"

namespace flashcheck {

std::string xml_escaped(std::string_view text, bool attribute) {
  const std::string utf8 = valid_utf8(text);  // from here on every byte sequence is a whole character
  std::string out;
  out.reserve(utf8.size());
  for (size_t i = 0; i < utf8.size(); ++i) {
    const auto c = static_cast<unsigned char>(utf8[i]);
    char buf[12];
    switch (c) {
      case '&': out += "&amp;"; continue;
      case '<': out += "&lt;"; continue;
      case '>': out += "&gt;"; continue;  // also keeps "]]>" out of character data, where XML forbids it
      case '"': out += attribute ? "&quot;" : "\""; continue;
      // An attribute's tab and newlines are folded into spaces by every parser unless written as references.
      case '\t': out += attribute ? "&#9;" : "\t"; continue;
      case '\n': out += attribute ? "&#10;" : "\n"; continue;
      case '\r': out += "&#13;"; continue;  // a raw CR in text is read back as a newline
      default: break;
    }
    if (c < 0x20) {  // XML 1.0 has no way to carry these, not even as references: shown instead
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else if (c == 0xEF && i + 2 < utf8.size() && utf8[i + 1] == '\xBF' && (utf8[i + 2] == '\xBE' || utf8[i + 2] == '\xBF')) {
      out += utf8[i + 2] == '\xBE' ? "\\ufffe" : "\\uffff";  // the two noncharacters XML excludes
      i += 2;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

namespace {

const char* element_of(JunitCase::Outcome o) {
  switch (o) {
    case JunitCase::Outcome::failed: return "failure";
    case JunitCase::Outcome::error: return "error";
    case JunitCase::Outcome::skipped: return "skipped";
    case JunitCase::Outcome::passed: break;
  }
  return nullptr;
}

struct Counts {
  size_t tests = 0, failures = 0, errors = 0, skipped = 0;
  void add(const Counts& o) {
    tests += o.tests, failures += o.failures, errors += o.errors, skipped += o.skipped;
  }
};

Counts counts_of(const JunitSuite& s) {
  Counts n;
  for (const JunitCase& c : s.cases) {
    ++n.tests;
    n.failures += c.outcome == JunitCase::Outcome::failed;
    n.errors += c.outcome == JunitCase::Outcome::error;
    n.skipped += c.outcome == JunitCase::Outcome::skipped;
  }
  return n;
}

std::string attr(const char* name, const std::string& value) { return std::string(" ") + name + "=\"" + xml_escaped(value, true) + "\""; }
std::string attr(const char* name, size_t value) { return std::string(" ") + name + "=\"" + std::to_string(value) + "\""; }

std::string counts_attrs(const Counts& n) {
  return attr("tests", n.tests) + attr("failures", n.failures) + attr("errors", n.errors) + attr("skipped", n.skipped);
}

void write_case(const JunitCase& c, std::string& out) {
  out += "    <testcase" + attr("name", c.name) + attr("classname", c.classname);
  const char* element = element_of(c.outcome);
  if (!element && c.out.empty()) {
    out += "/>\n";
    return;
  }
  out += ">\n";
  if (element) {
    out += std::string("      <") + element;
    if (!c.message.empty()) out += attr("message", c.message);
    if (c.outcome != JunitCase::Outcome::skipped && !c.type.empty()) out += attr("type", c.type);
    if (c.outcome == JunitCase::Outcome::skipped || c.detail.empty()) {
      out += "/>\n";
    } else {  // appended piece by piece: GCC 12 warns falsely (-Wrestrict) on "literal" + std::string&&
      out += '>';
      out += xml_escaped(c.detail, false);
      out += "</";
      out += element;
      out += ">\n";
    }
  }
  if (!c.out.empty()) out += "      <system-out>" + xml_escaped(c.out, false) + "</system-out>\n";
  out += "    </testcase>\n";
}

}  // namespace

std::string junit_xml(const std::string& name, const std::vector<JunitSuite>& suites) {
  Counts total;
  std::string body;
  for (const JunitSuite& s : suites) {
    const Counts n = counts_of(s);
    total.add(n);
    body += "  <testsuite" + attr("name", s.name) + counts_attrs(n) + ">\n";
    if (!s.properties.empty()) {
      body += "    <properties>\n";
      for (const auto& [key, value] : s.properties) body += "      <property" + attr("name", key) + attr("value", value) + "/>\n";
      body += "    </properties>\n";
    }
    for (const JunitCase& c : s.cases) write_case(c, body);
    if (!s.out.empty()) body += "    <system-out>" + xml_escaped(s.out, false) + "</system-out>\n";
    body += "  </testsuite>\n";
  }
  return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites" + attr("name", name) + counts_attrs(total) + ">\n" + body +
         "</testsuites>\n";
}

JunitSuite cannot_test_suite(const std::string& command, const std::string& why) {
  JunitCase c;
  c.classname = "flashcheck";
  c.name = "flashcheck " + command;
  c.outcome = JunitCase::Outcome::error;
  c.type = "cannot_test";
  c.message = "cannot test: " + printable_line(why);
  c.detail = "flashcheck " + command + ": cannot test (exit 125): " + why + "\n";
  return {"flashcheck", {}, {c}, ""};
}

}  // namespace flashcheck
