#include "reference/backward_rows.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace flashcheck::backward {

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// glibc's vector exp (libmvec), as the forward oracle uses it (reference/naive.cpp: within 3 ulp,
// and without it the exponentials of Sq·Skv scores cost as much as the GEMMs). Both passes of the
// backward recompute every probability, so both need it.
extern "C" {
__m128d _ZGVbN2v_exp(__m128d);
__attribute__((target("avx2"))) __m256d _ZGVdN4v_exp(__m256d);
__attribute__((target("avx512f"))) __m512d _ZGVeN8v_exp(__m512d);
}

// s[j] = exp(s[j] − m) for j < n, returning their sum. The last n mod W values go through the
// vector function too (padded in a lane buffer), never through std::exp: a probability then has
// the same bits in both passes, whichever lane or tail its key falls on in each.
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
  if (j < n) {
    double tail[2] = {m, m};
    std::copy(s + j, s + n, tail);
    _mm_storeu_pd(tail, _ZGVbN2v_exp(_mm_sub_pd(_mm_loadu_pd(tail), vm)));
    for (int64_t r = 0; r < n - j; ++r) l += (s[j + r] = tail[r]);
  }
  return l;
}

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
  if (j < n) {
    double tail[4] = {m, m, m, m};
    std::copy(s + j, s + n, tail);
    _mm256_storeu_pd(tail, _ZGVdN4v_exp(_mm256_sub_pd(_mm256_loadu_pd(tail), vm)));
    for (int64_t r = 0; r < n - j; ++r) l += (s[j + r] = tail[r]);
  }
  return l;
}

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
  if (j < n) {
    double tail[8] = {m, m, m, m, m, m, m, m};
    std::copy(s + j, s + n, tail);
    _mm512_storeu_pd(tail, _ZGVeN8v_exp(_mm512_sub_pd(_mm512_loadu_pd(tail), vm)));
    for (int64_t r = 0; r < n - j; ++r) l += (s[j + r] = tail[r]);
  }
  return l;
}

using ExpShift = double (*)(double*, int64_t, double);

// The widest the CPU runs, capped by FLASHCHECK_ORACLE_ISA=sse2|avx2 as the forward's is. Chosen
// once per process: results never depend on which thread or call asks.
ExpShift exp_shift() {
  static const ExpShift f = [] {
    const char* cap = std::getenv("FLASHCHECK_ORACLE_ISA");
    const bool allow_avx2 = !cap || std::strcmp(cap, "sse2") != 0;
    const bool allow_avx512 = allow_avx2 && (!cap || std::strcmp(cap, "avx2") != 0);
    __builtin_cpu_init();
    if (allow_avx512 && __builtin_cpu_supports("avx512f")) return &exp_shift_avx512;
    if (allow_avx2 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return &exp_shift_avx2;
    return &exp_shift_sse2;
  }();
  return f;
}
}  // namespace

void final_scores(const RowMods& mods, double* x, int64_t n, int64_t row, int64_t lo, double* dcap) {
  for (int64_t j = 0; j < n; ++j) x[j] *= mods.scale;  // rd(rd(q·k) · scale), as the forward
  if (mods.cap.active()) {
    for (int64_t j = 0; j < n; ++j) {
      // d/ds c·tanh(s/c) = 1 − tanh²(s/c) = 1/cosh²(s/c). The second form, because the first
      // cancels where tanh saturates: at s/c = 10 the derivative is 8e-9 while tanh(10) rounds
      // within 1e-16 of 1, so 1 − tanh² would keep about 7 digits; 1/cosh² keeps all but a few
      // ulp. Past |s/c| ≈ 355 cosh² overflows and gives 0, where the true value is below 1e-307.
      const double z = x[j] / mods.cap.cap;
      const double ch = std::cosh(z);
      dcap[j] = 1.0 / (ch * ch);
    }
  }
  if (mods.cap.active() || mods.bias.active())
    for (int64_t j = 0; j < n; ++j) x[j] = mods.cap(x[j]) + mods.bias(row, lo + j);
}

RowStats softmax_in_place(double* t, int64_t n, double sink) {
  double mx = -kInf;
  bool nan = false;
  for (int64_t j = 0; j < n; ++j) {
    nan |= std::isnan(t[j]);
    mx = std::max(mx, t[j]);  // a NaN never wins (it is reported apart)
  }
  // The sink joins the max too, as in the forward: a sink far above every score would otherwise
  // overflow exp.
  const double m = std::max(mx, sink);
  if (nan || mx == -kInf || m == kInf) {
    // The forward's NaN rows (its softmax is undefined there): NaN on every visible key.
    std::fill_n(t, n, kNaN);
    return {kNaN, kNaN};
  }
  double l = exp_shift()(t, n, m);
  if (sink > -kInf) l += std::exp(sink - m);  // in the denominator, with no value
  const double inv_l = 1.0 / l;
  for (int64_t j = 0; j < n; ++j) t[j] *= inv_l;
  return {m, inv_l};
}

void probs_from_stats(double* t, int64_t n, RowStats st) {
  exp_shift()(t, n, st.m);
  for (int64_t j = 0; j < n; ++j) t[j] *= st.inv_l;
}

double row_delta(const double* p, const double* dp, int64_t n) {
  double d = 0;
  for (int64_t j = 0; j < n; ++j) d += p[j] * dp[j];
  return d;
}

void score_grads(const double* p, double* dp, const double* dcap, int64_t n, double delta) {
  if (dcap) {
    for (int64_t j = 0; j < n; ++j) dp[j] = p[j] * (dp[j] - delta) * dcap[j];
  } else {
    for (int64_t j = 0; j < n; ++j) dp[j] = p[j] * (dp[j] - delta);
  }
}

}  // namespace flashcheck::backward
