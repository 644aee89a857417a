#include "fuzz/replica_bound.h"

#include <algorithm>
#include <cmath>

#include "reference/mask.h"

namespace flashcheck {

RowBound fp32_kernel_row_bound(const Problem& p, const Inputs& in, int64_t b, int64_t h, int64_t i, double u_p,
                               int64_t block_kv, double lse_true) {
  constexpr double u = 0x1p-24;
  const int64_t n = visible_keys(p, i), hk = p.kv_head(h), d = p.head_dim_qk;
  const double scale = std::fabs(p.softmax_scale());
  const float* q = &in.q[static_cast<size_t>(((b * p.heads_q + h) * p.seq_q + i) * d)];
  double max_abs_dot = 0, max_abs_t = 0, vmax = 0;
  for (int64_t j = 0; j < n; ++j) {
    const float* k = &in.k[static_cast<size_t>(((b * p.heads_kv + hk) * p.seq_kv + j) * d)];
    double a = 0, t = 0;
    for (int64_t x = 0; x < d; ++x) {
      a += std::fabs(static_cast<double>(q[x]) * k[x]);
      t += static_cast<double>(q[x]) * k[x];
    }
    max_abs_dot = std::max(max_abs_dot, a * scale);
    max_abs_t = std::max(max_abs_t, std::fabs(t * scale));
    const float* v = &in.v[static_cast<size_t>(((b * p.heads_kv + hk) * p.seq_kv + j) * p.head_dim_v)];
    for (int64_t x = 0; x < p.head_dim_v; ++x) vmax = std::max(vmax, static_cast<double>(std::fabs(v[x])));
  }
  const double tiles = std::ceil(static_cast<double>(n) / static_cast<double>(block_kv));
  const double E = 2.0 * ((d + 2) * u * max_abs_dot + 8 * u * max_abs_t + 4 * u);
  const double eps_p = std::expm1(2 * E) + 2 * u * tiles;
  const double sub = (u_p > 0 && p.dtype == DType::f16) ? static_cast<double>(n) * 0x1p-25 : 0.0;
  const double acc = 2 * (static_cast<double>(n) + tiles + 2) * u;
  return {vmax * (std::min(2.0, 2 * eps_p + u_p + acc) + sub), E + acc + 4 * u * std::fabs(lse_true) + 1e-30};
}

}  // namespace flashcheck
