// The backward launch parameters of the built-in backward kernels (mma_f16, wgmma_f16): plain
// data (the .cu files build as C++17 and include no project headers beyond gpu/), filled on the host
// by bwd_params_host.h from a Problem, the forward's KernelArgs and the BackwardArgs.
#pragma once
#include <cstdint>

#include "gpu/common/var_params.h"

namespace flashcheck::kernels {

struct BwdParams {
  // Row (b, h, i) of a tensor starts at data + b·outer + i·seq + h·head elements (RowStrides3);
  // columns are contiguous. q, k, v, o and lse are what the forward read and wrote.
  const void *q, *k, *v, *o, *dout;
  void *dq, *dk, *dv;
  const float* lse;  // base e (mma_f16's LSE)
  RowStrides3 sq_, sk_, sv_, so_, sdo_, sdq_, sdk_, sdv_, slse_;
  float* delta;      // workspace [B, Hq, Sq] contiguous: D = rowsum(dO ∘ O) in fp32
  float* dq_sum;     // workspace [B, Hq, Sq, D] contiguous: dQ/scale summed by atomics (default mode)
  int batch, heads_q, heads_kv, seq_q, seq_kv;
  int causal;        // 0 none, 1 top_left, 2 bottom_right
  float scale;       // softmax scale
};

// One launch per (head dim, dtype): D = rowsum(dO∘O), then dK/dV per KV tile with dQ summed by
// atomics and rounded by a last pass, or (deterministic) dK/dV, then dQ per query tile; on
// `stream` (cudaStream_t). Throws std::runtime_error on a CUDA error.
template <int D>
void launch_mma_f16_backward(const BwdParams& p, bool bf16, bool deterministic, void* stream);

// wgmma_f16's (sm_90a): the same passes 0 and 3 around its warpgroup-MMA dK/dV pass
// (gpu/wgmma_f16/bwd_tile_size.h); the atomic dQ only.
template <int D>
void launch_wgmma_f16_backward(const BwdParams& p, bool bf16, void* stream);

}  // namespace flashcheck::kernels
