// The backward's shared-memory tiles and the mma.sync fragments read from them. A tile is 64 rows
// of D 16-bit values, 16-byte chunk c of row r stored at chunk c ^ (r % 8) (the forward's swizzle:
// the 8 rows an ldmatrix phase reads fall in 8 bank groups).
#pragma once
#include <cstddef>
#include <cstdint>

#include "gpu/common/cp_async.cuh"
#include "gpu/common/var_params.h"
#include "gpu/mma_f16/mma.cuh"

namespace flashcheck::kernels::bwd {

// Row 0 of head h of sequence b (RowStrides3: elements).
__device__ __forceinline__ const uint16_t* row0_of(const void* t, const RowStrides3& s, int b, int h) {
  return static_cast<const uint16_t*>(t) + static_cast<int64_t>(b) * s.outer + static_cast<int64_t>(h) * s.head;
}

template <int D>
__device__ __forceinline__ uint32_t chunk_addr(const uint16_t* tile, int row, int chunk) {
  return smem_u32(tile + row * D + ((chunk ^ (row & 7)) << 3));
}

// Rows [r0, r0 + kRows) of a tensor whose row i starts at g + i·ld elements, into a swizzled
// tile; rows at or past `len` become zeros without being read. A thread copies one 16-byte chunk
// column c of rows r, r + kStep, ...: with kStep a multiple of 8 its rows share r % 8, so its shared
// addresses are one base plus immediates and its global ones one pointer plus a stride (the
// generic x / kChunks, x % kChunks per copy cost ~15 instructions each, a tenth of a step's).
template <int D, int kThreads, int kRows = 64>
__device__ __forceinline__ void load_rows(uint16_t* tile, const uint16_t* g, int64_t ld, int r0, int len, int tid) {
  constexpr int kChunks = D / 8, kStep = kThreads / kChunks;
  static_assert(kThreads % kChunks == 0 && kStep % 8 == 0 && kRows % kStep == 0, "whole rows per pass, rows 8 apart");
  const int r = tid / kChunks, c = tid % kChunks;
  const uint32_t s = smem_u32(tile + r * D + ((c ^ (r & 7)) << 3));
  const uint16_t* src = g + static_cast<int64_t>(r0 + r) * ld + c * 8;
#pragma unroll
  for (int i = 0; i < kRows / kStep; ++i) {
    const bool ok = r0 + r + i * kStep < len;
    cp_async_16(s + i * kStep * D * 2, ok ? src + i * kStep * ld : g, ok);
  }
}

__device__ __forceinline__ void st_shared_u32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v));
}

// A fragment (16×16, row-major in the tile: rows m0.., columns 16·kk..).
template <int D>
__device__ __forceinline__ void frag_a(uint32_t (&a)[4], const uint16_t* tile, int m0, int kk, int lane) {
  ldmatrix_x4(a, chunk_addr<D>(tile, m0 + (lane & 15), 2 * kk + (lane >> 4)));
}

// B fragments of two n8 tiles (rows n0..n0+15 of the tile are B's columns, 16·kk.. its k): b[0], b[1]
// for n-tile n0/8, b[2], b[3] for the next. The tile holds Bᵀ row-major (K in QKᵀ).
template <int D>
__device__ __forceinline__ void frag_b(uint32_t (&b)[4], const uint16_t* tile, int n0, int kk, int lane) {
  ldmatrix_x4(b, chunk_addr<D>(tile, n0 + (lane & 7) + ((lane >> 4) << 3), 2 * kk + ((lane >> 3) & 1)));
}

// B fragments of two n8 tiles when the tile holds B row-major (rows are k: V in P·V): k rows
// 16·kk.., columns (n) 16·np...
template <int D>
__device__ __forceinline__ void frag_b_trans(uint32_t (&b)[4], const uint16_t* tile, int kk, int np, int lane) {
  ldmatrix_x4_trans(b, chunk_addr<D>(tile, 16 * kk + (lane & 7) + (((lane >> 3) & 1) << 3), 2 * np + (lane >> 4)));
}

// An accumulator pair of n8 tiles (c[2kk], c[2kk + 1], rows of 16, columns 16·kk..) as the A
// fragment of the next GEMM, rounded to the input type: P or dS kept in registers between GEMMs.
template <bool kBf16>
__device__ __forceinline__ void acc_to_a(uint32_t (&a)[4], const float (&c0)[4], const float (&c1)[4]) {
  a[0] = pack2<kBf16>(c0[0], c0[1]);
  a[1] = pack2<kBf16>(c0[2], c0[3]);
  a[2] = pack2<kBf16>(c1[0], c1[1]);
  a[3] = pack2<kBf16>(c1[2], c1[3]);
}

// acc[NT] += A(rows m0.., this warp's 16) · Bᵀ over k = D, with A and Bᵀ both tiles (S = Q·Kᵀ,
// dP = dO·Vᵀ, and their transposes).
template <int D, bool kBf16, int NT>
__device__ __forceinline__ void gemm_tiles(float (&acc)[NT][4], const uint16_t* ta, int m0, const uint16_t* tb, int lane) {
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    uint32_t a[4];
    frag_a<D>(a, ta, m0, kk, lane);
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      uint32_t b[4];
      frag_b<D>(b, tb, 16 * np, kk, lane);
      mma_16816<kBf16>(acc[2 * np], a, b[0], b[1]);
      mma_16816<kBf16>(acc[2 * np + 1], a, b[2], b[3]);
    }
  }
}

// acc[D/8] += X · B where X (this warp's 16 rows × 16·KT) is in accumulators `x` and B (16·KT rows
// of D) is a tile: dV += Pᵀ·dO, dK += dSᵀ·Q, dQ += dS·K.
template <int D, bool kBf16, int KT2>
__device__ __forceinline__ void gemm_acc_tile(float (&acc)[D / 8][4], const float (&x)[KT2][4], const uint16_t* tb, int lane) {
#pragma unroll
  for (int kk = 0; kk < KT2 / 2; ++kk) {
    uint32_t a[4];
    acc_to_a<kBf16>(a, x[2 * kk], x[2 * kk + 1]);
#pragma unroll
    for (int np = 0; np < D / 16; ++np) {
      uint32_t b[4];
      frag_b_trans<D>(b, tb, kk, np, lane);
      mma_16816<kBf16>(acc[2 * np], a, b[0], b[1]);
      mma_16816<kBf16>(acc[2 * np + 1], a, b[2], b[3]);
    }
  }
}

// Writes this warp's 16 rows (row0 + lane/4 and + 8) of an accumulator, times `mul`, as 16-bit
// pairs to rows of a tensor (row i at g + i·ld), rows at or past `len` not written.
template <int D, bool kBf16>
__device__ __forceinline__ void store_rows(uint16_t* g, int64_t ld, int row0, int len, const float (&acc)[D / 8][4], float mul,
                                           int lane) {
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const int r = row0 + (lane >> 2) + 8 * hf;
    if (r >= len) continue;
    uint16_t* dst = g + static_cast<int64_t>(r) * ld + 2 * (lane & 3);
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt)
      *reinterpret_cast<uint32_t*>(dst + 8 * dt) = pack2<kBf16>(acc[dt][2 * hf] * mul, acc[dt][2 * hf + 1] * mul);
  }
}

}  // namespace flashcheck::kernels::bwd
