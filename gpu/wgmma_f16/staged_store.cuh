// O's way out of a wgmma consumer warpgroup (wgmma_f16, wgmma_e4m3): each thread's pairs of 16-bit
// outputs staged in shared memory in 128-byte swizzled rows (chunk c of row r at c ^ (r % 8): the
// quad writing one row and the 8 rows of a warp's store land in 8 different bank groups), then
// every row copied out in whole 16-byte chunks. The staging area is the warpgroup's 64 rows of
// Dv/64 column blocks, kBlockBytes apart.
#pragma once
#include <cstddef>
#include <cstdint>

#include "gpu/wgmma_f16/place.cuh"

namespace flashcheck::kernels {

// Where the pair of columns 8j + 2·(lane % 4) + {0,1} of warpgroup row r is staged.
template <size_t kBlockBytes>
__device__ __forceinline__ uint32_t* staged_pair(uint8_t* stage, int r, int j, int lane) {
  return reinterpret_cast<uint32_t*>(stage + (j / 8) * kBlockBytes + r * 128 + (((j % 8) ^ (r & 7)) << 4) + (lane & 3) * 4);
}

// After the warpgroup's barrier: rows row_wg .. row_wg + 63 copied out, those before sq.
template <int Dv, size_t kBlockBytes>
__device__ __forceinline__ void store_staged_rows(const uint8_t* stage, const OutRows& out, int row_wg, int sq, int tid_wg) {
  constexpr int kChunks = Dv / 8;  // 16-byte chunks per output row
  static_assert(64 * kChunks % 128 == 0, "whole passes of the warpgroup");
#pragma unroll
  for (int k = 0; k < 64 * kChunks / 128; ++k) {
    const int i = tid_wg + 128 * k, r = i / kChunks, ch = i % kChunks;
    const int row = row_wg + r;
    if (row < sq)
      *reinterpret_cast<uint4*>(out.o + static_cast<size_t>(row) * out.ld_o + ch * 8) =
          *reinterpret_cast<const uint4*>(stage + (ch / 8) * kBlockBytes + r * 128 + (((ch % 8) ^ (r & 7)) << 4));
  }
}

}  // namespace flashcheck::kernels
