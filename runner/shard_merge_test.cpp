// The shards of a campaign, each written as JSON and read back, merge to the unsharded campaign's
// report (runner/shard_merge.h), also where the run's order-dependent rules act: --fail-fast, the
// stop after max_timeouts hangs, one kept hang. A lost shard's cases become failed verdicts. The
// CLI's side (files, refusals, `run --gpus`) is runner/shard_merge_cli_test.py.
#include <gtest/gtest.h>

#include <sstream>

#include "runner/campaign_json.h"
#include "runner/reliability_fixtures.h"
#include "runner/shard_merge.h"
#include "testing/test_seed.h"

namespace flashcheck {

// The report as `run --json` writes it, then read back: what a merge gets from a file.
CampaignReport written_and_read(const CampaignReport& r) {
  return campaign_report_from_json(nlohmann::json::parse(to_json(r).dump()));
}

CampaignReport campaign(const Variant& v, CampaignOptions opt, int64_t shard, int64_t shards) {
  opt.shard_index = shard;
  opt.shard_count = shards;
  std::ostringstream log;
  CampaignReport r;
  r.campaign = campaign_identity(opt, v.name(), {opt.plugin});
  r.shard_index = shard;
  r.shard_count = shards;
  r.variants.push_back(run_campaign(v, opt, log));
  return r;
}

// Runs the campaign whole and in `shards` shards; the merge of the shards' JSON must be the whole's.
VariantSummary expect_merge_is_whole(const std::string& kernel, const CampaignOptions& opt, int64_t shards) {
  auto v = hostile(kernel);
  if (!v) return {};
  const CampaignReport whole = campaign(*v, opt, 0, 1);
  std::vector<ShardFile> files;
  for (int64_t k = shards - 1; k >= 0; --k)  // any order
    files.push_back({"shard " + std::to_string(k), written_and_read(campaign(*v, opt, k, shards))});
  const CampaignReport merged = merge_shards(files, shards);
  EXPECT_EQ(to_json(merged).dump(1), to_json(whole).dump(1));
  // And the whole campaign's own JSON reads back to itself.
  EXPECT_EQ(to_json(written_and_read(whole)).dump(), to_json(whole).dump());
  return whole.variants.at(0);
}

CampaignOptions small(uint64_t salt) {
  CampaignOptions opt;
  opt.seed = flashcheck::testing::seed_for(salt);
  opt.max_seq = 40;
  opt.max_work = 2e5;
  opt.progress = false;
  opt.plugin = FLASHCHECK_HOSTILE_PLUGINS;
  opt.isolation = isolated();
  opt.confirm_runs = 1;
  opt.dtypes = {DType::f32, DType::bf16};  // what the hostile kernels support: every case runs
  return opt;
}

// Wrong on half its problems: more failures than are kept; the kept ones are the whole's first five.
TEST(ShardMerge, ManyFailuresKeepTheWholeCampaignsFirstFive) {
  CampaignOptions opt = small(4101);
  opt.cases = 40;  // ~20 failures
  opt.shrink = false;  // shrunk failures: the CLI test; here, which are kept
  const VariantSummary s = expect_merge_is_whole("hostile_wrong_some", opt, 3);
  EXPECT_GT(s.failed, 5) << "the draw should fail more cases than are kept";
}

// --fail-fast: the whole stops at its first failure; a shard stops at its own, no earlier.
TEST(ShardMerge, FailFastStopsWhereTheWholeStops) {
  CampaignOptions opt = small(4102);
  opt.cases = 24;
  opt.fail_fast = true;
  opt.shrink_budget_s = 600;  // bounded by its 200 candidates, not by wall time (a loaded machine)
  const VariantSummary s = expect_merge_is_whole("hostile_wrong_some", opt, 4);
  EXPECT_EQ(s.failed, 1);
}

// A kernel that hangs on every case: the whole counts 3 hangs, keeps the first, and runs nothing
// after; each shard has hangs of its own, and the merge still stops where the whole stopped.
TEST(ShardMerge, HangsStopTheMergedCampaignWhereTheyStopTheWhole) {
  CampaignOptions opt = small(4103);
  opt.cases = 12;
  opt.isolation.timeout_s.reset();
  opt.isolation.time_limits.first_s = 0.5;
  // Shrinking a hang is bounded by wall time (candidates whose limit fits what is left): on a loaded
  // machine the whole and a shard may try different numbers, so this test leaves it out.
  opt.shrink = false;
  const VariantSummary s = expect_merge_is_whole("hostile_hang", opt, 2);
  EXPECT_EQ(s.timed_out, 3);
  EXPECT_EQ(s.not_run, 9);
  EXPECT_EQ(s.failures.size(), 1u);
}

// A shard lost with its worker: each of its cases is a failed verdict naming why, never kept.
TEST(ShardMerge, ALostShardsCasesFailAsWorkerDied) {
  CampaignOptions opt = small(4104);
  opt.cases = 10;
  auto v = hostile("hostile_polite");
  ASSERT_TRUE(v);
  std::vector<ShardFile> files{{"shard 0", written_and_read(campaign(*v, opt, 0, 2))}};
  const CampaignReport merged = merge_shards(files, 2, {{1, "worker on GPU 1 died: killed by SIGKILL"}});
  ASSERT_EQ(merged.variants.size(), 1u);
  const VariantSummary& s = merged.variants[0];
  EXPECT_EQ(s.cases, 10);
  EXPECT_EQ(s.passed, 5);
  EXPECT_EQ(s.failed, 5);
  EXPECT_EQ(s.failed_by.at("worker_died"), 5);
  EXPECT_EQ(s.first_abnormal.value_or(""), "worker on GPU 1 died: killed by SIGKILL");
  EXPECT_TRUE(s.failures.empty());
  for (const CaseVerdict& c : s.verdicts) EXPECT_EQ(c.lost, c.index % 2 == 1) << c.index;
  EXPECT_THROW(merge_shards({}, 2, {{0, "a"}, {1, "b"}}), CannotTest);  // nothing left to merge
}

}  // namespace flashcheck
