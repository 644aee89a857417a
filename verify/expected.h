// What a kernel's output is expected to be, for one problem and one set of rows: the fp64 oracle,
// the same-dtype baselines its error is scaled by, and the per-row score bounds LSE is judged with.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "reference/inputs.h"
#include "reference/naive.h"
#include "reference/problem.h"

namespace flashcheck {

// Everything a kernel is compared with, for one problem and one set of rows.
struct Expected {
  OracleResult oracle;            // fp64 truth
  std::vector<float> baseline;    // same-dtype eager baseline (verify/baseline.h)
  // Per checked row: scale·‖q_i‖·max_j‖k_j‖ over visible keys, a Cauchy–Schwarz bound on the row's
  // largest |score|. LSE carries the absolute rounding error of the scores (m·scale + log ℓ), so its
  // tolerance grows with this, not with |LSE| (which can be near 0 while the scores are huge).
  std::vector<double> score_bound;
  // f32 only: a second baseline over the same rows (all or sampled), the blocked replica with fp32 P
  // (64×64 tiles, exp2): what a typical correct fp32 FlashAttention computes. The eager fp32
  // baseline is nearly exact, sometimes exact by luck (a 64× ratio was seen), so for f32 the
  // baseline error is the larger of the two.
  std::vector<float> flash_baseline;
  std::vector<std::pair<std::string, double>> timings;  // wall seconds per step, for Report::timings
};
// Which oracle computes the fp64 truth and the same-dtype baseline: the CPU's, the GPU's
// (reference/gpu_oracle.h), or the GPU's for problems of at least kGpuOracleWork when one is usable.
enum class OracleChoice { automatic, cpu, gpu };
inline constexpr double kGpuOracleWork = 2e9;  // B·Hq·rows·Skv·(Dqk+Dv) from which `automatic` picks the GPU
Expected make_expected(const Problem& p, const Inputs& in, std::span<const int64_t> rows = {},
                       OracleChoice oracle = OracleChoice::cpu);

// A kernel's base-2 LSE in natural log (ln x = log2 x · ln 2); poisoned entries stay poison so they
// still read as unwritten.
void lse_base2_to_natural(std::vector<float>& lse);

// Rows of a full [B, Hq, Sq, X] tensor restricted to the oracle's rows (identity if all rows).
std::vector<float> select_rows(const Problem& p, std::span<const float> full, int64_t width,
                               const OracleResult& oracle);
// Rows to check when the whole problem is too large for the oracle: the first and last `edge` rows
// and evenly spaced ones between, about `count` in all (ascending, unique). All rows when Sq ≤ count.
// With tile_q > 0 the first and last row of the kernel's q-tiles are included too (every tile's
// while they fit in half of `count`).
std::vector<int64_t> sample_rows(int64_t seq_q, int64_t count, int64_t edge = 64, int64_t tile_q = 0);

}  // namespace flashcheck
