// The criteria's pass over the output's elements, one definition for the host (verify/criteria.cpp,
// OpenMP) and the device (verify/element_pass_device.cu, where the GPU oracle's O already is): how an
// element is classified, what each compared element adds to the sums, and how the sums of
// consecutive chunks of rows combine. Both sides add the same elements in the same order with the
// same roundings (no fused multiply-add: the device file is compiled with -fmad=false), so a chunk's
// totals are the same bits on either, and so is the report built from them.
#pragma once
#include <math.h>

#include <cstdint>

#include "reference/dtype.h"
#include "reference/dtype_bits.h"
#include "verify/map_flag.h"

namespace flashcheck {

using bits::f32_bits;
using bits::f64_bits;

// Rows per chunk of the element pass: the unit whose sums are formed element by element in order
// and then added chunk after chunk, so the report is the same bits on 2 cores, 128 or a GPU.
inline constexpr int64_t kElementChunkRows = 256;

FC_HD inline bool finite_f32(float x) { return (f32_bits(x) & 0x7f800000u) != 0x7f800000u; }
FC_HD inline bool finite_f64(double x) { return (f64_bits(x) & 0x7ff0000000000000ull) != 0x7ff0000000000000ull; }
FC_HD inline bool nan_f32(float x) { return (f32_bits(x) & 0x7fffffffu) > 0x7f800000u; }
FC_HD inline bool inf_f32(float x) { return (f32_bits(x) & 0x7fffffffu) == 0x7f800000u; }
FC_HD inline bool inf_f64(double x) { return (f64_bits(x) & 0x7fffffffffffffffull) == 0x7ff0000000000000ull; }
// std::max's rule, (a < b) ? b : a, on both sides: a NaN second argument never wins.
FC_HD inline double max_of(double a, double b) { return (a < b) ? b : a; }

// The poison's raw bits in a dtype (16-bit types in the low half): verify/metrics.h's poison_bits.
FC_HD inline uint32_t poison_bits_of(DType d) {
  return d == DType::f32 ? 0xFFE5A5A5u : d == DType::f16 ? 0xFFA5u : d == DType::bf16 ? 0xFFE5u : 0xFFu;
}
// Whether an fp32-widened output element still holds the poison. No output is fp8 (an fp8 problem
// writes bf16 or f16), so nothing of that dtype was poisoned.
FC_HD inline bool is_poison_widened(DType d, float widened) {
  const uint32_t b = f32_bits(widened);
  switch (d) {
    case DType::f32: return b == poison_bits_of(d);
    case DType::f16: return b == f32_bits(bits::f16_bits_to_f32(static_cast<uint16_t>(poison_bits_of(d))));
    case DType::bf16: return b == f32_bits(bits::bf16_bits_to_f32(static_cast<uint16_t>(poison_bits_of(d))));
    default: return false;
  }
}

// Signed-magnitude -> two's-complement order of an output dtype's bit patterns (fp8 has no outputs
// and orders as bf16, as it always did).
FC_HD inline int64_t ordered_bits_of(DType d, float x) {
  int64_t mag, neg;
  if (d == DType::f32) {
    const uint32_t u = f32_bits(x);
    mag = u & 0x7fffffffu;
    neg = u >> 31;
  } else {
    const uint16_t h = d == DType::f16 ? bits::f32_to_f16_bits(x) : bits::f32_to_bf16_bits(x);
    mag = h & 0x7fff;
    neg = h >> 15;
  }
  return neg ? -mag : mag;
}
inline constexpr uint64_t kNanUlp = ~uint64_t{0};
FC_HD inline uint64_t ulp_distance_of(DType d, float a, float b) {
  const bool na = nan_f32(a), nb = nan_f32(b);
  if (na || nb) return (na && nb) ? 0 : kNanUlp;
  const int64_t x = ordered_bits_of(d, a), y = ordered_bits_of(d, b);
  return static_cast<uint64_t>(x > y ? x - y : y - x);
}
// x rounded to an output dtype (identity for f32), as reference/dtype.h's round_to.
FC_HD inline float round_to_output(DType d, float x) {
  return d == DType::f16 ? bits::f16_bits_to_f32(bits::f32_to_f16_bits(x)) : d == DType::bf16 ? bits::bf16_bits_to_f32(bits::f32_to_bf16_bits(x)) : x;
}

// NaN is no wildcard: an element is finite exactly where the oracle's is, and two infinities
// have one sign. But NaN may stand for an infinity of the oracle's: the oracle sums a row at
// once, while an online softmax rescales its running sum and output by 2^(m_old - m_new) when a
// later tile raises the row's max, and an infinite accumulator times that 0 is NaN (torch's
// memory-efficient kernel: O = NaN where V's -inf under P = 1 makes the oracle's -inf). An Inf in
// place of the oracle's NaN is accepted for the same reason the other way round; a finite value
// for a non-finite one (a kernel squashing bad data), or the reverse, is not.
FC_HD inline bool nonfinite_status_matches(float k, double o) {
  if (finite_f32(k) != finite_f64(o)) return false;
  return !(inf_f32(k) && inf_f64(o) && (k > 0) != (o > 0));
}

// How one output element stands: poison, the empty-row convention (exactly zero, either sign; NaN
// there is the classic 0/0 of an unguarded kernel), or whether its NaN/Inf status matches.
FC_HD inline MapFlag classify_output(DType od, float k, double o, bool empty_row) {
  if (is_poison_widened(od, k)) return MapFlag::unwritten;
  if (empty_row) return k == 0.0f ? MapFlag::empty_row_ok : MapFlag::empty_row_nonzero;
  return nonfinite_status_matches(k, o) ? (finite_f32(k) ? MapFlag::ok : MapFlag::nonfinite_match) : MapFlag::nan_mismatch;
}

// The hash of a (kernel, oracle) pair that DistinctPairs (verify/metrics.h) keeps the least of:
// splitmix64's finaliser, in which every input bit moves every output bit.
FC_HD inline uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ULL;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}
FC_HD inline uint64_t pair_hash(float kernel, double oracle) {
  return mix64(f64_bits(oracle) ^ mix64(f32_bits(kernel) + 0x9E3779B97F4A7C15ULL));
}

