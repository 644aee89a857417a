// How far a correct fp32-accumulating FlashAttention kernel may land from the fp64 truth, per row,
// derived from its numerics (not measured). The oracle properties prove the blocked replica stays
// inside it for every tile shape and every variant of problem model 2. It is a worst-case (γ_D)
// bound: too loose to judge kernels with (see verify/TOLERANCE.md), right for proving the replica.
#pragma once
#include <cstdint>

#include "reference/inputs.h"
#include "reference/problem.h"

namespace flashcheck {

struct RowBound {
  double o;    // on every element of the row's output
  double lse;  // on its LSE
};

// Row i of sequence b, head h: n visible keys (an interval, reference/mask.h) in T tiles of
// block_kv (counted from the sequence's first key), Vmax = max |v| over them (dequantized for
// fp8), u = 2^-24, scores t_j the row's final scores in natural units:
//  1. Scores. fp32 dot products over Dqk terms err by at most Dqk·u·Σ_d|q_d k_jd|·scale (γ_D; fp8:
//     of the raw values, the descales folded into the scale: one u more), and the scale multiply,
//     the max shift and its subtraction by 4u·(|t_j| + |m|).
//     Softcap c·tanh(x): 1-Lipschitz in s, so a score error passes through unchanged, plus the
//     tanh argument's two (fp8: three) roundings, u·|s| each of the uncapped score s, and tanh's
//     own few ulps, ≤ 4u·c. ALiBi: the slope in raw units, its product with the distance and the
//     raw unit's own rounding against the exponent's scale, ≤ 6u·|bias| (it can cancel the score,
//     so the 4u·|t_j| above does not cover it). A sink is one more logit in the
//     max and in ℓ, with no value: it enters through |t|. E is the largest error (natural-log
//     units; base 2 costs a factor log2 e < 2).
//  2. Weights. Each p_j = exp(t_j − m) carries a relative error ≤ expm1(2E) + 2uT (T rescalings),
//     and ℓ sums n + T fp32 terms (+ the sink and its rescale): relative γ_{n+T(+2)}.
//  3. Output. O = Σ p̃_j v_j / ℓ with p̃ = p rounded to the P dtype (relative u_p) is a perturbed
//     convex combination of V rows (sub-convex with a sink): |ΔO| ≤ Vmax·(2ε_p + u_p + 2(n+T)u),
//     capped at 2·Vmax (fp8: the v descale times 1/ℓ, 2u more). P below the P dtype's smallest
//     normal is subnormal: P = 2^k·p (p_scale_log2 = k) loses up to half its subnormal step
//     absolutely, n·2^-k·step/2·Vmax in all (f16 2^-25, e4m3 2^-10, e5m2 2^-17 at k = 0).
//     (Rounding O to the output dtype is extra.)
//  4. LSE = m·scale + log ℓ: |ΔLSE| ≤ E + 2(n+T)u + 4u·|LSE|.
// block_kv = 1 gives the bound for any tiling; u_p = 0 for kernels that keep P in fp32. Holds
// while 2^k·1 stays below the P dtype's largest value (P never overflows) and, for the -2^30 fill,
// while every raw score stays above it.
RowBound fp32_kernel_row_bound(const Problem& p, const Inputs& in, int64_t b, int64_t h, int64_t i, double u_p,
                               int64_t block_kv, double lse_true, int p_scale_log2 = 0);

}  // namespace flashcheck
