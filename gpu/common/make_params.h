// Problem -> FwdParams, on the host side (C++20) of every CUDA variant.
#pragma once
#include "gpu/common/params.h"
#include "reference/problem.h"

namespace flashcheck::kernels {

inline FwdParams make_params(const Problem& p, const void* q, const void* k, const void* v, void* o, float* lse) {
  return FwdParams{q, k, v, o, lse,
                   static_cast<int>(p.batch), static_cast<int>(p.heads_q), static_cast<int>(p.heads_kv),
                   static_cast<int>(p.seq_q), static_cast<int>(p.seq_kv), static_cast<int>(p.head_dim_qk),
                   static_cast<int>(p.head_dim_v), p.causal == Causal::none ? 0 : p.causal == Causal::top_left ? 1 : 2,
                   static_cast<float>(p.softmax_scale())};
}

}  // namespace flashcheck::kernels
