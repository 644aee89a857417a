// What the commands write besides their text: JSON on a stdout of its own, and HTML reports.
#pragma once
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "runner/campaign.h"
#include "runner/harness.h"
#include "verify/judge.h"
#include "verify/overview_html.h"
#include "verify/report_html.h"

namespace flashcheck::cli {

// `--json -`: stdout carries the JSON and nothing else, so `| python3 -m json.tool` works. While
// active, file descriptor 1 points at stderr, so everything printed meanwhile — the text report, a
// campaign's log and table, a plugin's own printf — goes there; write() puts stdout back and
// writes the JSON to it.
class JsonStdout {
 public:
  explicit JsonStdout(bool active) {
    if (!active) return;
    std::cout.flush();
    std::fflush(stdout);
    saved_ = dup(STDOUT_FILENO);
    if (saved_ < 0 || dup2(STDERR_FILENO, STDOUT_FILENO) < 0)
      throw CannotTest(std::string("cannot set stdout aside for --json -: ") + std::strerror(errno));
  }
  ~JsonStdout() { restore(); }
  JsonStdout(const JsonStdout&) = delete;
  JsonStdout& operator=(const JsonStdout&) = delete;

  void write(const std::string& json) {
    restore();
    std::cout << json << std::flush;
  }

 private:
  void restore() {
    if (saved_ < 0) return;
    std::cout.flush();
    std::fflush(stdout);
    dup2(saved_, STDOUT_FILENO);
    close(saved_);
    saved_ = -1;
  }
  int saved_ = -1;
};

// One HTML page for a failing case of `run`. The campaign judged its kept failures with error maps
// (CampaignOptions::error_maps) in the kernel's worker; a kernel that threw, crashed or hung has
// only its report. Nothing runs here: a page never re-runs a kernel outside its isolation. Returns
// the page's path.
inline std::filesystem::path write_case_html(const CaseOutcome& failed, const std::filesystem::path& path) {
  std::filesystem::create_directories(path.parent_path().empty() ? "." : path.parent_path());
  write_html(failed.report, path);
  std::cerr << "html report: " << path.string() << "\n";
  return path;
}

// `run --html DIR`: a page per kept (shrunk) failure, DIR/<kernel>_<i>.html, and DIR/index.html,
// the campaign's overview (per kernel: counts, coverage of the drawn space, failures with their
// reproduce lines and links to their pages).
inline void write_failure_pages(const std::vector<VariantSummary>& all, const std::filesystem::path& dir,
                                const std::string& title) {
  std::filesystem::create_directories(dir);
  CampaignOverview overview;
  overview.title = title;
  for (const VariantSummary& s : all) {
    KernelOverview k;
    k.name = s.name;
    k.unavailable = s.unavailable;
    k.cases = s.cases;
    k.passed = s.passed;
    k.failed = s.failed;
    k.skipped = s.skipped;
    k.not_run = s.not_run;
    k.closest = s.tightest ? to_text(*s.tightest) : s.judged ? "-" : "";
    k.failed_by = s.failed_by;
    k.skipped_by = s.skipped_by;
    k.coverage = s.coverage;
    for (size_t i = 0; i < s.failures.size(); ++i) {
      const CaseOutcome& f = s.failures[i];
      const std::string page = s.name + "_" + std::to_string(i) + ".html";
      write_case_html(f, dir / page);
      KernelOverview::Failure kf;
      kf.problem = to_string(f.c.problem) + " dist=" + std::string(to_string(f.c.dist));
      for (const Criterion& c : f.report.criteria)
        if (!c.pass) kf.failed.push_back(c);
      kf.reproduce = i < s.repro.size() ? s.repro[i] : std::string();
      kf.page = page;
      kf.output_judged = f.judged();
      k.failures.push_back(std::move(kf));
    }
    overview.kernels.push_back(std::move(k));
  }
  write_overview_html(overview, dir / "index.html");
  std::cerr << "html overview: " << (dir / "index.html").string() << "\n";
}

}  // namespace flashcheck::cli
