// For tests: a page rendered by a real headless chromium, what the tests read back from its DOM
// (the <html> element's attributes, the rows of a table) and how a verdict row is read. Test code only.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <cctype>
#include <map>
#include <optional>
#include <regex>
#include <string>
#include <vector>

namespace flashcheck::testing {

// The first chromium-like browser on the PATH, or "" when none is installed.
inline std::string find_chromium() {
  for (const char* c : {"chromium", "chromium-browser", "google-chrome"})
    if (std::system(("command -v " + std::string(c) + " >/dev/null 2>&1").c_str()) == 0) return c;
  return "";
}

// The DOM chromium serialises after loading `file` and running its scripts; nullopt without a
// browser. --no-sandbox: CI runs as root, where chromium refuses its sandbox; the pages are ours.
inline std::optional<std::string> dump_dom(const std::filesystem::path& file) {
  const std::string browser = find_chromium();
  if (browser.empty()) return std::nullopt;
  const auto profile = std::filesystem::temp_directory_path() /
                       ("fc_chromium_" + std::to_string(getpid()) + "_" + std::to_string(std::rand()));
  const std::string cmd = "timeout 120 " + browser +
                          " --headless --no-sandbox --disable-gpu --disable-background-networking --disable-component-update "
                          "--disable-sync --no-first-run --user-data-dir=" +
                          profile.string() + " --virtual-time-budget=10000 --dump-dom 'file://" +
                          std::filesystem::absolute(file).string() + "' 2>/dev/null";
  std::string dom;
  if (FILE* f = popen(cmd.c_str(), "r")) {
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) dom.append(buf, n);
    pclose(f);
  }
  std::error_code ec;
  std::filesystem::remove_all(profile, ec);
  return dom;
}

// std::regex is not used on rendered pages: libstdc++ matches [^<]* and [\s\S]*? by recursion, one
// frame per character, so a long enough row or text (a page's embedded data, a reproduce line)
// could overflow the stack. Plain scanning is linear and flat.

// name="value" pairs of one tag's attribute text.
inline std::map<std::string, std::string> tag_attributes(const std::string& a) {
  std::map<std::string, std::string> attrs;
  size_t at = 0;
  while ((at = a.find("=\"", at)) != std::string::npos) {
    size_t name0 = at;
    while (name0 > 0 && (std::isalnum(static_cast<unsigned char>(a[name0 - 1])) || a[name0 - 1] == '-')) --name0;
    const size_t end = a.find('"', at + 2);
    if (end == std::string::npos) break;
    if (name0 < at) attrs[a.substr(name0, at - name0)] = a.substr(at + 2, end - at - 2);
    at = end + 1;
  }
  return attrs;
}

// The attributes of the serialised <html> element (where the pages' scripts report what they did).
inline std::map<std::string, std::string> html_attributes(const std::string& dom) {
  const size_t open = dom.find("<html");
  const size_t close = open == std::string::npos ? std::string::npos : dom.find('>', open);
  if (close == std::string::npos) return {{"(no html element in the dump)", dom.substr(0, 200)}};
  return tag_attributes(dom.substr(open + 5, close - open - 5));
}

// Text with tags removed and the entities the pages use decoded.
inline std::string inner_text(const std::string& html) {
  std::string s;
  s.reserve(html.size());
  bool in_tag = false;
  for (char c : html) {
    if (c == '<') in_tag = true;
    else if (c == '>' && in_tag) in_tag = false;
    else if (!in_tag) s += c;
  }
  for (auto [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"&lt;", "<"}, {"&gt;", ">"}, {"&quot;", "\""}, {"&#39;", "'"}, {"&amp;", "&"}}) {
    for (size_t at = 0; (at = s.find(from, at)) != std::string::npos; at += to.size()) s.replace(at, from.size(), to);
  }
  return s;
}

// A rendered table row: its attributes and its cells' text.
struct DomRow {
  std::map<std::string, std::string> attrs;
  std::vector<std::string> cells;
};

