// A campaign's report as JSON (`flashcheck run --json`), written and read back. Read back, a
// shard's report holds what a merge needs to count the whole campaign as the unsharded run counts
// it (runner/shard_merge.h): the campaign's identity, every case's verdict in case order, and each
// kept failure with the case it was drawn as.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "runner/campaign.h"

namespace flashcheck {

struct CampaignReport {
  // Every option that decides which cases run and how they are judged (not the shard): two
  // reports are of one campaign exactly when these are equal.
  nlohmann::json campaign;
  int64_t shard_index = 0, shard_count = 1;
  bool finished = true;              // false: flashcheck's own failure cut the campaign short
  std::optional<std::string> error;  // that failure
  std::vector<VariantSummary> variants;
  // Per variant, per kept failure: the HTML page written for it (`--html`), "" for none.
  std::vector<std::vector<std::string>> pages;
};

// The identity of a campaign run with `opt` on `kernel` ("all" or a name) and these plugins.
nlohmann::json campaign_identity(const CampaignOptions& opt, const std::string& kernel, const std::vector<std::string>& plugins);
// What the identity says of the options a merge applies itself (cases, seed, the stop rules).
struct CampaignRules {
  int64_t cases = 0;
  uint64_t seed = 0;
  int64_t max_timeouts = 0, max_failures_kept = 0;
  bool fail_fast = false;
};
CampaignRules campaign_rules(const nlohmann::json& identity);  // throws std::runtime_error naming the field

nlohmann::json to_json(const Reproduction& r);  // beside a kept failure's `repro`
nlohmann::json to_json(const CaseVerdict& v);
nlohmann::json to_json(const CampaignReport& r);

// The inverse of to_json(CampaignReport): to_json(campaign_report_from_json(j)) == j. Throws
// std::runtime_error naming what is missing or malformed, and what disagrees (a variant's counts
// that are not those of its verdicts: an edited or damaged file).
CampaignReport campaign_report_from_json(const nlohmann::json& j);

}  // namespace flashcheck
