// The online softmax on a wgmma accumulator tile (masking and score modifiers: scores.cuh) (layout in wgmma.cuh: each thread
// holds 2 rows, half hf ∈ {0,1} in d[4j + 2hf + {0,1}], and a row is spread over the 4 lanes of a
// quad). The numerics are mma_f16's, which flashcheck's campaigns pinned down:
//  * exp2 with log2(e) folded into the scale, and p = 2^((s − m)·c); the one-FFMA 2^(s·c − m·c) only
//    where the row maxima make it exact enough (online's kOneFfma);
//  * ℓ summed from the unrounded fp32 p; P rounded to the input type only for P·V;
//  * a row that has seen no visible key keeps m = −inf and ℓ = 0 (O = 0, LSE = −inf at the end).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#ifdef FLASHCHECK_PERTURB
#include "gpu/common/perturb.cuh"  // P and O are wgmma operands: the tracker checks every access
#endif

namespace flashcheck::kernels::softmax {

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// 2^x in one MUFU.EX2: exp2f() lowers to ex2.approx.f32 without .ftz, which ptxas wraps in a
// compare and two multiplies to produce subnormal results. A probability below 2^-126 next to the
// row max's p = 1 weighs nothing in ℓ or O (fp32), and rounds to 0 in fp16 P.
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Online softmax of one tile for the thread's two rows: updates the running max m (of raw scores)
// and the lane-partial sum ℓ, turns s into probabilities in place, and returns in corr[hf] the
// factor that row's O accumulator must be multiplied by. sl2 = scale · log2(e). kPLog2 = k makes
// p = 2^k · 2^((s − m)·sl2) (ℓ carries the same factor): fp8's "max offset", which spreads P over
// e4m3's range [0, 2^k] instead of letting small probabilities underflow (wgmma_e4m3: k = 8).
template <int kRegs, int kPLog2 = 0, bool kOneFfma = false>
__device__ __forceinline__ void online(float (&s)[kRegs], float (&m)[2], float (&l)[2], float (&corr)[2], float sl2) {
  static_assert(!kOneFfma || kPLog2 == 0, "the one-FFMA exponent carries no fp8 max offset");
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    float mx = s[2 * hf];
#pragma unroll
    for (int j = 0; j < kRegs / 4; ++j) mx = fmaxf(mx, fmaxf(s[4 * j + 2 * hf], s[4 * j + 2 * hf + 1]));
    const float m_new = fmaxf(m[hf], quad_max(mx));
    // Until a row has seen a visible key its max stays −inf, and (−inf) − (−inf) = NaN: shift by 0
    // instead (every p is exp2(−inf) = 0 anyway, and corr = exp2(−inf) = 0 clears nothing).
    const float m_use = m_new == -INFINITY ? 0.0f : m_new;
    corr[hf] = exp2_ftz((m[hf] - m_use) * sl2);
    // kOneFfma (16-bit): one FFMA per score, p = 2^(s·sl2 − m·sl2), where the warp's rows have
    // |m·sl2| < 2^7. Its price is m·sl2's rounding, a factor 2^δ (|δ| ≤ 2^-24·|m·sl2| < 2^-17)
    // common to the row's p in the tile: O's ratio cancels it, tiles whose max differs disagree by
    // < 2^-16 (far below an f16 ULP), and the LSE carries ≤ 1.2e-7 of the scaled max score (its limit
    // allows 8e-6). Past 2^7 (large logits) δ grows with the scores until the max key's p overflows
    // (inf/inf = NaN: 6 of 200 campaign cases with the FFMA form unguarded), so such a warp computes
    // s − m first, exact near the max (Sterbenz: the max key's p is exactly 1); the vote keeps the
    // choice warp-uniform. On an H100 (PERF.md, session 16) about 2% faster at Dqk ≥ 128 and 3%
    // slower at 64, where wgmma_f16's tile table leaves it off; fp8 keeps s − m (no faster there,
    // and this branch has no 2^kPLog2 factor).
    const float neg_m = -m_use * sl2;
    const bool one_ffma = kOneFfma && __all_sync(0xffffffffu, fabsf(neg_m) < 128.0f);
    float sum = 0.0f;
    // One loop over the row's scores; the exponent's argument is the only thing the forms change.
    auto exponentiate = [&](auto argument) {
#pragma unroll
      for (int j = 0; j < kRegs / 4; ++j)
#pragma unroll
        for (int e = 2 * hf; e < 2 * hf + 2; ++e) {
          s[4 * j + e] = exp2_ftz(argument(s[4 * j + e]));
          sum += s[4 * j + e];
        }
    };
    if (one_ffma)
      exponentiate([&](float x) { return fmaf(x, sl2, neg_m); });
    else if constexpr (kPLog2 == 0)
      exponentiate([&](float x) { return (x - m_use) * sl2; });
    else
      exponentiate([&](float x) { return fmaf(x - m_use, sl2, static_cast<float>(kPLog2)); });
    l[hf] = l[hf] * corr[hf] + sum;  // lane-partial: reduced over the quad once, in the epilogue
    m[hf] = m_new;
  }
}

// Two fp32 → one register of two 16-bit values (round to nearest even), low half first.
template <bool kBf16>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (kBf16) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  } else {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
}

// P (fp32 probabilities in the accumulator layout) → the A fragments of P·V, rounded to the
// input type: p[4k + i] = (s[8k + 2i], s[8k + 2i + 1]) (see wgmma.cuh for why no shuffle is needed).
template <bool kBf16, int kRegs>
__device__ __forceinline__ void to_a_fragments(const float (&s)[kRegs], uint32_t (&p)[kRegs / 2]) {
#ifdef FLASHCHECK_PERTURB
  perturb::on_access(perturb::kResP);
#endif
#pragma unroll
  for (int i = 0; i < kRegs / 2; ++i) p[i] = pack2<kBf16>(s[2 * i], s[2 * i + 1]);
}

// O *= corr per row. kSkipUnchanged: where no row of the warp raised its max this tile, corr is
// exp2(0) = 1 exactly on every row, so one vote skips the multiplies with the same bits; the
// traits say where that measured faster (PERF.md, session 20).
template <bool kSkipUnchanged = false, int kRegs>
__device__ __forceinline__ void rescale(float (&o)[kRegs], const float (&corr)[2]) {
  if (kSkipUnchanged && !__any_sync(0xffffffffu, corr[0] != 1.0f || corr[1] != 1.0f)) return;
#ifdef FLASHCHECK_PERTURB
  perturb::on_access(perturb::kResO);
#endif
#pragma unroll
  for (int j = 0; j < kRegs / 4; ++j) {
    o[4 * j + 0] *= corr[0];
    o[4 * j + 1] *= corr[0];
    o[4 * j + 2] *= corr[1];
    o[4 * j + 3] *= corr[1];
  }
}

}  // namespace flashcheck::kernels::softmax