// The rows of `dom` whose <tr> carries attribute `marker` (e.g. data-criterion), in order.
inline std::vector<DomRow> rows_with(const std::string& dom, const std::string& marker) {
  std::vector<DomRow> out;
  for (size_t at = 0; (at = dom.find("<tr", at)) != std::string::npos;) {
    const size_t tag_end = dom.find('>', at);
    if (tag_end == std::string::npos) break;
    const std::string a = dom.substr(at + 3, tag_end - at - 3);
    const size_t row_end = dom.find("</tr>", tag_end);
    if (row_end == std::string::npos) break;
    at = row_end + 5;
    if (a.find(marker + "=") == std::string::npos) continue;
    DomRow r;
    for (const auto& [k, v] : tag_attributes(a)) r.attrs[k] = inner_text(v);
    const std::string body = dom.substr(tag_end + 1, row_end - tag_end - 1);
    for (size_t c = 0; (c = body.find("<td", c)) != std::string::npos;) {
      const size_t open_end = body.find('>', c), cell_end = body.find("</td>", c);
      if (open_end == std::string::npos || cell_end == std::string::npos) break;
      r.cells.push_back(inner_text(body.substr(open_end + 1, cell_end - open_end - 1)));
      c = cell_end + 5;
    }
    out.push_back(std::move(r));
  }
  return out;
}

// The text of every `<pre class="repro">` block, in order.
inline std::vector<std::string> repro_blocks(const std::string& dom) {
  std::vector<std::string> out;
  const std::string open = "<pre class=\"repro\">";
  for (size_t at = 0; (at = dom.find(open, at)) != std::string::npos;) {
    const size_t end = dom.find("</pre>", at);
    if (end == std::string::npos) break;
    out.push_back(dom.substr(at + open.size(), end - at - open.size()));
    at = end;
  }
  return out;
}

// The targets of <a href="..."> links that name a file (not an anchor on the same page).
inline std::vector<std::string> page_links(const std::string& dom) {
  std::vector<std::string> out;
  const std::string open = "<a href=\"";
  for (size_t at = 0; (at = dom.find(open, at)) != std::string::npos;) {
    const size_t end = dom.find('"', at + open.size());
    if (end == std::string::npos) break;
    const std::string target = dom.substr(at + open.size(), end - at - open.size());
    if (!target.empty() && target.find('#') == std::string::npos) out.push_back(target);
    at = end;
  }
  return out;
}

// Reads a rendered verdict row as a reader would: the status word, and the relation the page
// prints between value and limit. The relation must be true of the printed numbers, and "ok" may
// only stand beside a value within its limit; a value past it is FAIL or "over limit".
inline void expect_honest_row(const DomRow& row) {
  ASSERT_GE(row.cells.size(), 3u);
  const std::string& st = row.cells[0];
  const std::string& cmp = row.cells[2];
  SCOPED_TRACE(row.attrs.at("data-criterion") + ": " + st + " | " + cmp);
  EXPECT_EQ(st, row.attrs.at("data-status"));
  if (st == "n/a") {
    EXPECT_EQ(cmp.rfind("n/a", 0), 0u);
    return;
  }
  std::smatch m;
  static const std::regex rel("^(\\|?)([-+0-9.einfa]+)\\|? (\u2264|\u2265|<|>) ([-+0-9.einfa]+)$");
  if (!std::regex_match(cmp, m, rel)) {
    EXPECT_NE(st, "ok") << "no readable comparison beside ok";
    return;
  }
  const double v0 = std::strtod(m[2].str().c_str(), nullptr), limit = std::strtod(m[4].str().c_str(), nullptr);
  const double v = m[1].length() ? std::fabs(v0) : v0;
  const std::string op = m[3];
  const bool holds = op == "\u2264" ? v <= limit : op == "\u2265" ? v >= limit : op == "<" ? v < limit : v > limit;
  EXPECT_TRUE(holds) << "the printed relation is false of the printed numbers";
  const bool within = op == "\u2264" || op == "\u2265";
  if (st == "ok") {
    EXPECT_TRUE(within) << "ok beside a value past its limit";
  }
  if (!within) {
    EXPECT_TRUE(st == "FAIL" || st == "over limit (reported only)" || st == "over limit") << st;
  }
}

}  // namespace flashcheck::testing
