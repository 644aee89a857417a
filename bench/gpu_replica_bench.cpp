// Timing of the GPU replicas as the backward verdict runs them (backward_baselines_gpu: both
// baseline pipelines, reference/replica_backward.h backward_baseline_configs), and of the whole
// expected-gradients phase with the GPU oracle (make_backward_expected, per phase), on issue 23's
// shapes. Kernel time from CUDA events, wall clock for the call (result allocation, transfers
// included); TFLOP/s count a pipeline as 3.5× the forward's flops (forward 1×, backward 2.5×, the
// usual convention; the kernels recompute S and dP on the dQ side, 1.4× that work).
//
//   gpu_replica_bench               # (1,16,4096,128) and (4,16,8192,128) bf16, causal and not
//   gpu_replica_bench --small-only  # (1,16,4096,128) only, and the CPU replicas beside it
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "reference/gpu_oracle.h"
#include "reference/gpu_oracle/detail.h"
#include "reference/inputs.h"
#include "verify/backward_expected.h"

namespace {

using namespace flashcheck;
namespace god = flashcheck::gpu_oracle_detail;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void run(const std::string& line, bool with_cpu, bool with_expected) {
  const Problem p = parse_problem(line);
  const Inputs in = make_inputs(p, 1, Dist::normal);
  const std::vector<float> d_out = make_d_out(p, 1);
  const std::vector<ReplicaPipeline> configs = backward_baseline_configs();
  std::printf("== %s\n", line.c_str());
  for (int rep = 0; rep < 2; ++rep) {  // the first call pays for the context and module loads
    const auto t0 = Clock::now();
    const auto r = backward_baselines_gpu(p, in, d_out, configs);
    const double wall = seconds_since(t0);
    const god::Timing t = god::last_timing();
    std::printf("backward_baselines_gpu (2 pipelines)%s: wall %.2f s, kernels %.1f ms (%.1f TFLOP/s), result alloc %.0f ms, "
                "upload %.0f ms, download %.0f ms, %d piece(s), %.2f GB on the device\n",
                rep ? "" : " [first call]", wall, t.kernel_ms, 2 * 3.5 * p.flops() / (t.kernel_ms * 1e-3) * 1e-12,
                t.result_alloc_ms, t.h2d_ms, t.d2h_ms, t.pieces, static_cast<double>(t.device_bytes) / 1e9);
    if (!r) std::printf("  not covered: %s\n", gpu_replicas_not_covered(p, configs)->c_str());
  }
  if (with_cpu) {
    const auto t0 = Clock::now();
    for (const ReplicaPipeline& c : configs) {
      const ReplicaResult f = replica_attention(p, in, c.forward);
      (void)replica_attention_backward(p, in, f.o, f.lse, d_out, c.backward);
    }
    std::printf("CPU replicas (2 pipelines): wall %.2f s\n", seconds_since(t0));
  }
  if (with_expected) {
    std::vector<std::pair<std::string, double>> laps;
    const auto t0 = Clock::now();
    (void)make_backward_expected(p, in, d_out, OracleChoice::gpu, &laps);
    std::printf("make_backward_expected --oracle gpu: wall %.2f s\n", seconds_since(t0));
    for (const auto& [name, s] : laps) std::printf("  %-70s %7.2f s\n", name.c_str(), s);
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  if (auto why = gpu_oracle_unavailable()) {
    std::fprintf(stderr, "GPU oracle unavailable: %s\n", why->c_str());
    return 125;
  }
  const bool small_only = argc > 1 && std::strcmp(argv[1], "--small-only") == 0;
  run("b=1 hq=16 hkv=16 sq=4096 skv=4096 d=128 dtype=bf16", true, false);
  run("b=1 hq=16 hkv=16 sq=4096 skv=4096 d=128 causal=bottom_right dtype=bf16", false, false);
  if (small_only) return 0;
  run("b=4 hq=16 hkv=16 sq=8192 skv=8192 d=128 dtype=bf16", false, true);
  run("b=4 hq=16 hkv=16 sq=8192 skv=8192 d=128 causal=bottom_right dtype=bf16", false, true);
  return 0;
}
