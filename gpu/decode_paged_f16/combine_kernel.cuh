// decode_paged_f16's second kernel: merges the splits' partial results of every output row, in
// split order 0, 1, ... (a fixed order: bitwise the same output on every run), and writes O in
// the input type and LSE in natural log. One warp per row, each lane D/32 consecutive elements.
//
// The merge arithmetic, its numerics and its edge cases are merge.h's (tested on the CPU).
#pragma once
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "gpu/decode_paged_f16/merge.h"
#include "gpu/decode_paged_f16/params.h"
#include "gpu/decode_paged_f16/sequence.cuh"
#include "gpu/decode_paged_f16/tile_size.h"
#include "gpu/mma_f16/mma.cuh"

namespace flashcheck::kernels {

template <int D, bool kBf16>
__global__ void __launch_bounds__(DecodeTraits<D>::kCombineWarps * 32) decode_combine_kernel(const DecodeParams p) {
  using T = DecodeTraits<D>;
  constexpr int PL = T::kPerLane;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t rows_total = int64_t(p.batch) * p.heads_q * p.seq_q;
  const int64_t R = int64_t(blockIdx.x) * T::kCombineWarps + warp;
  if (R >= rows_total) return;
  const int i = static_cast<int>(R % p.seq_q);
  const int64_t bh = R / p.seq_q;
  const int h = static_cast<int>(bh % p.heads_q), b = static_cast<int>(bh / p.heads_q);
  if (i >= decode_sq(p, b)) return;  // a row past this sequence's queries (packed q): not an output

  const float sl2 = p.sl2;
  float mx = -INFINITY;
  for (int s = 0; s < p.num_splits; ++s) mx = fmaxf(mx, p.ws_max[int64_t(s) * rows_total + R]);
  const float mu = merge_shift(mx);
  float acc[PL];
#pragma unroll
  for (int e = 0; e < PL; ++e) acc[e] = 0.f;
  float sum = 0.f;
  for (int s = 0; s < p.num_splits; ++s) {
    const int64_t at = int64_t(s) * rows_total + R;
    const float w = merge_weight(p.ws_max[at], p.ws_log2l[at], mu, sl2);
    sum += w;
    const float* const src = p.ws_o + at * D + lane * PL;
#pragma unroll
    for (int e = 0; e < PL; e += 2) {
      const float2 o = *reinterpret_cast<const float2*>(src + e);
      acc[e] += w * o.x;
      acc[e + 1] += w * o.y;
    }
  }
  const float inv = merge_inverse(sum);
  uint32_t packed[PL / 2];
#pragma unroll
  for (int e = 0; e < PL; e += 2) packed[e / 2] = pack2<kBf16>(acc[e] * inv, acc[e + 1] * inv);
  uint16_t* const dst = static_cast<uint16_t*>(p.o) + query_row(p, p.so, b, h, i) + lane * PL;
  if constexpr (PL == 2) {
    *reinterpret_cast<uint32_t*>(dst) = packed[0];
  } else if constexpr (PL == 4) {
    *reinterpret_cast<uint2*>(dst) = make_uint2(packed[0], packed[1]);
  } else {
    *reinterpret_cast<uint4*>(dst) = make_uint4(packed[0], packed[1], packed[2], packed[3]);
  }
  if (lane == 0 && p.lse)
    p.lse[query_row(p, p.slse, b, h, i)] = merge_lse(mu, sum, sl2);
}

}  // namespace flashcheck::kernels
