// `flashcheck run`: fuzz campaigns of random problems against the oracle, per variant, with
// shrinking of failures to a minimal reproducing problem.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "fuzz/generators.h"
#include "runner/registry.h"
#include "verify/report.h"

namespace flashcheck {

struct CampaignOptions {
  int64_t cases = 200;
  uint64_t seed = 1;
  int64_t shard_index = 0, shard_count = 1;  // this run takes cases c with c % count == index
  int64_t max_seq = 300;                     // longest sequence drawn
  double max_work = 3e7;                     // per-case cap on B·Hq·Sq·Skv·(Dqk+Dv)
  int64_t max_rows = kDefaultMaxRows;        // rows per (b,h) checked before sampling
  bool shrink = true;
  bool fail_fast = false;                    // stop at the first failing case
  bool progress = true;                      // one updating line on stderr
  int64_t max_failures_kept = 5;             // per variant, with reports
  std::vector<DType> dtypes;                 // restrict the drawn dtypes (empty: what the variant declares)
  std::string plugin;                        // named in reproduce lines when the kernel came from one
};

struct CaseOutcome {
  Case c;
  bool passed = false;
  std::optional<std::string> skipped;  // why, if skipped
  std::optional<std::string> error;    // the variant threw: counts as failed
  Report report;
};

struct VariantSummary {
  std::string name;
  std::optional<std::string> unavailable;
  int64_t cases = 0, passed = 0, failed = 0, skipped = 0;
  uint64_t worst_ulp = 0;
  double worst_cos = 1.0;
  std::vector<CaseOutcome> failures;  // shrunk, at most max_failures_kept
  std::vector<std::string> repro;     // one command per kept failure
};

// Runs one case: inputs from (problem, dist, seed), variant through the harness, verdict.
CaseOutcome run_case(const Variant& v, const Case& c, int64_t max_rows, const std::string& plugin = "");
// The problem space a variant declares, within the campaign's limits.
ProblemSpace space_for(const Capabilities& caps, const CampaignOptions& opt);
// Case number `index` of the campaign (the same on every machine for the same seed).
Case campaign_case(const ProblemSpace& space, uint64_t seed, int64_t index);
// Greedily reduces a failing case (batch, heads, sequence lengths, head dims, distribution) while
// it still fails; returns the smallest failing case found.
CaseOutcome shrink_failure(const Variant& v, CaseOutcome failing, int64_t max_rows, const std::string& plugin = "",
                           int max_steps = 200);

VariantSummary run_campaign(const Variant& v, const CampaignOptions& opt, std::ostream& log);

std::string repro_command(const std::string& variant, const Case& c, const std::string& plugin = "");

}  // namespace flashcheck
