// What a kernel's output is expected to be, for one problem and one set of rows: the fp64 oracle,
// the same-dtype baselines its error is scaled by, and the per-row score bounds LSE is judged with.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "reference/inputs.h"
#include "reference/naive.h"
#include "reference/problem.h"
#include "reference/rows.h"
#include "reference/score_mod.h"

namespace flashcheck {

struct ResidentExpected;  // verify/element_pass_device.h

// Everything a kernel is compared with, for one problem and one set of rows.
struct Expected {
  OracleResult oracle;            // fp64 truth
  std::vector<float> baseline;    // same-dtype eager baseline (verify/baseline.h)
  // Per checked row: scale·‖q_i‖·max_j‖k_j‖ over visible keys, a Cauchy–Schwarz bound on the row's
  // largest |score|. LSE carries the absolute rounding error of the scores (m·scale + log ℓ), so its
  // tolerance grows with this, not with |LSE| (which can be near 0 while the scores are huge).
  std::vector<double> score_bound;
  // A score's error bound relative to score_bound beyond fp32's, for fp8 inputs: the tensor cores'
  // accumulation (fp8_score_accumulation below). The LSE carries it (verify/criteria.cpp) and so do
  // near-ties (unresolved rows); 0 for other dtypes.
  double score_error = 0;
  // A second baseline over the same rows (all or sampled), the blocked replica (64×64 tiles, exp2,
  // P rounded to the input dtype unless f32): what a typical correct FlashAttention computes. The
  // eager fp32 baseline is nearly exact, sometimes exact by luck (a 64× ratio was seen); a 16-bit
  // or fp8 kernel's P rounding leans where the eager one does not (expected.cpp). So the baseline
  // error is the larger of the two. Empty for 16-bit problems past kGpuOracleWork (expected.cpp).
  std::vector<float> flash_baseline;
  // Rows whose top scores no fp32 kernel can order. A score computed from Dqk products in fp32, in
  // any order, errs by up to δ = score_rounding(Dqk)·score_bound (below); once δ reaches
  // kUnresolvedDelta and a second key lies within 2δ + kNegligibleGap of the row's largest score,
  // which of them dominates the softmax is decided by rounding, not by the inputs (`large` inputs:
  // scores near 10^8, near-ties among them). Such a row's O is any convex combination of its
  // contenders' values, so it is judged by that alone: each element within [lo, hi], the least and
  // greatest value of its column among the contenders. Ascending by index.
  struct UnresolvedRow {
    int64_t index = 0;        // (b·Hq + h)·rows + ri: the row's place in the oracle's rows
    int64_t contenders = 0;   // keys within 2δ + kNegligibleGap of the max (≥ 2)
    std::vector<float> lo, hi;  // per output column (input values: exact in fp32)
  };
  std::vector<UnresolvedRow> unresolved;
  std::vector<std::pair<std::string, double>> timings;  // wall seconds per step, for Report::timings
  // Set when make_expected left the oracle's O and the baselines in device memory (`resident`):
  // oracle.o and baseline are then empty and the criteria's element pass runs on the device
  // (verify/element_pass_device.h); oracle.lse, score bounds and unresolved rows stay here.
  std::shared_ptr<const ResidentExpected> resident;
};
inline constexpr double kUnresolvedDelta = 0.5;  // weights uncertain by a factor e^(±2δ) ≥ e: no longer rounding noise
inline constexpr double kNegligibleGap = 40;     // a key this far below the max carries < e^-40 of the weight
// Bound on a score's fp32 rounding error relative to score_bound (scale·‖q‖·max‖k‖): Dqk products
// summed in fp32 in any order err by at most γ = n·u/(1 − n·u) of Σ|q_i k_i| ≤ ‖q‖‖k‖ (Higham,
// Accuracy and Stability of Numerical Algorithms, §3.1), plus a few roundings for the scale and the
// max subtraction. u = 2^-23, not 2^-24: tensor-core accumulators may truncate instead of rounding.
double score_rounding(int64_t head_dim_qk);
// The same for a score of fp8 products summed by fp8 tensor cores. Hopper's fp8 MMA does not
// accumulate in full fp32: each k32 group's products (and the running sum) are aligned to the
// group's largest exponent and kept to about 14 bits before joining the fp32 accumulator (DeepSeek-V3
// technical report, §3.3.2, measured on H800), the bits below cut off. A correct H100 kernel
// (wgmma_e4m3, PERF.md session 15) failed fp32's LSE limit by 2x (0.0082 against 0.0042 with one
// key, |LSE| ≈ 10), and over 1,500 campaign cases of every distribution its worst LSE error
// reached 0.74 of 2^-10·ceil(Dqk/32)·score_bound: 1.5·2^-10 per k32 group, the measured worst
// with 2x headroom. Rows whose scores are large enough (score_bound past ~470 at Dqk = 256) then
// cannot tell an LSE off by a few units from the hardware's own error; measured on e4m3 only.
double fp8_score_accumulation(int64_t head_dim_qk);
// Which oracle computes the fp64 truth and the same-dtype baseline: the CPU's, the GPU's
// (reference/gpu_oracle.h), or the GPU's for problems of at least kGpuOracleWork when one is usable.
enum class OracleChoice { automatic, cpu, gpu };
inline constexpr double kGpuOracleWork = 2e9;  // B·Hq·rows·Skv·(Dqk+Dv) from which `automatic` picks the GPU
// q, k and v already on the device (a check file's raw 16-bit tensors: reference/gpu_oracle.h's
// DeviceInputs), the fp32 host copy made only if a step on the CPU reads them. A production-size
// check then widens nothing: the GPU oracle and baseline gather from `device`, the score bounds'
// norms are computed there; only the CPU oracle, unresolved rows' contenders and the CPU flash
// baseline call `widen`, which fills the q, k, v of the Inputs given beside this (empty until then).
struct DeviceInputs;
class DeviceArray;
struct InputsOnDevice {
  const DeviceInputs* device = nullptr;
  std::function<void()> widen;
};
// keep_on_device: where the oracle runs on the GPU, its O and the baselines stay in device memory
// (Expected::resident) unless unresolved rows need them here; verify_output then judges them there.
// Only for problems device_element_pass_unsupported (element_pass_device.h) accepts.
Expected make_expected(const Problem& p, const Inputs& in, const RowSet& rows, OracleChoice oracle = OracleChoice::cpu,
                       bool keep_on_device = false, const InputsOnDevice& on_device = {});
// Whether `oracle` puts the fp64 oracle (and its baselines) on the GPU for these rows: `gpu` always
// (CannotTest naming why when no GPU oracle is usable), `automatic` from kGpuOracleWork on when one is.
bool oracle_on_gpu(const Problem& p, const RowSet& rows, OracleChoice oracle);
// Where the calling thread's last GPU oracle call spent its wall time (gpu_oracle_detail::Timing),
// as phases named prefix + part ("result alloc", "pack", "device alloc", "upload", "kernels",
// "download"), in seconds.
void add_gpu_timing(std::vector<std::pair<std::string, double>>& timings, const std::string& prefix);
// The same rows in every sequence (all when empty).
Expected make_expected(const Problem& p, const Inputs& in, std::span<const int64_t> rows = {},
                       OracleChoice oracle = OracleChoice::cpu);

// A kernel's base-2 LSE in natural log (ln x = log2 x · ln 2); poisoned entries stay poison so they
// still read as unwritten.
void lse_base2_to_natural(std::vector<float>& lse);

// A kernel's LSE written under a declared ALiBi convention, brought to the true one (subtracting
// reference/score_mod.h's alibi_lse_shift per row); poisoned entries stay poison.
void alibi_lse_to_exact(const Problem& p, const Inputs& in, AlibiLse conv, std::vector<float>& lse);

// Rows of a full tensor in the logical layout ([B, Hq, Sq, X] for dense problems) restricted to the
// oracle's rows (identity if all rows).
std::vector<float> select_rows(const Problem& p, std::span<const float> full, int64_t width,
                               const OracleResult& oracle);
// Rows to check when the whole problem is too large for the oracle: the first and last `edge` rows
// and evenly spaced ones between, about `count` in all (ascending, unique). All rows when Sq ≤ count.
// With tile_q > 0 the first row of every one of the kernel's q-tiles is included, whatever `count`
// (a tile without a sampled row is a CTA nobody checks), and its last row too while both fit in
// half of `count` (else the last rows of a spread of tiles).
std::vector<int64_t> sample_rows(int64_t seq_q, int64_t count, int64_t edge = 64, int64_t tile_q = 0);
// sample_rows per sequence: the same rows in every sequence of a dense problem, each sequence's own
// for a varlen batch (its first and last rows are its own edges).
RowSet sample_row_set(const Problem& p, int64_t count, int64_t edge = 64, int64_t tile_q = 0);
// Rows, per sequence, whose output gives itself away without an oracle: poison left in o or lse
// anywhere, or, in a row that sees a key, NaN/Inf or an O of exact zeros (a row that sees no key
// is zero with an infinite LSE by convention). o and lse are the kernel's output over every row in
// the logical layout (verify/judge.h's KernelOutput). At most `cap` per sequence, an even spread.
// The judge adds them to the sample: a single bad row between sampled rows would pass otherwise
// (an all-zero row 7000 of Sq = 8192 passed the default sample). Whether one is wrong is the
// oracle's to say: NaN rows are right for NaN inputs.
std::vector<std::vector<int64_t>> suspect_rows(const Problem& p, std::span<const float> o,
                                               std::optional<std::span<const float>> lse, int64_t cap);
// `sample` with `extra` rows (one list per sequence) added: for a dense problem every sequence
// gets every sequence's extra rows, as a sample has the same rows in each. All rows stay all.
RowSet with_rows(const Problem& p, const RowSet& sample, const std::vector<std::vector<int64_t>>& extra);

}  // namespace flashcheck
