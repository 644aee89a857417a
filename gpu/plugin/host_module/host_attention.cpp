// A host kernel written like a built-in kernel folder (launch function + register.cpp) but built
// only as a plugin module (gpu/plugin/kernel_module.cpp): the CPU example of a kernel folder under
// mutation testing (mutate.py selftest --flashcheck) and of the ABI 1.1 declared space (registry_test).
// f32 only; one query row at a time, two passes over the keys in double.
#include <cmath>
#include <limits>
#include <vector>

#include "reference/problem.h"

namespace flashcheck::host_module {

void launch(const Problem& p, const void* q_, const void* k_, const void* v_, void* o_, float* lse, void*) {
  const auto* q = static_cast<const float*>(q_);
  const auto* k = static_cast<const float*>(k_);
  const auto* v = static_cast<const float*>(v_);
  auto* o = static_cast<float*>(o_);
  const int64_t dqk = p.head_dim_qk, dv = p.head_dim_v, group = p.heads_q / p.heads_kv;
  const double scale = p.softmax_scale();
  std::vector<double> s(static_cast<size_t>(p.seq_kv));
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_q; ++h) {
      const int64_t hk = h / group;
      const float* kb = k + (b * p.heads_kv + hk) * p.seq_kv * dqk;
      const float* vb = v + (b * p.heads_kv + hk) * p.seq_kv * dv;
      for (int64_t i = 0; i < p.seq_q; ++i) {
        const float* qi = q + ((b * p.heads_q + h) * p.seq_q + i) * dqk;
        float* oi = o + ((b * p.heads_q + h) * p.seq_q + i) * dv;
        // Keys visible to row i: all, j <= i (top-left) or j <= i + Skv - Sq (bottom-right).
        int64_t n = p.seq_kv;
        if (p.causal == Causal::top_left) n = std::min(p.seq_kv, i + 1);
        if (p.causal == Causal::bottom_right) n = std::max<int64_t>(0, std::min(p.seq_kv, i + 1 + p.seq_kv - p.seq_q));
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < n; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < dqk; ++d) dot += static_cast<double>(qi[d]) * kb[j * dqk + d];
          s[j] = dot * scale;
          m = std::max(m, s[j]);
        }
        double l = 0;
        for (int64_t j = 0; j < n; ++j) l += std::exp(s[j] - m);
        for (int64_t d = 0; d < dv; ++d) {
          double acc = 0;
          for (int64_t j = 0; j < n; ++j) acc += std::exp(s[j] - m) * vb[j * dv + d];
          oi[d] = n > 0 ? static_cast<float>(acc / l) : 0.0f;  // a row that sees no key: O = 0
        }
        if (lse) lse[(b * p.heads_q + h) * p.seq_q + i] = n > 0 ? static_cast<float>(m + std::log(l)) : -INFINITY;
      }
    }
}

}  // namespace flashcheck::host_module
