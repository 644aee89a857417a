#include "fuzz/replica_bound.h"

#include <algorithm>
#include <cmath>

#include "reference/mask.h"
#include "reference/score_mod.h"
#include "reference/sequences.h"

namespace flashcheck {

namespace {
// Half the spacing of the P dtype's subnormals: what rounding a subnormal P may lose, absolutely.
double half_subnormal_step(DType d) {
  switch (d) {
    case DType::f16: return 0x1p-25;
    case DType::e4m3: return 0x1p-10;
    case DType::e5m2: return 0x1p-17;
    default: return 0;  // fp32 and bf16 share fp32's exponent range: exp underflows first
  }
}
}  // namespace

RowBound fp32_kernel_row_bound(const Problem& p, const Inputs& in, int64_t b, int64_t h, int64_t i, double u_p,
                               int64_t block_kv, double lse_true, int p_scale_log2) {
  constexpr double u = 0x1p-24;
  const Sequences seqs(p);
  const KeyRange vis = visible_range(p, b, i);
  const int64_t n = vis.count(), hk = p.kv_head(h), d = p.head_dim_qk;
  const bool fp8 = is_fp8(p.dtype);
  const double qd = fp8 ? descale_of(p, in.descale_q, b, hk) : 1.0, kd = fp8 ? descale_of(p, in.descale_k, b, hk) : 1.0;
  const double vd = fp8 ? descale_of(p, in.descale_v, b, hk) : 1.0;
  const double scale = p.softmax_scale(), c = p.softcap;
  const AlibiBias<double> bias = alibi_for<double>(p, in.alibi_slopes.data(), b, h);
  const float* q = &in.q[static_cast<size_t>(seqs.q_row(b, h, i))];
  double e_max = 0, max_abs_t = 0, vmax = 0;
  for (int64_t j = vis.lo; j < vis.hi; ++j) {
    const float* k = &in.k[static_cast<size_t>(seqs.k_row(b, hk, j))];
    double a = 0, t = 0;
    for (int64_t x = 0; x < d; ++x) {
      a += std::fabs(static_cast<double>(q[x]) * k[x]);
      t += static_cast<double>(q[x]) * k[x];
    }
    const double s = t * qd * kd * scale;  // the uncapped score, natural units
    double e = (fp8 ? d + 3 : d + 2) * u * a * qd * kd * std::fabs(scale);
    double score = s;
    if (c > 0) {
      score = c * std::tanh(s / c);
      e += (fp8 ? 3 : 2) * u * std::fabs(s) + 4 * u * c;
    }
    if (bias.active()) {
      const double bj = bias(i, j);
      score += bj;
      e += 6 * u * std::fabs(bj);
    }
    e_max = std::max(e_max, e);
    max_abs_t = std::max(max_abs_t, std::fabs(score));
    const float* v = &in.v[static_cast<size_t>(seqs.v_row(b, hk, j))];
    for (int64_t x = 0; x < p.head_dim_v; ++x) vmax = std::max(vmax, std::fabs(static_cast<double>(v[x]) * vd));
  }
  const bool sink = p.sinks && std::isfinite(in.sinks[static_cast<size_t>(h)]);
  if (sink) max_abs_t = std::max(max_abs_t, std::fabs(static_cast<double>(in.sinks[static_cast<size_t>(h)])));
  // Tiles the row's keys meet (tiles start at the sequence's first key); others leave it untouched.
  const double tiles = n ? static_cast<double>((vis.hi - 1) / block_kv - vis.lo / block_kv + 1) : 0.0;
  const double E = 2.0 * (e_max + 8 * u * max_abs_t + 4 * u);
  const double eps_p = std::expm1(2 * E) + 2 * u * tiles;
  const double sub = u_p > 0 ? static_cast<double>(n) * std::ldexp(half_subnormal_step(p.dtype), -p_scale_log2) : 0.0;
  const double acc = 2 * (static_cast<double>(n) + tiles + 2 + (sink ? 2 : 0) + (fp8 ? 2 : 0)) * u;
  return {vmax * (std::min(2.0, 2 * eps_p + u_p + acc) + sub), E + acc + 4 * u * std::fabs(lse_true) + 1e-30};
}

}  // namespace flashcheck
