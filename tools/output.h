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

// One HTML page for a failing case of `run`. The campaign judged it without error maps (they cost a
// second pass), so the case runs again with them; a kernel that threw has only its report. Returns
// the page's path.
inline std::filesystem::path write_case_html(const Variant& v, const CaseOutcome& failed, const std::filesystem::path& path,
                                             int64_t max_rows) {
  Report r = failed.report;
  if (!failed.error && !failed.skipped) {
    const Problem& p = failed.c.problem;
    const Inputs in = make_inputs(p, failed.c.seed, failed.c.dist);
    const HarnessResult h = run_variant(v, p, in);
    r = judge(p, in, h.output(), v.declared(p), JudgeOptions{max_rows, true});
    r.repro = failed.report.repro;
  }
  std::filesystem::create_directories(path.parent_path().empty() ? "." : path.parent_path());
  write_html(r, path);
  std::cerr << "html report: " << path.string() << "\n";
  return path;
}

// `run --html DIR`: a page per kept (shrunk) failure, DIR/<kernel>_<i>.html.
inline void write_failure_pages(const std::vector<VariantSummary>& all, const std::vector<std::shared_ptr<Variant>>& variants,
                                const std::filesystem::path& dir, int64_t max_rows) {
  for (const VariantSummary& s : all)
    for (const auto& v : variants)
      if (v->name() == s.name)
        for (size_t i = 0; i < s.failures.size(); ++i)
          write_case_html(*v, s.failures[i], dir / (s.name + "_" + std::to_string(i) + ".html"), max_rows);
}

}  // namespace flashcheck::cli
