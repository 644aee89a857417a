#include "tools/campaign_end.h"

#include <algorithm>
#include <cstdio>
#include <iostream>

#include "reference/conventions.h"
#include "runner/campaign_junit.h"
#include "verify/untrusted_text.h"

namespace flashcheck::cli {


namespace {

// "failed: kernel_crashed 3, out_of_bounds 1; first: crashed (SIGSEGV); 96 cases not run after 3 timeouts"
std::string summary_note(const VariantSummary& s) {
  std::string note;
  if (!s.failed_by.empty()) {
    note = "failed:";
    bool first = true;
    for (const auto& [criterion, n] : s.failed_by) {
      note += (first ? " " : ", ") + criterion + " " + std::to_string(n);
      first = false;
    }
  }
  if (s.first_abnormal) note += "; first: " + printable_line(*s.first_abnormal);
  if (s.not_run) note += "; " + std::to_string(s.not_run) + " cases not run after " + std::to_string(s.timed_out) + " timeouts";
  if (s.unload_failure) note += (note.empty() ? "its plugin " : "; its plugin ") + *s.unload_failure;
  return note;
}

// s left-aligned in `width` terminal columns: printf's %-30s counts bytes, and "≤" is three.
std::string pad_columns(const std::string& s, size_t width) {
  size_t columns = 0;
  for (unsigned char ch : s) columns += (ch & 0xC0) != 0x80;  // a UTF-8 continuation byte adds no column
  return columns >= width ? s : s + std::string(width - columns, ' ');
}

struct Tally {
  bool any_failed = false, any_tested = false;
};

// The table, the skip reasons and the reproduce lines.
Tally print_summary(const std::vector<VariantSummary>& all, const std::function<void()>& after_table) {
  Tally t;
  std::printf("\n%-22s %7s %7s %7s %7s  %-30s %s\n", "variant", "cases", "passed", "failed", "skipped",
              "closest to its limit", "note");
  for (auto& s : all) {
    if (s.unavailable) {
      std::printf("%-22s %7s %7s %7s %7s  %-30s unavailable: %s\n", s.name.c_str(), "-", "-", "-", "-", "-",
                  printable_line(*s.unavailable).c_str());
      continue;
    }
    t.any_failed |= s.failed > 0 || s.unload_failure.has_value();
    t.any_tested |= (s.passed + s.failed) > 0;
    // How close the judged cases came to failing, never a number over cases nobody judged.
    const std::string tight = s.tightest ? to_text(*s.tightest) : s.judged ? "-" : "- (no case judged)";
    std::printf("%-22s %7lld %7lld %7lld %7lld  %s %s\n", s.name.c_str(), static_cast<long long>(s.cases),
                static_cast<long long>(s.passed), static_cast<long long>(s.failed), static_cast<long long>(s.skipped),
                pad_columns(tight, 30).c_str(), summary_note(s).c_str());
  }
  if (after_table) after_table();
  for (auto& s : all) {
    // Why cases were skipped, most frequent first: a campaign that skipped everything must
    // say what the kernel refused.
    std::vector<std::pair<int64_t, std::string>> why;
    for (auto& [reason, n] : s.skipped_by) why.emplace_back(n, reason);
    std::sort(why.begin(), why.end(), [](auto& a, auto& b) { return a.first > b.first; });
    for (size_t i = 0; i < why.size() && i < 3; ++i)
      std::printf("skipped: %s: %lld x %s\n", s.name.c_str(), static_cast<long long>(why[i].first),
                  printable_line(why[i].second).c_str());
    if (why.size() > 3) std::printf("skipped: %s: and %zu other reasons (see --json)\n", s.name.c_str(), why.size() - 3);
  }
  for (auto& s : all)
    for (size_t k = 0; k < s.repro.size(); ++k) {
      // A failure that did not fail every re-run is flaky: never a plain reproduce line.
      const std::optional<Reproduction>& r = s.failures[k].reproduced;
      if (r && !r->confirmed())
        std::printf("flaky (%s): %s\n", to_text(*r).c_str(), printable_line(s.repro[k]).c_str());
      else
        std::printf("reproduce: %s\n", printable_line(s.repro[k]).c_str());
    }
  return t;
}

}  // namespace

std::vector<std::vector<std::string>> failure_page_paths(const std::vector<VariantSummary>& all, const std::filesystem::path& dir) {
  std::vector<std::vector<std::string>> pages;
  std::error_code ec;
  const std::filesystem::path abs = std::filesystem::absolute(dir, ec);
  for (const VariantSummary& s : all) {
    pages.emplace_back();
    for (size_t k = 0; k < s.failures.size(); ++k)
      pages.back().push_back(((ec ? dir : abs) / (s.name + "_" + std::to_string(k) + ".html")).string());
  }
  return pages;
}

std::string campaign_title(const CampaignReport& report) {
  const nlohmann::json& c = report.campaign;
  std::string title = "flashcheck run --seed " + c.value("seed", nlohmann::json(nullptr)).dump() + " --cases " +
                      c.value("cases", nlohmann::json(nullptr)).dump();
  if (report.shard_count > 1) title += " --shard " + std::to_string(report.shard_index) + "/" + std::to_string(report.shard_count);
  const std::string kernel = c.value("kernel", std::string("all"));
  if (kernel != "all") title += " --kernel " + kernel;
  return title;
}

void copy_failure_pages(CampaignReport& report, const std::filesystem::path& dir) {
  const std::vector<std::vector<std::string>> from = report.pages;
  report.pages = failure_page_paths(report.variants, dir);  // where the merged report's pages are
  write_failure_pages(report.variants, dir, campaign_title(report), &from);
}

int end_campaign(const char* command, CommandOutputs& outputs, CampaignReport& report, std::optional<std::string> error,
                 const std::function<void()>& write_pages, const nlohmann::json& extra, const std::function<void()>& after_table) {
  const Tally t = print_summary(report.variants, after_table);
  if (write_pages) {
    try {  // every page is tried, and the JSON written, before a page's failure is said
      write_pages();
    } catch (const std::exception& e) {
      if (!error) error = e.what();
    }
  }
  std::optional<std::string> nothing_tested;
  if (!error && !t.any_failed && !t.any_tested)
    nothing_tested = "nothing could be tested (every kernel unavailable or every case skipped)";
  if (outputs.junit_wanted()) {
    try {  // before the JSON, so the JSON can say that the JUnit report could not be written
      outputs.write_junit(junit_xml(campaign_title(report), campaign_junit(report, command, error ? error : nothing_tested)));
    } catch (const std::exception& e) {
      if (!error) error = e.what();
    }
  }
  if (outputs.json_wanted()) {
    nlohmann::json j = to_json(report);
    if (error) j.update(error_json(*error));
    else if (nothing_tested) j.update(error_json(*nothing_tested));
    if (extra.is_object()) j.update(extra);
    outputs.write_json(j);
  }
  if (error) throw CannotTest(*error);
  if (t.any_failed) return int{kMismatch};
  if (nothing_tested) {
    std::fprintf(stderr, "flashcheck %s: %s\n", command, nothing_tested->c_str());
    return int{kCannotTest};
  }
  return int{kPass};
}

}  // namespace flashcheck::cli
