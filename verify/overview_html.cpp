#include "verify/overview_html.h"

#include <fstream>
#include <sstream>

#include "reference/conventions.h"
#include "verify/report_html.h"

namespace flashcheck {

namespace {

const char* kStyle = R"CSS(
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; max-width: 1200px; }
h1 { font-size: 20px; } h2 { font-size: 17px; margin-top: 2em; border-bottom: 1px solid #ddd; } h3 { font-size: 14px; }
.pass { color: #1a7f37; } .fail { color: #cf222e; } .warn { color: #9a6700; } .na { color: #666; }
table { border-collapse: collapse; margin: 4px 0 10px; } td, th { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
td.n { font-family: ui-monospace, monospace; text-align: right; }
tr.gap td { background: #fff8e1; } tr.bad td { background: #fff0f0; }
pre { background: #f6f8fa; padding: 4px 6px; margin: 0; white-space: pre-wrap; word-break: break-all; }
.axes { display: flex; flex-wrap: wrap; gap: 16px; align-items: flex-start; } .note { color: #666; }
)CSS";

std::string esc(const std::string& s) { return html_escape(s); }

std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

void counts_cells(std::ostringstream& h, const Coverage::Counts& c) {
  h << "<td class=\"n\">" << c.cases << "</td><td class=\"n\">" << c.passed << "</td><td class=\"n\">" << c.failed
    << "</td><td class=\"n\">" << c.skipped << "</td>";
}

struct Reach {
  int64_t reached = 0, declared = 0;
  std::vector<Coverage::Point> missing;
};

Reach reach(const Coverage& cov) {
  Reach r;
  for (const Coverage::Point& p : cov.declared_combinations()) {
    ++r.declared;
    if (cov.reached(p)) ++r.reached;
    else r.missing.push_back(p);
  }
  return r;
}

std::string point_text(const Coverage::Point& p, const std::vector<std::string>& axes) {
  std::vector<std::string> parts;
  for (const std::string& a : axes)
    if (auto at = p.find(a); at != p.end()) parts.push_back(a + "=" + at->second);
  return join(parts, " ");
}

void coverage_section(std::ostringstream& h, const KernelOverview& k) {
  const Coverage& cov = k.coverage;
  const std::vector<std::string> axes = cov.all_axes();
  std::vector<std::string> declared_axes;
  for (const std::string& a : axes)
    if (auto d = cov.declared.find(a); d != cov.declared.end() && !d->second.empty()) declared_axes.push_back(a);
  const Reach r = reach(cov);
  h << "<h3>Coverage of the drawn space</h3>\n";
  if (r.declared > 0) {
    h << "<p class=\"reach\" data-reached=\"" << r.reached << "\" data-declared=\"" << r.declared << "\">" << r.reached << " of "
      << r.declared << " declared combinations (" << esc(join(declared_axes, " \u00d7 "))
      << ") reached by a judged case.</p>\n";
  }
  h << "<div class=\"axes\">\n";
  for (const std::string& axis : axes) {
    h << "<table class=\"axis\" data-axis=\"" << esc(axis) << "\"><tr><th>" << esc(axis)
      << "</th><th>cases</th><th>passed</th><th>failed</th><th>skipped</th></tr>\n";
    for (const auto& [value, c] : cov.by_value(axis)) {
      h << "<tr data-value=\"" << esc(value) << "\"" << (c.judged() == 0 ? " class=\"gap\"" : "") << "><td>" << esc(value)
        << (c.judged() == 0 ? " <span class=\"warn\">(not reached)</span>" : "") << "</td>";
      counts_cells(h, c);
      h << "</tr>\n";
    }
    h << "</table>\n";
  }
  h << "</div>\n";
  if (!r.missing.empty()) {
    constexpr size_t kShown = 200;
    h << "<details><summary>" << r.missing.size() << " declared combination(s) no judged case reached</summary><ul>\n";
    for (size_t i = 0; i < r.missing.size() && i < kShown; ++i) h << "<li>" << esc(point_text(r.missing[i], axes)) << "</li>\n";
    if (r.missing.size() > kShown) h << "<li>... and " << r.missing.size() - kShown << " more</li>\n";
    h << "</ul></details>\n";
  }
  h << "<details><summary>cases per combination drawn (" << cov.cells.size()
    << ")</summary>\n<table class=\"cells\"><tr><th>combination</th><th>cases</th><th>passed</th><th>failed</th><th>skipped</th></tr>\n";
  for (const auto& [point, c] : cov.cells) {
    h << "<tr" << (c.failed ? " class=\"bad\"" : "") << "><td>" << esc(point_text(point, axes)) << "</td>";
    counts_cells(h, c);
    h << "</tr>\n";
  }
  h << "</table></details>\n";
}

void failures_section(std::ostringstream& h, const KernelOverview& k) {
  if (!k.failed_by.empty()) {
    std::vector<std::string> by;
    for (const auto& [criterion, n] : k.failed_by) by.push_back(criterion + " " + std::to_string(n));
    h << "<p>Failed cases by criterion: " << esc(join(by, ", ")) << ".</p>\n";
  }
  if (k.failures.empty()) return;
  h << "<h3>Failures"
    << (static_cast<int64_t>(k.failures.size()) < k.failed ? " (the first " + std::to_string(k.failures.size()) + " kept)" : std::string())
    << "</h3>\n<table class=\"failures\"><tr><th>#</th><th>case</th><th>failed criteria</th><th>reproduce</th><th>page</th></tr>\n";
  for (size_t i = 0; i < k.failures.size(); ++i) {
    const KernelOverview::Failure& f = k.failures[i];
    h << "<tr class=\"bad\"><td class=\"n\">" << i << "</td><td>" << esc(f.problem) << "</td><td>";
    for (const Criterion& c : f.failed) {
      const CriterionStatus st = status_of(c);
      h << "<div class=\"criterion\" data-criterion=\"" << esc(c.name) << "\" data-status=\"" << status_text(st)
        << "\"><span class=\"fail\">" << status_text(st) << "</span> " << esc(c.name);
      // A crash, hang or error left no output to compare: its detail says what happened.
      if (!f.output_judged)
        h << ": " << esc(c.detail);
      else
        h << " " << esc(comparison_text(c));
      h << "</div>";
    }
    h << "</td><td><pre class=\"repro\">" << esc(f.reproduce) << "</pre></td><td>";
    if (f.page.empty()) h << "-";
    else h << "<a href=\"" << esc(f.page) << "\">" << esc(f.page) << "</a>";
    h << "</td></tr>\n";
  }
  h << "</table>\n";
}

}  // namespace

std::string overview_html(const CampaignOverview& o) {
  std::ostringstream h;
  int64_t failed = 0, judged = 0;
  for (const KernelOverview& k : o.kernels) {
    failed += k.failed + (k.unload_failure ? 1 : 0);
    judged += k.passed + k.failed;
  }
  const char* verdict = failed ? "FAIL" : judged ? "PASS" : "NOTHING TESTED";
  h << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
    << "<script>window.onerror = function (msg, src, line) { document.documentElement.setAttribute('data-script-error', "
       "String(msg) + ' (line ' + line + ')'); };</script>\n"
    << "<title>flashcheck " << verdict << ": " << esc(o.title) << "</title>\n<style>" << kStyle << "</style></head><body>\n";
  h << "<h1><span class=\"" << (failed ? "fail" : judged ? "pass" : "warn") << "\">" << verdict << "</span> " << esc(o.title)
    << "</h1>\n";
  h << "<table id=\"kernels\"><tr><th>kernel</th><th>cases</th><th>passed</th><th>failed</th><th>skipped</th>"
       "<th>declared combinations reached</th><th>closest to its limit</th></tr>\n";
  for (const KernelOverview& k : o.kernels) {
    h << "<tr data-kernel=\"" << esc(k.name) << "\"" << (k.failed || k.unload_failure ? " class=\"bad\"" : "") << "><td><a href=\"#k-" << esc(k.name)
      << "\">" << esc(k.name) << "</a></td>";
    if (k.unavailable) {
      h << "<td colspan=\"6\" class=\"na\">unavailable: " << esc(*k.unavailable) << "</td></tr>\n";
      continue;
    }
    h << "<td class=\"n\">" << k.cases << "</td><td class=\"n pass\">" << k.passed << "</td><td class=\"n" << (k.failed ? " fail" : "")
      << "\">" << k.failed << "</td><td class=\"n\">" << k.skipped << "</td>";
    const Reach r = reach(k.coverage);
    h << "<td class=\"n\">" << (r.declared ? std::to_string(r.reached) + " / " + std::to_string(r.declared) : std::string("-"))
      << "</td><td>" << (k.closest.empty() ? std::string("- (no case judged)") : esc(k.closest)) << "</td></tr>\n";
  }
  h << "</table>\n<p class=\"note\">A combination is reached when at least one case drawn there was judged (run and "
       "compared, pass or fail); skipped cases were declined by the kernel. The closest criterion is the one nearest its "
       "limit over the judged cases, shown as value against limit with its share of the limit.</p>\n";
  for (const KernelOverview& k : o.kernels) {
    h << "<section id=\"k-" << esc(k.name) << "\" data-kernel=\"" << esc(k.name) << "\">\n<h2>" << esc(k.name) << "</h2>\n";
    if (k.unavailable) {
      h << "<p class=\"na\">Unavailable: " << esc(*k.unavailable) << ".</p>\n</section>\n";
      continue;
    }
    h << "<p>" << k.cases << " cases: " << k.passed << " passed, " << k.failed << " failed, " << k.skipped << " skipped"
      << (k.not_run ? ", " + std::to_string(k.not_run) + " not run after repeated timeouts" : std::string()) << ".</p>\n";
    if (k.unload_failure) h << "<p class=\"fail\">FAILED at the end: its plugin " << esc(*k.unload_failure) << ".</p>\n";
    failures_section(h, k);
    coverage_section(h, k);
    if (!k.skipped_by.empty()) {
      h << "<h3>Why cases were skipped</h3>\n<ul>\n";
      for (const auto& [why, n] : k.skipped_by) h << "<li>" << n << " \u00d7 " << esc(why) << "</li>\n";
      h << "</ul>\n";
    }
    h << "</section>\n";
  }
  h << "<script>document.documentElement.setAttribute('data-loaded', 'yes');</script>\n</body></html>\n";
  return h.str();
}

void write_overview_html(const CampaignOverview& o, const std::filesystem::path& path) {
  std::ofstream os(path, std::ios::binary);
  os << overview_html(o);
  os.close();
  if (!os) throw CannotTest("cannot write the HTML overview to " + path.string());
}

}  // namespace flashcheck
