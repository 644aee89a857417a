// Score modifiers, as small functors in the order FlashAttention applies them (problem.h):
//   s = scale·q·k  →  softcap: c·tanh(s/c)  →  mask (mask.h)  →  + ALiBi bias  →  softmax, with a
//   sink logit joining the denominator.
// Templated on the arithmetic type: the fp64 oracle instantiates them with double, the replica
// (a kernel's numerics) with float. Kept apart from gpu/ for the same reason as mask.h.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "reference/mask.h"
#include "reference/problem.h"

namespace flashcheck {

// c·tanh(s/c), or s when c == 0. tanh(±inf) = ±1, so a capped score is finite for any finite c;
// NaN stays NaN.
template <typename T>
struct Softcap {
  T cap = 0;
  T operator()(T s) const { return cap > 0 ? cap * std::tanh(s / cap) : s; }
  bool active() const { return cap > 0; }
};

// The ALiBi bias of one (sequence, query head): bias(i, j) for query i and key j.
//   symmetric: −slope · |i + d − j|   (d: the problem's alignment offset, mask.h)
//   signed:     slope · (j − i)
// Distances are exact integers (< 2^53), so the only rounding is the product with the slope.
template <typename T>
struct AlibiBias {
  Alibi form = Alibi::none;
  T slope = 0;
  int64_t d = 0;
  T operator()(int64_t i, int64_t j) const {
    switch (form) {
      case Alibi::none: return T(0);
      case Alibi::symmetric: return -slope * static_cast<T>(std::llabs(i + d - j));
      case Alibi::signed_: return slope * static_cast<T>(j - i);
    }
    return T(0);
  }
  bool active() const { return form != Alibi::none; }
};

// The slope of query head h in sequence b: slopes are [Hq] or, with alibi_per_batch, [B, Hq].
inline float alibi_slope(const Problem& p, const float* slopes, int64_t b, int64_t h) {
  return slopes[p.alibi_per_batch ? b * p.heads_q + h : h];
}

template <typename T>
AlibiBias<T> alibi_for(const Problem& p, const float* slopes, int64_t b, int64_t h) {
  if (p.alibi == Alibi::none) return {};
  return {p.alibi, static_cast<T>(alibi_slope(p, slopes, b, h)), alignment_offset(p, p.sq(b), p.skv(b))};
}

// How a kernel's ALiBi LSE may differ from the true one (AlibiLse, reference/conventions.h:
// declared per kernel, never guessed). FlashAttention 2's causal kernel adds slope·j instead of
// −slope·(i + d − j): for a visible key (j ≤ i + d) the two differ by slope·(i + d), a constant per
// row, so O is identical and LSE' = LSE + slope·(i + d). Top-left signed ALiBi and slope·j differ
// the same way with d = 0.
//
// The per-row amount a kernel declaring `conv` adds to the true LSE (0 when exact, or no ALiBi, or
// no causal mode: without one FlashAttention adds the full symmetric bias).
inline double alibi_lse_shift(const Problem& p, AlibiLse conv, double slope, int64_t b, int64_t row) {
  if (conv == AlibiLse::exact || p.alibi == Alibi::none || p.causal == Causal::none) return 0.0;
  const int64_t d = p.alibi == Alibi::signed_ ? 0 : alignment_offset(p, p.sq(b), p.skv(b));
  return slope * static_cast<double>(row + d);
}

}  // namespace flashcheck
