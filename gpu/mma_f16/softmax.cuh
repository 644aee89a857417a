// Online softmax on mma.sync accumulators. A thread's S fragment holds, per m16 tile, two rows
// (lane/4 and lane/4 + 8) × 2 columns per n8 tile; the four lanes sharing lane/4 hold the rest of
// those rows, so row reductions are two xor-shuffles.
#pragma once
#include <cmath>

namespace flashcheck::kernels {

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// 2^x in one MUFU.EX2. exp2f() compiles to ex2.approx.f32 without .ftz, which ptxas wraps in a
// compare and two predicated multiplies so that results below 2^-126 come out subnormal: three
// extra instructions on each score, in a loop whose speed is set by its instruction count. A
// probability below 2^-126 next to the row max's p = 1 weighs nothing in l or O (fp32, at most 2^31
// keys), and rounds P to 0 in fp16; in bf16 it would be a subnormal too small to move any sum.
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Rescales the running state of one row for a new tile and turns its scores into probabilities.
// `s` are raw scores (masked ones -inf), m the running max of raw scores, `sl2` = scale·log2(e).
// p = 2^((s − m)·sl2), not the one-FFMA 2^(s·sl2 − m·sl2): there the rounding of m·sl2 is not
// cancelled, so the max key's p is 2^δ instead of 1 with |δ| ≈ |m·sl2|·2^-24. That costs one
// output ULP once P is rounded, and past |m·sl2| ≈ 2^31 it overflows p or l to inf or 0 (flashcheck
// found both on its `large` inputs). s − m is exact near the max (Sterbenz), so p_max = 1 exactly.
// Returns the factor the row's O accumulator must be multiplied by.
// `s` is one m16 tile's accumulator [n8 tiles][4]; `hf` picks the row (elements 2hf, 2hf+1).
template <int NT>
__device__ __forceinline__ float online_softmax_row(float (&s)[NT][4], int hf, float& m, float& l, float sl2) {
  float mt = s[0][2 * hf];
#pragma unroll
  for (int i = 0; i < NT; ++i) mt = fmaxf(mt, fmaxf(s[i][2 * hf], s[i][2 * hf + 1]));
  const float m_new = fmaxf(m, quad_max(mt));
  // Until a row has seen a visible key its max stays -inf, and (-inf) - (-inf) = NaN: shift by 0
  // instead (every p is exp2(-inf) = 0 anyway, and the correction exp2(-inf) = 0 clears nothing).
  const float m_use = m_new == -INFINITY ? 0.0f : m_new;
  const float corr = exp2_ftz((m - m_use) * sl2);
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < NT; ++i) {
#pragma unroll
    for (int e = 2 * hf; e < 2 * hf + 2; ++e) {
      s[i][e] = exp2_ftz((s[i][e] - m_use) * sl2);
      sum += s[i][e];
    }
  }
  l = l * corr + sum;  // lane-partial: reduced over the quad once, at the end
  m = m_new;
  return corr;
}

}  // namespace flashcheck::kernels
