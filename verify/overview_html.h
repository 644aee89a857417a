// The campaign overview page (`flashcheck run --html DIR` writes it as DIR/index.html): per
// kernel its cases, passed / failed / skipped, how much of its declared space the cases reached
// (verify/coverage.h), the criterion that came closest to its limit, and every kept failure with
// its failed criteria, its reproducing command and a link to its own page. Self-contained like
// the report pages (no network).
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "verify/coverage.h"
#include "verify/report.h"

namespace flashcheck {

struct KernelOverview {
  struct Failure {
    std::string problem;              // the (shrunk) case, as the reproduce line has it
    std::vector<Criterion> failed;    // its failed criteria, shown as the report shows them
    std::string reproduce;
    std::string page;                 // its page, relative to the overview ("" when none was written)
    bool output_judged = true;        // false: it crashed, hung or errored, and the criteria say how
  };
  std::string name;
  std::optional<std::string> unavailable;
  int64_t cases = 0, passed = 0, failed = 0, skipped = 0, not_run = 0;
  std::string closest;  // the campaign summary's "closest to its limit" ("" when no case was judged)
  std::map<std::string, int64_t> failed_by, skipped_by;
  Coverage coverage;
  std::vector<Failure> failures;
  // Its plugin crashed, exited or hung while being unloaded at the end: the kernel failed though
  // no case did.
  std::optional<std::string> unload_failure;
};

struct CampaignOverview {
  std::string title;  // e.g. "flashcheck run --seed 1 --cases 100"
  std::vector<KernelOverview> kernels;
};

std::string overview_html(const CampaignOverview& o);
// Writes overview_html(o) to path; throws CannotTest naming the path when it cannot be written.
void write_overview_html(const CampaignOverview& o, const std::filesystem::path& path);

}  // namespace flashcheck
