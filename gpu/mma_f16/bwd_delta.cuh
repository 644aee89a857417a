// mma_f16's backward, pass 0: D = rowsum(dO ∘ O) per query row in fp32 (FlashAttention-2's
// preprocessing), from the forward's own O (rounded to the input type) as the kernel wrote it.
// dS = P ∘ (dP − D) then needs no second pass over O in the main loops.
#pragma once
#include <cuda_runtime.h>

#include "gpu/common/bwd_params.h"
#include "gpu/mma_f16/bwd_tiles.cuh"

namespace flashcheck::kernels::bwd {

template <bool kBf16>
__device__ __forceinline__ float2 unpack2(uint32_t x) {
  if constexpr (kBf16) {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&x));
  } else {
    return __half22float2(*reinterpret_cast<const __half2*>(&x));
  }
}

// One warp per row, D/64 pairs per lane, rows grid-strided.
template <int D, bool kBf16>
__global__ void __launch_bounds__(256) delta_kernel(BwdParams p) {
  static_assert(D % 64 == 0, "whole pairs per lane");
  constexpr int kPairs = D / 64;
  const int lane = threadIdx.x & 31;
  const int64_t rows = static_cast<int64_t>(p.batch) * p.heads_q * p.seq_q;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  for (int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + (threadIdx.x >> 5); r < rows; r += warps) {
    const int i = static_cast<int>(r % p.seq_q);
    const int h = static_cast<int>(r / p.seq_q % p.heads_q);
    const int b = static_cast<int>(r / p.seq_q / p.heads_q);
    const uint16_t* o = row0_of(p.o, p.so_, b, h) + static_cast<int64_t>(i) * p.so_.seq;
    const uint16_t* d = row0_of(p.dout, p.sdo_, b, h) + static_cast<int64_t>(i) * p.sdo_.seq;
    float acc = 0.0f;
#pragma unroll
    for (int j = 0; j < kPairs; ++j) {
      const int c = 2 * (lane + 32 * j);
      const float2 x = unpack2<kBf16>(*reinterpret_cast<const uint32_t*>(o + c));
      const float2 y = unpack2<kBf16>(*reinterpret_cast<const uint32_t*>(d + c));
      acc = fmaf(x.x, y.x, fmaf(x.y, y.y, acc));
    }
#pragma unroll
    for (int w = 16; w > 0; w >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, w);
    if (lane == 0) p.delta[r] = acc;
  }
}

}  // namespace flashcheck::kernels::bwd
