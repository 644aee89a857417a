// wgmma_f16's backward: its shared-memory tiles, written by the threads themselves (cp.async for
// the inputs, stmatrix for dS) in the layout wgmma's descriptors read (wgmma.cuh): 64-column
// blocks of 128-byte rows, 16-byte chunk c of row r at chunk c ^ (r % 8), tiles 1024-byte aligned.
#pragma once
#include <cstdint>

#include "gpu/common/cp_async.cuh"

namespace flashcheck::kernels::wbwd {

// Byte offset of 16-byte chunk `c` (of D/8) of row `r` in a tile of `rows` rows.
__device__ __forceinline__ uint32_t chunk_at(int rows, int r, int c) {
  return static_cast<uint32_t>((c >> 3) * rows * 128 + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

// Rows [r0, r0 + kRows) of a tensor whose row i starts at g + i·ld elements into the tile at
// shared address `tile`; rows at or past `len` become zeros without being read. Thread t copies
// chunk t % (D/8) of rows t / (D/8) + k·kStep: kStep is a multiple of 8, so its rows share r % 8
// and its shared addresses are one base plus immediates.
template <int D, int kThreads, int kRows>
__device__ __forceinline__ void load_tile(uint32_t tile, const uint16_t* g, int64_t ld, int r0, int len, int tid) {
  constexpr int kChunks = D / 8, kStep = kThreads / kChunks;
  static_assert(kThreads % kChunks == 0 && kStep % 8 == 0 && kRows % kStep == 0, "whole rows per pass, rows 8 apart");
  const int r = tid / kChunks, c = tid % kChunks;
  const uint32_t s = tile + chunk_at(kRows, r, c);
  const uint16_t* src = g + static_cast<int64_t>(r0 + r) * ld + c * 8;
#pragma unroll
  for (int i = 0; i < kRows / kStep; ++i) {
    const bool ok = r0 + r + i * kStep < len;
    cp_async_16(s + i * kStep * 128, ok ? src + static_cast<int64_t>(i) * kStep * ld : g, ok);
  }
}

// Four 8 × 8 16-bit matrices of this warp's fragments (register i: row lane/4, columns
// 2·(lane%4), +1 of matrix i) stored transposed: row t of stored matrix i is column t of matrix i,
// 16 bytes at the shared address lane 8i + t passes.
__device__ __forceinline__ void stmatrix_x4_trans(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0), "r"(r1),
               "r"(r2), "r"(r3)
               : "memory");
}

}  // namespace flashcheck::kernels::wbwd
