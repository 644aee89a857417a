// For tests: a page rendered by a real headless chromium, what the tests read back from its DOM
// (the <html> element's attributes, the rows of a table) and how a verdict row is read. Test code only.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
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

// The attributes of the serialised <html> element (where the pages' scripts report what they did).
inline std::map<std::string, std::string> html_attributes(const std::string& dom) {
  std::map<std::string, std::string> attrs;
  std::smatch tag;
  if (!std::regex_search(dom, tag, std::regex("<html([^>]*)>"))) {
    attrs["(no html element in the dump)"] = dom.substr(0, 200);
    return attrs;
  }
  const std::string s = tag[1];
  const std::regex attr(R"re(([a-z-]+)="([^"]*)")re");
  for (auto it = std::sregex_iterator(s.begin(), s.end(), attr); it != std::sregex_iterator(); ++it) attrs[(*it)[1]] = (*it)[2];
  return attrs;
}

// Text with tags removed and the entities the pages use decoded.
inline std::string inner_text(std::string s) {
  s = std::regex_replace(s, std::regex("<[^>]*>"), "");
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
  const std::regex row("<tr([^>]*" + marker + "=[^>]*)>([\\s\\S]*?)</tr>"), cell("<td[^>]*>([\\s\\S]*?)</td>"),
      attr(R"re(([a-z-]+)="([^"]*)")re");
  for (auto it = std::sregex_iterator(dom.begin(), dom.end(), row); it != std::sregex_iterator(); ++it) {
    DomRow r;
    const std::string a = (*it)[1], body = (*it)[2];
    for (auto at = std::sregex_iterator(a.begin(), a.end(), attr); at != std::sregex_iterator(); ++at)
      r.attrs[(*at)[1]] = inner_text((*at)[2]);
    for (auto c = std::sregex_iterator(body.begin(), body.end(), cell); c != std::sregex_iterator(); ++c)
      r.cells.push_back(inner_text((*c)[1]));
    out.push_back(std::move(r));
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
  if (st == "ok") EXPECT_TRUE(within) << "ok beside a value past its limit";
  if (!within) EXPECT_TRUE(st == "FAIL" || st == "over limit (reported only)" || st == "over limit") << st;
}

}  // namespace flashcheck::testing
