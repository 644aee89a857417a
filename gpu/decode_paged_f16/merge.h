// The arithmetic of decode_paged_f16's combine (combine_kernel.cuh): how the splits' partial
// states of one row merge. Host and device share it, so the CPU test (merge_test.cpp) proves on
// every CI run what the device computes: empty splits weigh nothing, all-empty rows stay empty
// without NaN, NaN partials stay NaN, close maxima of large scores merge exactly.
//
// A split's partial state of a row: m its raw score max, log2 ℓ of its sum ℓ = Σ 2^((s − m)·sl2)
// (sl2 = softmax scale · log2 e), O its output normalised by ℓ; the empty state is m = log2 ℓ =
// −inf, O = 0. With M = max_s m_s:
//   w_s = 2^((m_s − M)·sl2 + log2 ℓ_s),  O = Σ w_s·O_s / Σ w_s,  LSE = (M·sl2 + log2 Σ w_s)·ln 2.
// The max is subtracted before any exponent: (m_s − M)·sl2 ≤ 0 and log2 ℓ_s ≤ 31, so no weight
// overflows, and m_s − M of raw scores is exact where they are close (two fp32 LSEs near 1e7 would
// differ by their rounding alone, a whole unit of log2 weight).
#pragma once
#include <cmath>

#include "gpu/decode_paged_f16/split_plan.h"  // FC_DECODE_HD

namespace flashcheck::kernels {

// The shift M: the largest split max, or 0 when every split is empty (−inf − (−inf) would be
// NaN). fmaxf skips a NaN max; a NaN partial still poisons the row through its log2 ℓ.
FC_DECODE_HD inline float merge_shift(float max_of_maxima) { return max_of_maxima == -INFINITY ? 0.f : max_of_maxima; }

// Split s's weight: 0 for an empty split, NaN for a NaN partial (or an unwritten, NaN-poisoned one).
FC_DECODE_HD inline float merge_weight(float m_s, float log2l_s, float shift, float sl2) {
  return exp2f((m_s - shift) * sl2 + log2l_s);
}

// 1 / Σ w_s for the output, 0 for a row every split left empty (O = 0, never 0/0).
FC_DECODE_HD inline float merge_inverse(float sum) { return sum == 0.f ? 0.f : 1.f / sum; }

// The row's LSE in natural log: −inf for a row that saw no key; a NaN sum stays NaN.
FC_DECODE_HD inline float merge_lse(float shift, float sum, float sl2) {
  return sum == 0.f ? -INFINITY : (shift * sl2 + log2f(sum)) * 0.6931471805599453f;
}

}  // namespace flashcheck::kernels
