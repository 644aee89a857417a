// How far a correct fp32-accumulating FlashAttention kernel may land from the fp64 truth, per row,
// derived from its numerics (not measured). The oracle properties prove the blocked replica stays
// inside it for every tile shape. It is a worst-case (γ_D) bound: too loose to judge kernels with
// (see verify/TOLERANCE.md), right for proving the replica.
#pragma once
#include <cstdint>

#include "reference/inputs.h"
#include "reference/problem.h"

namespace flashcheck {

struct RowBound {
  double o;    // on every element of the row's output
  double lse;  // on its LSE
};

// Row i of (b, h), n visible keys in T = ceil(n / block_kv) tiles, Vmax = max |v| over them, u = 2^-24:
//  1. Scores. fp32 dot products over Dqk terms err by at most Dqk·u·Σ_d|q_d k_jd| (γ_D), and the
//     scale multiply, the max shift and its subtraction by 4u·(|t_j| + |m|). E is the largest such
//     error over visible keys (natural-log units; base 2 costs a factor log2 e < 2).
//  2. Weights. Each p_j = exp(t_j − m) carries a relative error ≤ expm1(2E) + 2uT (T rescalings),
//     and ℓ sums n + T fp32 terms: relative γ_{n+T}.
//  3. Output. O = Σ p̃_j v_j / ℓ with p̃ = p rounded to the P dtype (relative u_p) is a perturbed
//     convex combination of V rows: |ΔO| ≤ Vmax·(2ε_p + u_p + 2(n+T)u), capped at 2·Vmax. f16 P
//     below 2^-14 is subnormal: add n·2^-25·Vmax. (Rounding O to the output dtype is extra.)
//  4. LSE = m·scale + log ℓ: |ΔLSE| ≤ E + 2(n+T)u + 4u·|LSE|.
// block_kv = 1 gives the bound for any tiling; u_p = 0 for kernels that keep P in fp32.
RowBound fp32_kernel_row_bound(const Problem& p, const Inputs& in, int64_t b, int64_t h, int64_t i, double u_p,
                               int64_t block_kv, double lse_true);

}  // namespace flashcheck
