// KernelArgs and BackwardArgs over contiguous BHSD buffers (lse [B, Hq, Sq]), for the tests and
// benchmarks that call a built-in kernel's entries directly rather than through the harness.
#pragma once
#include "gpu/kernel.h"

namespace flashcheck {

inline TensorRef contiguous_bhsd_ref(void* data, int64_t heads, int64_t seq, int64_t d) {
  return TensorRef{data, heads * seq * d, d, seq * d, 0};
}

inline KernelArgs contiguous_kernel_args(const Problem& p, void* q, void* k, void* v, void* o, void* lse, void* stream) {
  KernelArgs a;
  a.q = contiguous_bhsd_ref(q, p.heads_q, p.seq_q, p.head_dim_qk);
  a.k = contiguous_bhsd_ref(k, p.heads_kv, p.seq_kv, p.head_dim_qk);
  a.v = contiguous_bhsd_ref(v, p.heads_kv, p.seq_kv, p.head_dim_v);
  a.o = contiguous_bhsd_ref(o, p.heads_q, p.seq_q, p.head_dim_v);
  a.lse = TensorRef{lse, p.heads_q * p.seq_q, 1, p.seq_q, 0};
  a.stream = stream;
  return a;
}

// dO in o's layout, dQ, dK, dV in q's, k's and v's.
inline BackwardArgs contiguous_backward_args(const Problem& p, void* dout, void* dq, void* dk, void* dv) {
  BackwardArgs g;
  g.dout = contiguous_bhsd_ref(dout, p.heads_q, p.seq_q, p.head_dim_v);
  g.dq = contiguous_bhsd_ref(dq, p.heads_q, p.seq_q, p.head_dim_qk);
  g.dk = contiguous_bhsd_ref(dk, p.heads_kv, p.seq_kv, p.head_dim_qk);
  g.dv = contiguous_bhsd_ref(dv, p.heads_kv, p.seq_kv, p.head_dim_v);
  return g;
}

}  // namespace flashcheck
