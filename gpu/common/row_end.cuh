// The end of one query row in a FlashAttention forward: what O is multiplied by and the row's LSE,
// with an attention sink joining the denominator here (the variant kernels share it).
#pragma once
#include <cmath>

namespace flashcheck::kernels {

struct RowEnd {
  float inv;  // O's normaliser: 1/ℓ, or 0 for a row that saw no key (O = 0, never 0/0)
  float lse;  // natural log; −inf only for a row that saw no key (lt = 0): a NaN sum stays NaN
};

// lt: the row's full sum ℓ of p = 2^(score·sl2 − m2); m2: the max it was taken against, in log2
// units; sink2: the row's sink logit in log2 units (−inf: no sink, which changes nothing).
// A row that sees no key stays empty (O = 0, LSE = −inf) with or without a sink. A sink above the
// keys' max rescales ℓ and O by 2^(m2 − sink2) first, so that a sink far above every score cannot
// overflow 2^(sink2 − m2) (the oracle takes it into the max the same way).
template <bool kSinks>
__device__ __forceinline__ RowEnd end_row(float lt, float m2, float sink2) {
  float inv = lt > 0.0f ? 1.0f / lt : 0.0f;
  float top = m2;
  if constexpr (kSinks) {
    if (lt > 0.0f && sink2 > -INFINITY) {
      if (sink2 > m2) {
        const float a = exp2f(m2 - sink2);
        lt = lt * a + 1.0f;
        inv = a / lt;
        top = sink2;
      } else {
        lt += exp2f(sink2 - m2);
        inv = 1.0f / lt;
      }
    }
  }
  return {inv, lt == 0.0f ? -INFINITY : (top + log2f(lt)) * 0.6931471805599453f};
}

}  // namespace flashcheck::kernels
