// The fp64 oracles' vectorised row passes (row_simd.h).
#include "reference/row_simd.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

namespace flashcheck {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// glibc's vector exp (libmvec, x86-64 vector function ABI; measured within 2.97 ulp on glibc 2.36
// and 2.39, AVX2 and AVX-512 alike, session 7; gpu_oracle_test's bound takes 4 ulp): the
// softmax's exp over Sq·Skv scores would otherwise cost as much as both GEMMs. The variant is picked
// at run time like OpenBLAS's kernels, so a generic build uses AVX-512 where the CPU has it.
extern "C" {
__m128d _ZGVbN2v_exp(__m128d);
__attribute__((target("avx2"))) __m256d _ZGVdN4v_exp(__m256d);
__attribute__((target("avx512f"))) __m512d _ZGVeN8v_exp(__m512d);
}

RowMax row_max_sse2(double* s, int64_t n, double scale) {
  __m128d vm = _mm_set1_pd(kNegInf), bad = _mm_setzero_pd();
  const __m128d vs = _mm_set1_pd(scale);
  int64_t j = 0;
  for (; j + 2 <= n; j += 2) {
    const __m128d x = _mm_mul_pd(_mm_loadu_pd(s + j), vs);
    _mm_storeu_pd(s + j, x);
    bad = _mm_or_pd(bad, _mm_cmpunord_pd(x, x));
    vm = _mm_max_pd(x, vm);
  }
  double lanes[2];
  _mm_storeu_pd(lanes, vm);
  RowMax r{std::max(lanes[0], lanes[1]), _mm_movemask_pd(bad) != 0};
  for (; j < n; ++j) {
    s[j] *= scale;
    r.nan |= std::isnan(s[j]);
    r.m = std::max(r.m, s[j]);
  }
  return r;
}

__attribute__((target("avx2"))) RowMax row_max_avx2(double* s, int64_t n, double scale) {
  __m256d vm = _mm256_set1_pd(kNegInf), bad = _mm256_setzero_pd();
  const __m256d vs = _mm256_set1_pd(scale);
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    const __m256d x = _mm256_mul_pd(_mm256_loadu_pd(s + j), vs);
    _mm256_storeu_pd(s + j, x);
    bad = _mm256_or_pd(bad, _mm256_cmp_pd(x, x, _CMP_UNORD_Q));
    vm = _mm256_max_pd(x, vm);
  }
  double lanes[4];
  _mm256_storeu_pd(lanes, vm);
  RowMax r{std::max(std::max(lanes[0], lanes[1]), std::max(lanes[2], lanes[3])), _mm256_movemask_pd(bad) != 0};
  for (; j < n; ++j) {
    s[j] *= scale;
    r.nan |= std::isnan(s[j]);
    r.m = std::max(r.m, s[j]);
  }
  return r;
}

__attribute__((target("avx512f"))) RowMax row_max_avx512(double* s, int64_t n, double scale) {
  __m512d vm = _mm512_set1_pd(kNegInf);
  const __m512d vs = _mm512_set1_pd(scale);
  __mmask8 bad = 0;
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m512d x = _mm512_mul_pd(_mm512_loadu_pd(s + j), vs);
    _mm512_storeu_pd(s + j, x);
    bad |= _mm512_cmp_pd_mask(x, x, _CMP_UNORD_Q);
    vm = _mm512_mask_max_pd(vm, 0xff, x, vm);  // = max(x, vm); GCC 12's unmasked form warns
  }
  // (GCC 12's _mm512_reduce_* helpers warn about an uninitialised temporary: reduce by hand.)
  double lanes[8];
  _mm512_storeu_pd(lanes, vm);
  RowMax r{*std::max_element(lanes, lanes + 8), bad != 0};
  for (; j < n; ++j) {
    s[j] *= scale;
    r.nan |= std::isnan(s[j]);
    r.m = std::max(r.m, s[j]);
  }
  return r;
}

