// The JUnit writer's escaping, held to XML 1.0's rules for any bytes (tools/junit_cli_test.py then
// validates whole documents the CLI writes against verify/junit.xsd with xmllint).
#include "verify/junit_xml.h"

#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <string>
#include <vector>

#include "verify/untrusted_text.h"

namespace flashcheck {
namespace {

// Bytes aimed at XML: markup that would end an element, attribute or CDATA section early, entities,
// characters XML 1.0 cannot carry (C0 controls, U+FFFE, U+FFFF), invalid UTF-8 and plain text.
rc::Gen<std::string> hostile_xml() {
  static const std::vector<std::string> pieces = {
      "]]>", "<", ">", "&", "&amp;", "\"", "'", "</failure>", "<![CDATA[", "\x01", "\x0b", "\x1b[2J", "\t", "\n", "\r",
      "\xef\xbf\xbe", "\xef\xbf\xbf", "\xff", "\xe2\x82", "\xed\xa0\x80", "\xc2\x85", "ab", " ", "\xe2\x89\xa4",
      std::string(1, '\0')};
  return rc::gen::map(rc::gen::container<std::vector<size_t>>(rc::gen::inRange<size_t>(0, pieces.size())),
                      [](const std::vector<size_t>& picks) {
                        std::string s;
                        for (size_t i : picks) s += pieces[i];
                        return s;
                      });
}

rc::Gen<std::string> any_text() { return rc::gen::oneOf(hostile_xml(), rc::gen::arbitrary<std::string>()); }

// XML 1.0's Char production, over valid UTF-8: tab, LF, CR, U+0020..U+D7FF, U+E000..U+FFFD, U+10000 and up.
bool only_xml_chars(const std::string& s) {
  for (size_t i = 0; i < s.size(); ++i) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x20 && b != '\t' && b != '\n' && b != '\r') return false;
    if (b == 0xEF && i + 2 < s.size() && s[i + 1] == '\xBF' && (s[i + 2] == '\xBE' || s[i + 2] == '\xBF')) return false;
  }
  return true;
}

// Every '&' starts one of the references the writer uses, so a parser expands nothing it did not mean.
bool only_known_references(const std::string& s) {
  static const std::vector<std::string> refs = {"&amp;", "&lt;", "&gt;", "&quot;", "&#9;", "&#10;", "&#13;"};
  for (size_t i = s.find('&'); i != std::string::npos; i = s.find('&', i + 1)) {
    bool known = false;
    for (const std::string& r : refs) known |= s.compare(i, r.size(), r) == 0;
    if (!known) return false;
  }
  return true;
}

// What a parser reads back from the writer's references.
std::string unescaped(const std::string& s) {
  static const std::vector<std::pair<std::string, std::string>> refs = {
      {"&lt;", "<"}, {"&gt;", ">"}, {"&quot;", "\""}, {"&#9;", "\t"}, {"&#10;", "\n"}, {"&#13;", "\r"}, {"&amp;", "&"}};
  std::string out;
  for (size_t i = 0; i < s.size();) {
    bool matched = false;
    for (const auto& [ref, ch] : refs)
      if (s.compare(i, ref.size(), ref) == 0) {
        out += ch;
        i += ref.size();
        matched = true;
        break;
      }
    if (!matched) out += s[i++];
  }
  return out;
}

RC_GTEST_PROP(JunitXml, AnyBytesBecomeCharacterData, ()) {
  const std::string s = *any_text();
  for (bool attribute : {false, true}) {
    const std::string x = xml_escaped(s, attribute);
    RC_ASSERT(valid_utf8(x) == x);
    RC_ASSERT(only_xml_chars(x));
    RC_ASSERT(x.find('<') == std::string::npos);
    RC_ASSERT(x.find("]]>") == std::string::npos);
    RC_ASSERT(only_known_references(x));
    if (attribute) {  // nothing ends the attribute or is folded into a space by the parser
      RC_ASSERT(x.find('"') == std::string::npos);
      RC_ASSERT(x.find_first_of("\t\n\r") == std::string::npos);
    }
  }
}

RC_GTEST_PROP(JunitXml, TextXmlCanCarryReadsBackUnchanged, ()) {
  // Valid UTF-8 without the characters XML cannot carry: a parser gets back exactly these bytes.
  std::string s;
  for (char c : valid_utf8(*any_text()))
    if (static_cast<unsigned char>(c) >= 0x20 || c == '\t' || c == '\n' || c == '\r') s += c;
  if (!only_xml_chars(s)) return;  // a noncharacter left: covered by the property above
  RC_ASSERT(unescaped(xml_escaped(s, true)) == s);
  RC_ASSERT(unescaped(xml_escaped(s, false)) == s);
}

TEST(JunitXml, CharactersXmlCannotCarryAreShownNotDropped) {
  EXPECT_EQ(xml_escaped("a\x01" "b\x1b" "c", false), "a\\x01b\\x1bc");
  EXPECT_EQ(xml_escaped("\xef\xbf\xbe\xef\xbf\xbf", false), "\\ufffe\\uffff");
  EXPECT_EQ(xml_escaped("x\xff", false), "x\xef\xbf\xbd");  // invalid UTF-8: U+FFFD
  EXPECT_EQ(xml_escaped("]]></failure>", false), "]]&gt;&lt;/failure&gt;");
  EXPECT_EQ(xml_escaped("a\"b\nc", true), "a&quot;b&#10;c");
}

TEST(JunitXml, CountsAreTheCasesOutcomes) {
  using O = JunitCase::Outcome;
  const std::vector<JunitSuite> suites = {
      {"k1", {{"seed", "7"}}, {{"c", "a", O::passed}, {"c", "b", O::failed, "m", "t", "d"}, {"c", "c", O::skipped, "why"}}, ""},
      {"k2", {}, {{"c", "d", O::error, "m"}, {"c", "e", O::failed, "m"}}, "out"}};
  const std::string doc = junit_xml("doc", suites);
  EXPECT_NE(doc.find("<testsuites name=\"doc\" tests=\"5\" failures=\"2\" errors=\"1\" skipped=\"1\">"), std::string::npos) << doc;
  EXPECT_NE(doc.find("<testsuite name=\"k1\" tests=\"3\" failures=\"1\" errors=\"0\" skipped=\"1\">"), std::string::npos) << doc;
  EXPECT_NE(doc.find("<testsuite name=\"k2\" tests=\"2\" failures=\"1\" errors=\"1\" skipped=\"0\">"), std::string::npos) << doc;
  EXPECT_NE(doc.find("<failure message=\"m\" type=\"t\">d</failure>"), std::string::npos) << doc;
  EXPECT_NE(doc.find("<skipped message=\"why\"/>"), std::string::npos) << doc;
  EXPECT_NE(doc.find("<property name=\"seed\" value=\"7\"/>"), std::string::npos) << doc;
}

}  // namespace
}  // namespace flashcheck
