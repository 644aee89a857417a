#include "reference/backward_rows.h"

#include "reference/row_simd.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace flashcheck::backward {

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

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
  double l = row_kernels().exp_tail_vector(t, n, m);
  if (sink > -kInf) l += std::exp(sink - m);  // in the denominator, with no value
  const double inv_l = 1.0 / l;
  for (int64_t j = 0; j < n; ++j) t[j] *= inv_l;
  return {m, inv_l};
}

void probs_from_stats(double* t, int64_t n, RowStats st) {
  row_kernels().exp_tail_vector(t, n, st.m);
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
