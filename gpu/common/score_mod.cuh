// The variant kernels' score modifiers (mma_f16's, wgmma_f16's) as small functors, in
// FlashAttention's order:
//   raw = q·k  →  softcap  →  mask (variant_mask.cuh)  →  + ALiBi  →  online softmax in log2 units (·sl2)
// Scores stay in "raw" units until the exponent (as FlashAttention 2 and the replica keep them):
// the dot product, or with a softcap its tanh; sl2 turns a raw score into log2 units. Each
// modifier is a compile-time policy: the off version is an empty type whose apply() is nothing,
// so a problem without it runs exactly the instructions it ran before.
//
// Written apart from reference/score_mod.h on purpose, as variant_mask.cuh.
#pragma once
#include <cstdint>

namespace flashcheck::kernels {

struct NoSoftcap {
  static constexpr bool kOn = false;
  __device__ __forceinline__ float operator()(float s) const { return s; }
};

// c·tanh(scale·s/c), kept as tanh(scale·s/c) (raw units of 1/c; sl2 = c·log2 e on the host). The
// capped score's error is c times tanh's absolute error, so tanh must be accurate in absolute terms
// at every |x| and relatively where it is small:
//  * |x| ≥ 0.2: tanh(x) = 1 − 2/(2^(2x·log2 e) + 1), one MUFU.EX2, one MUFU.RCP, two FMAs, a few
//    2^-24 absolute. tanh.approx.f32 (one MUFU.TANH) errs by up to 2^-11 relative: c·2^-11 in the
//    capped score is 1.5% of a probability at c = 30, a dozen bf16 ULPs of the output.
//  * |x| < 0.2: that form cancels (1 − 2·(½ − x/2)) and keeps only 2^-24 absolute of a value ~x,
//    which c multiplies: with c = 10^6 (the generators' "cap too large to bind") scores err by 0.06
//    and rows fail. There tanh's odd Taylor series to x^7 (next term 62x^9/2835 < 2^-24·|x| at 0.2),
//    in four FMAs and two multiplies, relative error a few ulp.
// Both are computed and one selected (no divergence). Limits: 2^(+big) = inf gives 1 − 2/inf = 1,
// 2^(−big) = 0 gives −1; NaN stays NaN (a masked score is then overwritten with −inf).
struct TanhSoftcap {
  static constexpr bool kOn = true;
  float mul_x;    // scale/c: the dot product → x
  float mul_exp;  // 2·log2(e)·scale/c: the dot product → the exponent of 2^(2x·log2 e)
  __device__ __forceinline__ float operator()(float s) const {
    float e, r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(s * mul_exp));
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(e + 1.0f));
    const float big = fmaf(-2.0f, r, 1.0f);
    const float x = s * mul_x, x2 = x * x;
    const float poly = fmaf(fmaf(x2, -17.0f / 315.0f, 2.0f / 15.0f), x2, -1.0f / 3.0f) * x2;  // tanh(x)/x − 1
    const float small = fmaf(x, poly, x);
    return fabsf(x) < 0.2f ? small : big;
  }
};

struct NoBias {
  static constexpr bool kOn = false;
};

// Symmetric ALiBi (FlashAttention's): −slope·|i + d − j| for query row i and key j, added after the
// mask (a masked −inf stays −inf), in raw units (the slope divided by the scale, or by c with a
// softcap, once per head on the host side of the launch).
struct AlibiSymmetric {
  static constexpr bool kOn = true;
  float neg_slope;  // −slope / unit
  // Per row and KV tile: (i + d) − (k0 + 2·(lane % 4)), the distance to this lane's first key
  // column (d: the alignment offset, 0 for top_left, else skv − sq), as a float. Exact below 2^24;
  // further away it rounds relatively by 2^-24, as the float the oracle's replica converts. Per
  // element only a compile-time column offset is subtracted.
  __device__ __forceinline__ static float row_base(int i_plus_d, int k0, int lane) {
    return static_cast<float>(i_plus_d - k0 - 2 * (lane & 3));
  }
  __device__ __forceinline__ float add(float s, float base, int col) const {
    return fmaf(neg_slope, fabsf(base - static_cast<float>(col)), s);
  }
};

}  // namespace flashcheck::kernels
