#include "verify/untrusted_text.h"

#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <sstream>
#include <string>

#include "verify/report.h"

namespace flashcheck {
namespace {

// nlohmann's strict dump throws exactly on invalid UTF-8: an oracle written by someone else.
bool is_valid_utf8(const std::string& s) {
  try {
    (void)nlohmann::json(s).dump();
    return true;
  } catch (const nlohmann::json::type_error&) {
    return false;
  }
}

// Bytes a hostile kernel or path would use: escape sequences, newlines, carriage returns, C1
// controls, lead bytes without their continuation, lone continuations, and plain text.
rc::Gen<std::string> hostile_text() {
  static const std::vector<std::string> pieces = {
      "\x1b",   "[",     "]",    "31m", "\x1b[2J", "\x1b]0;title\x07", "\x07", "\r",   "\n",  "\t",   "reproduce: ",
      "\xc2\x9b", "\xc2\x85", "\x9b", "\xff", "\xc3", "\xe2\x82", "\xe2\x82\xac", "\xf0\x9f\x98", "\x80", "\xed\xa0\x80",
      "\xc0\xaf", "\xe2\x80\xae", "\x7f", "\x08", "ab", "Z", " ", "\\", "\x1b(B", "\x1bP", "\x1b\\", std::string(1, '\0')};
  return rc::gen::map(rc::gen::container<std::vector<size_t>>(rc::gen::inRange<size_t>(0, pieces.size())),
                      [](const std::vector<size_t>& picks) {
                        std::string s;
                        for (size_t i : picks) s += pieces[i];
                        return s;
                      });
}

rc::Gen<std::string> any_text() { return rc::gen::oneOf(hostile_text(), rc::gen::arbitrary<std::string>()); }

// No byte a terminal acts on: C0 controls except those allowed, DEL, and C1 controls (U+0080..U+009F,
// C2 80..C2 9F in UTF-8).
bool has_control(const std::string& s, std::string_view allowed) {
  for (size_t i = 0; i < s.size(); ++i) {
    const auto b = static_cast<unsigned char>(s[i]);
    if ((b < 0x20 || b == 0x7F) && allowed.find(static_cast<char>(b)) == std::string_view::npos) return true;
    if (b == 0xC2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) <= 0x9F) return true;
  }
  return false;
}

RC_GTEST_PROP(UntrustedText, ValidUtf8IsValidAndKeepsValidText, ()) {
  const std::string s = *any_text();
  const std::string v = valid_utf8(s);
  RC_ASSERT(is_valid_utf8(v));
  RC_ASSERT(valid_utf8(v) == v);
  if (is_valid_utf8(s)) RC_ASSERT(v == s);
}

RC_GTEST_PROP(UntrustedText, APrintableLineCannotBreakTheLineOrEscape, ()) {
  const std::string s = *any_text();
  const std::string line = printable_line(s);
  RC_ASSERT(is_valid_utf8(line));
  RC_ASSERT(!has_control(line, "\t"));
  RC_ASSERT(line.find("\xe2\x80\xae") == std::string::npos);  // no right-to-left override
}

RC_GTEST_PROP(UntrustedText, APrintableBlockKeepsLinesButNoControls, ()) {
  const std::string s = *any_text();
  const std::string block = printable_block(s);
  RC_ASSERT(is_valid_utf8(block));
  RC_ASSERT(!has_control(block, "\n\t"));
  // Every newline survives: a kernel's lines stay lines (and stay prefixed by whoever prints them).
  size_t newlines = 0;
  for (char c : s) newlines += c == '\n';
  RC_ASSERT(static_cast<size_t>(std::count(block.begin(), block.end(), '\n')) == newlines);
}

RC_GTEST_PROP(UntrustedText, ChunksFilterAsTheWhole, ()) {
  const std::string s = *any_text();
  const auto cuts = *rc::gen::container<std::vector<size_t>>(rc::gen::inRange<size_t>(0, s.size() + 1));
  TerminalFilter f;
  std::string out;
  size_t at = 0;
  std::vector<size_t> sorted = cuts;
  std::sort(sorted.begin(), sorted.end());
  for (size_t c : sorted) {
    f.feed(std::string_view(s).substr(at, c - at), out);
    at = c;
  }
  f.feed(std::string_view(s).substr(at), out);
  f.finish(out);
  RC_ASSERT(out == printable_block(s));
}

RC_GTEST_PROP(UntrustedText, JsonOfAnyStringIsWrittenAndReadsBack, ()) {
  const std::string s = *any_text();
  nlohmann::json j{{"error", s}, {"list", {s, s}}};
  const std::string text = json_text(j);
  RC_ASSERT(nlohmann::json::parse(text)["error"].get<std::string>() == valid_utf8(s));
}

TEST(UntrustedText, KnownSequences) {
  EXPECT_EQ(printable_block("\x1b[1;31mred\x1b[0m plain"), "red plain");
  EXPECT_EQ(printable_block("\x1b]0;pwned\x07" "after"), "after");
  EXPECT_EQ(printable_block("\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\"), "link");
  EXPECT_EQ(printable_block("progress 10%\rprogress 99%\n"), "progress 10%progress 99%\n");
  EXPECT_EQ(printable_block("unterminated \x1b]0;title\nnext line"), "unterminated \nnext line");
  EXPECT_EQ(printable_block("caf\xc3"), "caf\xef\xbf\xbd");  // cut mid-character
  EXPECT_EQ(printable_line("boom\nreproduce: rm -rf ~"), "boom\\nreproduce: rm -rf ~");
  EXPECT_EQ(printable_line("a\x1b[2Jb\rc"), "a\\x1b[2Jb\\rc");
  EXPECT_EQ(printable_line("\xc2\x9b" "31m"), "\\u009b31m");
  EXPECT_EQ(printable_line("x\xff\xfey"), "x\xef\xbf\xbd\xef\xbf\xbdy");
  EXPECT_EQ(printable_line("tab\there \xe2\x82\xac"), "tab\there \xe2\x82\xac");  // tabs and real characters stay
  EXPECT_EQ(valid_utf8("\xed\xa0\x80"), "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");  // a surrogate is not UTF-8
}

TEST(UntrustedText, ShellWords) {
  EXPECT_EQ(shell_word("/tmp/k.so"), "/tmp/k.so");
  EXPECT_EQ(shell_word("my dir/k.so"), "'my dir/k.so'");
  EXPECT_EQ(shell_word("it's;rm"), "'it'\\''s;rm'");
  EXPECT_EQ(shell_word(""), "''");
}

TEST(UntrustedText, PrintableReportEscapesEveryOutsideField) {
  Report r;
  r.criteria.push_back({"kernel_error", false, 1, 0, "bad\n  reproduce: evil \x1b[2J"});
  r.notes.push_back("metadata key '\x1b[31mx' ignored");
  r.repro = "flashcheck check /tmp/a\nb.safetensors";
  const std::string text = to_text(printable_report(r));
  EXPECT_EQ(text.find('\x1b'), std::string::npos) << text;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const size_t start = line.find_first_not_of(' ');
    if (start != std::string::npos && line.compare(start, 10, "reproduce:") == 0) {
      EXPECT_EQ(line.find("evil"), std::string::npos) << "a fake reproduce line: " << text;
    }
  }
  EXPECT_NE(text.find("bad\\n  reproduce: evil"), std::string::npos) << text;
}

}  // namespace
}  // namespace flashcheck
