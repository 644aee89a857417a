// mma_f16's backward, last pass of the default mode (bwd_tile_size.h): dQ = scale · the fp32 sum
// the dK/dV pass's atomics built ([B, Hq, Sq, D] contiguous), rounded once to the input type and
// written in dq's layout. Rows no KV tile reached hold the sum's zeros, so every row is written.
#pragma once
#include <cuda_runtime.h>

#include "gpu/common/bwd_params.h"
#include "gpu/mma_f16/bwd_tiles.cuh"

namespace flashcheck::kernels::bwd {

// 8 values (one 16-byte store) per thread, grid-strided.
template <int D, bool kBf16>
__global__ void __launch_bounds__(256) dq_sum_kernel(BwdParams p) {
  static_assert(D % 8 == 0, "16-byte groups");
  constexpr int kGroups = D / 8;
  const int64_t groups = static_cast<int64_t>(p.batch) * p.heads_q * p.seq_q * kGroups;
  for (int64_t x = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; x < groups;
       x += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = x / kGroups;
    const int c = static_cast<int>(x % kGroups) * 8;
    const int i = static_cast<int>(r % p.seq_q);
    const int h = static_cast<int>(r / p.seq_q % p.heads_q);
    const int b = static_cast<int>(r / p.seq_q / p.heads_q);
    const float4* src = reinterpret_cast<const float4*>(p.dq_sum + r * D + c);
    const float4 lo = src[0], hi = src[1];
    uint4 out;
    out.x = pack2<kBf16>(lo.x * p.scale, lo.y * p.scale);
    out.y = pack2<kBf16>(lo.z * p.scale, lo.w * p.scale);
    out.z = pack2<kBf16>(hi.x * p.scale, hi.y * p.scale);
    out.w = pack2<kBf16>(hi.z * p.scale, hi.w * p.scale);
    *reinterpret_cast<uint4*>(static_cast<uint16_t*>(p.dq) + static_cast<int64_t>(b) * p.sdq_.outer +
                              static_cast<int64_t>(h) * p.sdq_.head + static_cast<int64_t>(i) * p.sdq_.seq + c) = out;
  }
}

}  // namespace flashcheck::kernels::bwd
