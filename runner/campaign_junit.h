// A campaign's report as JUnit suites (`run --junit`, `merge --junit`, `run --gpus --junit`): one
// suite per kernel, and in it
//   - a test case per group of cases that did not fail, grouped by dtype and causal mode (names
//     that recur whatever the seed draws, so a dashboard tracks "dtype=bf16 causal=bottom_right" of
//     a kernel from build to build); a group whose every case was skipped is skipped, with the
//     kernel's reasons;
//   - a test case per failed case, "case 17": a kept failure's message is its failed criteria and
//     its shrunk reproduce line (or "flaky (...)" when not every re-run failed), its text the
//     shrunk case's report; a failure beyond those kept says so;
//   - a skipped case for cases not run after repeated hangs, a failed one for a plugin that failed
//     while unloading, a skipped one for an unavailable kernel (with why).
// Everything comes from the verdicts and kept failures a merge reads back from shards, so the
// merged campaign's document is the unsharded run's, byte for byte.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "runner/campaign_json.h"
#include "verify/junit_xml.h"

namespace flashcheck {

// `error`: why `command` cannot test (flashcheck's own failure, nothing testable): one more suite,
// "flashcheck", holding it as an <error>.
std::vector<JunitSuite> campaign_junit(const CampaignReport& report, const std::string& command,
                                       const std::optional<std::string>& error = std::nullopt);

}  // namespace flashcheck