// s[j] = exp(s[j] − m) for j < n, returning their sum; the last n mod W values by std::exp, or with
// kVectorTail through the vector function too (RowKernels says why).
template <bool kVectorTail>
double exp_shift_sse2(double* s, int64_t n, double m) {
  const __m128d vm = _mm_set1_pd(m);
  __m128d acc = _mm_setzero_pd();
  int64_t j = 0;
  for (; j + 2 <= n; j += 2) {
    const __m128d e = _ZGVbN2v_exp(_mm_sub_pd(_mm_loadu_pd(s + j), vm));
    _mm_storeu_pd(s + j, e);
    acc = _mm_add_pd(acc, e);
  }
  double lanes[2];
  _mm_storeu_pd(lanes, acc);
  double l = lanes[0] + lanes[1];
  if constexpr (kVectorTail) {
    if (j < n) {
      double tail[2];
      std::fill_n(tail, 2, m);
      std::copy(s + j, s + n, tail);
      _mm_storeu_pd(tail, _ZGVbN2v_exp(_mm_sub_pd(_mm_loadu_pd(tail), vm)));
      for (int64_t r = 0; r < n - j; ++r) l += (s[j + r] = tail[r]);
    }
  } else {
    for (; j < n; ++j) l += (s[j] = std::exp(s[j] - m));
  }
  return l;
}

template <bool kVectorTail>
__attribute__((target("avx2"))) double exp_shift_avx2(double* s, int64_t n, double m) {
  const __m256d vm = _mm256_set1_pd(m);
  __m256d acc = _mm256_setzero_pd();
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    const __m256d e = _ZGVdN4v_exp(_mm256_sub_pd(_mm256_loadu_pd(s + j), vm));
    _mm256_storeu_pd(s + j, e);
    acc = _mm256_add_pd(acc, e);
  }
  double lanes[4];
  _mm256_storeu_pd(lanes, acc);
  double l = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  if constexpr (kVectorTail) {
    if (j < n) {
      double tail[4];
      std::fill_n(tail, 4, m);
      std::copy(s + j, s + n, tail);
      _mm256_storeu_pd(tail, _ZGVdN4v_exp(_mm256_sub_pd(_mm256_loadu_pd(tail), vm)));
      for (int64_t r = 0; r < n - j; ++r) l += (s[j + r] = tail[r]);
    }
  } else {
    for (; j < n; ++j) l += (s[j] = std::exp(s[j] - m));
  }
  return l;
}

template <bool kVectorTail>
__attribute__((target("avx512f"))) double exp_shift_avx512(double* s, int64_t n, double m) {
  const __m512d vm = _mm512_set1_pd(m);
  __m512d acc = _mm512_setzero_pd();
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m512d e = _ZGVeN8v_exp(_mm512_sub_pd(_mm512_loadu_pd(s + j), vm));
    _mm512_storeu_pd(s + j, e);
    acc = _mm512_add_pd(acc, e);
  }
  double lanes[8];
  _mm512_storeu_pd(lanes, acc);
  double l = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
  if constexpr (kVectorTail) {
    if (j < n) {
      double tail[8];
      std::fill_n(tail, 8, m);
      std::copy(s + j, s + n, tail);
      _mm512_storeu_pd(tail, _ZGVeN8v_exp(_mm512_sub_pd(_mm512_loadu_pd(tail), vm)));
      for (int64_t r = 0; r < n - j; ++r) l += (s[j + r] = tail[r]);
    }
  } else {
    for (; j < n; ++j) l += (s[j] = std::exp(s[j] - m));
  }
  return l;
}

}  // namespace

std::vector<RowKernels> row_kernels_all() {
  __builtin_cpu_init();
  std::vector<RowKernels> all{{"sse2", row_max_sse2, exp_shift_sse2<false>, exp_shift_sse2<true>}};
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) all.push_back({"avx2", row_max_avx2, exp_shift_avx2<false>, exp_shift_avx2<true>});
  if (__builtin_cpu_supports("avx512f")) all.push_back({"avx512", row_max_avx512, exp_shift_avx512<false>, exp_shift_avx512<true>});
  return all;
}

const RowKernels& row_kernels() {
  static const RowKernels k = [] {
    const RowKernels sse2{"sse2", row_max_sse2, exp_shift_sse2<false>, exp_shift_sse2<true>};
    const RowKernels avx2{"avx2", row_max_avx2, exp_shift_avx2<false>, exp_shift_avx2<true>};
    const RowKernels avx512{"avx512", row_max_avx512, exp_shift_avx512<false>, exp_shift_avx512<true>};
    const char* cap = std::getenv("FLASHCHECK_ORACLE_ISA");
    const bool allow_avx2 = !cap || std::strcmp(cap, "sse2") != 0;
    const bool allow_avx512 = allow_avx2 && (!cap || std::strcmp(cap, "avx2") != 0);
    __builtin_cpu_init();
    if (allow_avx512 && __builtin_cpu_supports("avx512f")) return avx512;
    if (allow_avx2 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return avx2;
    return sse2;
  }();
  return k;
}

// An integer environment setting in [lo, hi], else `fallback`: tuning knobs for another machine.

}  // namespace flashcheck