// One chunk's sums and counts, or the whole output's once chunks are merged in order. Plain data:
// the device writes one per chunk and the host merges them as it merges its own.
struct ElementTotals {
  // cosine's three sums (CosineAccumulator's), of the kernel and of each baseline against the oracle
  double xy = 0, xx = 0, yy = 0;
  double eager_xy = 0, eager_xx = 0, eager_yy = 0, flash_xy = 0, flash_xx = 0, flash_yy = 0;
  double diff2 = 0, ref2 = 0, eager_diff2 = 0, flash_diff2 = 0, ulp_sum = 0;
  double max_abs = 0, baseline_max_abs = 0, worst_err = -1;
  uint64_t ulp_max = 0;
  int64_t ulp_count = 0, significant = 0, ulp_over_n = 0, compared = 0, unwritten = 0, nan_mismatches = 0,
          empty_row_violations = 0, outside_contenders = 0;
  // The element of the largest error (the first of equals), the first unwritten or NaN/Inf
  // mismatch, the first outside its contenders: flat index (−1: none) and both values.
  int64_t worst_e = -1, first_nan_e = -1, first_outside_e = -1;
  float worst_k = 0, nan_k = 0, outside_k = 0;
  double worst_o = 0, nan_o = 0, outside_o = 0;
};

// An element's classification counted: unwritten and NaN/Inf mismatches (the first remembered),
// empty rows written non-zero. Returns the flag; only MapFlag::ok goes on to add_compared.
FC_HD inline MapFlag count_element(ElementTotals& a, int64_t e, float k, double o, DType od, bool empty_row) {
  const MapFlag flag = classify_output(od, k, o, empty_row);
  if (flag == MapFlag::unwritten || flag == MapFlag::nan_mismatch) {
    ++(flag == MapFlag::unwritten ? a.unwritten : a.nan_mismatches);
    if (a.first_nan_e < 0) {  // elements come in order: the first is the least
      a.first_nan_e = e;
      a.nan_k = k;
      a.nan_o = o;
    }
  }
  if (flag == MapFlag::empty_row_nonzero) ++a.empty_row_violations;
  return flag;
}

