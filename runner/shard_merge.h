// The shards of one campaign (`run --shard i/N --json`, one per machine, Slurm task or GPU) merged
// into the report the unsharded run gives for the same seed and cases: the same counts, worst
// metrics, first abnormal end and tightest criterion (counted again from every case's verdict, in
// case order, by the run's own count_case), the same kept failures with their shrunk reproduce
// lines (the first max_failures_kept in case order, one hang at most, as the run keeps them), and
// the same stop rules (a kernel's cases after its max_timeouts-th hang are not run; --fail-fast
// stops at the first failure). Why that is exact: a case's verdict depends only on (seed, index),
// and every shard keeps the failures the whole run would keep among its own cases, since the
// failures before one of them in the shard are before it in the whole run too.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "runner/campaign_json.h"

namespace flashcheck {

struct ShardFile {
  std::string source;  // where it came from, for messages (a path)
  CampaignReport report;
};

// Reads a shard's `run --json` file. Throws CannotTest naming the file and the problem: missing or
// unreadable, empty, truncated, not JSON, not a campaign report of this version, the report of a
// run that could not test, or counts that are not its verdicts'.
ShardFile read_shard(const std::string& path);

// A shard whose report never came (its `run --gpus` worker crashed or hung): every case of it
// becomes a failed verdict with this reason, "worker on GPU 1 died: killed by SIGKILL".
struct LostShard {
  int64_t index = 0;
  std::string why;
};

// Throws CannotTest naming the problem: shards of different campaigns (the identities differ, or
// the kernels), a shard index missing, given twice or of another count, a shard that did not finish
// (flashcheck's own failure cut it short), verdicts a shard cannot hold (another shard's case, one
// twice), a kernel available in one shard and not in another, every shard lost.
CampaignReport merge_shards(const std::vector<ShardFile>& shards, int64_t shard_count, const std::vector<LostShard>& lost = {});

}  // namespace flashcheck
