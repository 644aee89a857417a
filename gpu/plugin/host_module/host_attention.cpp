// A host kernel written like a built-in kernel folder (launch2 + register.cpp) but built only as a
// plugin module (gpu/plugin/kernel_module.cpp): the CPU example of a kernel folder under mutation
// testing (tools/mutate selftest --flashcheck), of the declared space (registry_test) and of a
// problem-model-2 kernel reached through a module: layouts by their strides, variable-length
// batches, seqused, paged caches, sliding windows (declared left-exclusive, as cuDNN counts) and
// softcap. f32 only; one query row at a time, two passes over the keys in double.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <vector>

#include "gpu/kernel.h"

namespace flashcheck::host_module {

namespace {
// Element offset of row i of head h: packed by token (thd), through the block table (paged), or
// dense by sequence.
int64_t at(const TensorRef& t, int64_t outer, int64_t seq, int64_t h) { return outer * t.stride_outer + seq * t.stride_seq + h * t.stride_head; }
}  // namespace

void launch2(const Problem& p, const KernelArgs& a) {
  const auto* q = static_cast<const float*>(a.q.data);
  const auto* k = static_cast<const float*>(a.k.data);
  const auto* v = static_cast<const float*>(a.v.data);
  auto* o = static_cast<float*>(a.o.data);
  auto* lse = static_cast<float*>(a.lse.data);
  const bool thd = p.layout == Layout::thd, paged = p.page_size > 0;
  const int64_t dqk = p.head_dim_qk, dv = p.head_dim_v, group = p.heads_q / p.heads_kv;
  const double scale = p.softmax_scale(), cap = p.softcap;
  std::vector<double> s(static_cast<size_t>(p.seq_kv) + 1);
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t q0 = thd ? a.cu_seqlens_q[b] : 0, sq = thd ? a.cu_seqlens_q[b + 1] - q0 : p.seq_q;
    const int64_t kv0 = thd && !paged ? a.cu_seqlens_kv[b] : 0;
    int64_t skv = paged ? a.cache_seqlens[b] : thd ? a.cu_seqlens_kv[b + 1] - kv0 : p.seq_kv;
    if (a.seqused_kv) skv = a.seqused_kv[b];
    auto q_row = [&](const TensorRef& t, int64_t h, int64_t i) { return thd ? at(t, 0, q0 + i, h) : at(t, b, i, h); };
    auto kv_row = [&](const TensorRef& t, int64_t hk, int64_t j) {
      if (paged) return at(t, a.block_table[b * a.max_pages_per_seq + j / p.page_size], j % p.page_size, hk);
      return thd ? at(t, 0, kv0 + j, hk) : at(t, b, j, hk);
    };
    const int64_t d = p.causal == Causal::top_left ? 0 : skv - sq;
    for (int64_t h = 0; h < p.heads_q; ++h) {
      const int64_t hk = h / group;
      for (int64_t i = 0; i < sq; ++i) {
        // Keys visible to row i: j > i + d - left (left exclusive, as declared), j <= i + d + right,
        // a causal mode capping right at 0; -1 is unbounded.
        int64_t lo = 0, hi = skv;
        int64_t right = p.causal != Causal::none ? 0 : p.window.right;
        if (p.window.left >= 0) lo = std::max<int64_t>(lo, i + d - std::min(p.window.left, sq + skv + 1) + 1);
        if (right >= 0) hi = std::min<int64_t>(hi, i + d + std::min(right, sq + skv + 1) + 1);
        const float* qi = q + q_row(a.q, h, i);
        float* oi = o + q_row(a.o, h, i);
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t j = lo; j < hi; ++j) {
          const float* kj = k + kv_row(a.k, hk, j);
          double dot = 0;
          for (int64_t c = 0; c < dqk; ++c) dot += static_cast<double>(qi[c]) * kj[c];
          s[static_cast<size_t>(j - lo)] = cap > 0 ? cap * std::tanh(dot * scale / cap) : dot * scale;
          m = std::max(m, s[static_cast<size_t>(j - lo)]);
        }
        double l = 0;
        for (int64_t j = lo; j < hi; ++j) l += std::exp(s[static_cast<size_t>(j - lo)] - m);
        for (int64_t c = 0; c < dv; ++c) {
          double acc = 0;
          for (int64_t j = lo; j < hi; ++j) acc += std::exp(s[static_cast<size_t>(j - lo)] - m) * v[kv_row(a.v, hk, j) + c];
          oi[c] = hi > lo ? static_cast<float>(acc / l) : 0.0f;  // a row that sees no key: O = 0
        }
        if (lse) lse[q_row(a.lse, h, i)] = hi > lo ? static_cast<float>(m + std::log(l)) : -INFINITY;
      }
    }
  }
}

}  // namespace flashcheck::host_module