// What a compared element (finite, classified ok, in a row fp32 resolves) adds. `base` is the eager
// baseline's value, `flash` the FlashAttention baseline's or null. For a significant element
// (|o| ≥ max|r|/16) `significant(k, o)` is called: the rounding criteria's evidence.
template <typename Significant>
FC_HD inline void add_compared(ElementTotals& a, int64_t e, float k, double o, float base, const float* flash, DType od,
                               double max_ref, uint64_t ulp_n, Significant&& significant) {
  const double kd = static_cast<double>(k);
  const double err = fabs(kd - o);
  a.xy += kd * o;
  a.xx += kd * kd;
  a.yy += o * o;
  ++a.compared;
  a.diff2 += err * err;
  a.ref2 += o * o;
  a.max_abs = max_of(a.max_abs, err);
  // An eager baseline that overflows (f16 scores past 65504) has no error to scale by: the rule
  // then does not apply, and the remaining criteria judge alone.
  const double bd = static_cast<double>(base);
  double berr = fabs(bd - o);
  a.eager_diff2 += berr * berr;
  a.eager_xy += bd * o;
  a.eager_xx += bd * bd;
  a.eager_yy += o * o;
  if (flash) {
    const double fd = static_cast<double>(*flash);
    const double ferr = fabs(fd - o);
    a.flash_diff2 += ferr * ferr;
    a.flash_xy += fd * o;
    a.flash_xx += fd * fd;
    a.flash_yy += o * o;
    berr = max_of(berr, ferr);
  }
  a.baseline_max_abs = finite_f64(berr) ? max_of(a.baseline_max_abs, berr) : INFINITY;
  if (err > a.worst_err) {
    a.worst_err = err;
    a.worst_e = e;
    a.worst_k = k;
    a.worst_o = o;
  }
  const uint64_t u = ulp_distance_of(od, k, round_to_output(od, static_cast<float>(o)));
  a.ulp_max = a.ulp_max < u ? u : a.ulp_max;
  a.ulp_sum += static_cast<double>(u);
  ++a.ulp_count;
  // The ULP rule counts significant elements only: where an output cancels to near 0 its ULP is
  // tiny and any fp32 accumulation lands many ULPs away, which says nothing about the kernel.
  if (fabs(o) >= max_ref / 16) {
    ++a.significant;
    if (u > ulp_n) ++a.ulp_over_n;
    significant(k, o);
  }
}

// Totals of the next chunk (in row order) added to those of all before it.
inline void merge_totals(ElementTotals& to, const ElementTotals& from) {
  to.xy += from.xy, to.xx += from.xx, to.yy += from.yy;
  to.eager_xy += from.eager_xy, to.eager_xx += from.eager_xx, to.eager_yy += from.eager_yy;
  to.flash_xy += from.flash_xy, to.flash_xx += from.flash_xx, to.flash_yy += from.flash_yy;
  to.diff2 += from.diff2, to.ref2 += from.ref2, to.eager_diff2 += from.eager_diff2, to.flash_diff2 += from.flash_diff2;
  to.ulp_sum += from.ulp_sum;
  to.max_abs = max_of(to.max_abs, from.max_abs);
  to.baseline_max_abs = max_of(to.baseline_max_abs, from.baseline_max_abs);
  to.ulp_max = to.ulp_max < from.ulp_max ? from.ulp_max : to.ulp_max;
  to.ulp_count += from.ulp_count, to.significant += from.significant, to.ulp_over_n += from.ulp_over_n;
  to.compared += from.compared, to.unwritten += from.unwritten, to.nan_mismatches += from.nan_mismatches;
  to.empty_row_violations += from.empty_row_violations, to.outside_contenders += from.outside_contenders;
  if (from.worst_err > to.worst_err) {  // strictly larger: the first such element in order, as one pass finds
    to.worst_err = from.worst_err, to.worst_e = from.worst_e, to.worst_k = from.worst_k, to.worst_o = from.worst_o;
  }
  if (to.first_nan_e < 0 && from.first_nan_e >= 0) to.first_nan_e = from.first_nan_e, to.nan_k = from.nan_k, to.nan_o = from.nan_o;
  if (to.first_outside_e < 0 && from.first_outside_e >= 0)
    to.first_outside_e = from.first_outside_e, to.outside_k = from.outside_k, to.outside_o = from.outside_o;
}

}  // namespace flashcheck
