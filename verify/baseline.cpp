#include "verify/baseline.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "reference/mask.h"

namespace flashcheck {

std::vector<float> dtype_baseline(const Problem& p, const Inputs& in, std::span<const int64_t> rows) {
  validate(p);
  const int64_t nr = rows.empty() ? p.seq_q : static_cast<int64_t>(rows.size());
  const int64_t dqk = p.head_dim_qk, dv = p.head_dim_v;
  const float scale = static_cast<float>(p.softmax_scale());
  std::vector<float> out(static_cast<size_t>(p.batch * p.heads_q * nr * dv), 0.0f);
#pragma omp parallel for collapse(2) schedule(dynamic, 4)
  for (int64_t bh = 0; bh < p.batch * p.heads_q; ++bh) {
    for (int64_t r = 0; r < nr; ++r) {
      const int64_t b = bh / p.heads_q, h = bh % p.heads_q, kv = b * p.heads_kv + p.kv_head(h);
      const int64_t i = rows.empty() ? r : rows[static_cast<size_t>(r)];
      const int64_t n = visible_keys(p, i);
      float* o = &out[static_cast<size_t>((bh * nr + r) * dv)];
      if (n == 0) continue;
      const float* q = &in.q[static_cast<size_t>((bh * p.seq_q + i) * dqk)];
      std::vector<float> s(static_cast<size_t>(n));
      float m = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < n; ++j) {
        const float* k = &in.k[static_cast<size_t>((kv * p.seq_kv + j) * dqk)];
        float acc = 0;
        for (int64_t x = 0; x < dqk; ++x) acc += q[x] * k[x];
        s[static_cast<size_t>(j)] = round_to(p.dtype, round_to(p.dtype, acc) * scale);
        m = std::max(m, s[static_cast<size_t>(j)]);
      }
      float l = 0;
      for (auto& x : s) l += (x = std::exp(x - m));
      std::vector<float> acc(static_cast<size_t>(dv), 0.0f);
      for (int64_t j = 0; j < n; ++j) {
        const float pj = round_to(p.dtype, s[static_cast<size_t>(j)] / l);
        const float* v = &in.v[static_cast<size_t>((kv * p.seq_kv + j) * dv)];
        for (int64_t x = 0; x < dv; ++x) acc[static_cast<size_t>(x)] += pj * v[x];
      }
      for (int64_t x = 0; x < dv; ++x) o[x] = round_to(p.dtype, acc[static_cast<size_t>(x)]);
    }
  }
  return out;
}

}  // namespace flashcheck
