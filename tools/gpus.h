// `flashcheck run --gpus all|N|LIST`: one isolated worker per GPU, each a child `flashcheck run
// ... --shard k/N --json FILE` pinned to its GPU with CUDA_VISIBLE_DEVICES, run at once; their
// reports merged as `flashcheck merge` merges shards (runner/shard_merge.h), so the same seed gives
// the same cases and verdicts as one GPU, plus a per-GPU table. A worker that crashes, or hangs past
// its limit, becomes a failed verdict for each of its cases; the others finish.
//
// Isolation is per process, as for kernels (runner/isolation.h): a worker that wedges its GPU, or
// whose CUDA context dies, takes only its own shard down.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "tools/output.h"

namespace flashcheck::cli {

// The GPUs a --gpus value names, as indices among those visible here (0..visible-1): "all", a count
// N (the first N), or a comma-separated LIST of distinct indices ("0,1"; one index alone is "2,").
// Throws CannotTest naming the value and what is wrong.
std::vector<int> parse_gpu_selection(const std::string& value, int visible);

// What worker k's CUDA_VISIBLE_DEVICES is for visible index i: the i-th entry of ours when we have
// one (indices, UUIDs and MIG names alike), else i.
std::string cuda_device_for(int index, const char* our_visible_devices);

// The child's command line: ours (after the program name) without --gpus, --worker-timeout,
// --json, --html and --junit and their values, in either form (`--json F`, `--json=F`).
std::vector<std::string> worker_arguments(const std::vector<std::string>& ours);

// main() keeps the command line here, for the workers' command lines.
void remember_command_line(int argc, char** argv);

struct GpuRunOptions {
  std::string gpus;             // --gpus
  double worker_timeout_s = 0;  // --worker-timeout; 0: none fixed (the straggler rule still applies)
  std::string html;             // --html DIR of the merged run
  bool shard_given = false, problem_given = false;
};

// Runs the campaign on the GPUs, prints the merged summary and the per-GPU table, writes the
// reports through `outputs`, and returns the exit code (0, 1 or 125).
int run_on_gpus(const GpuRunOptions& opt, CommandOutputs& outputs);

}  // namespace flashcheck::cli
