// A warp's share of a 2-D split product (the dK/dV pass, bwd_dkdv.cuh): acc[MT][NT] (16·MT rows ×
// 8·NT columns) += A·B over k = 16·KT, each operand read from a shared tile by a small reader that
// says how it is stored. The four readers are the four layouts the backward's five products need:
//   S = Q·Kᵀ, dP = dO·Vᵀ      A row-major (RowA), B stored transposed (KeyB: key rows, k along D)
//   dV = Pᵀ·dO, dK = dSᵀ·Q    A stored transposed (TransA: P/dS as [row][key]), B row-major (DimB)
//   dQ = dS·K                 A row-major (RowA on dS), B row-major (DimB on K)
#pragma once
#include <cstdint>

#include "gpu/mma_f16/bwd_tiles.cuh"

namespace flashcheck::kernels::bwd {

// Each reader holds one shared-memory address per lane, computed once: in the swizzled tiles the
// chunk (c0 + j) ^ (r % 8) of a row r = r0 + (lane's row) with r0 % 8 == 0 is (c0 ^ j) ^ (r % 8)
// whenever c0's bits and the step's j's do not overlap, so each step is that base plus a row
// offset (an immediate of the ldmatrix) XOR a compile-time chunk offset: one LOP3 per ldmatrix
// where computing the swizzled chunk per load spent five (with 18% of the first build's instructions HMMAs, the
// address arithmetic was a third of the rest: PERF.md session 12). Valid because every tile starts
// at a multiple of 2·LD bytes, so a row offset never touches the chunk bits (the forward's
// mainloop.cuh relies on the same).
template <int LD>
__device__ __forceinline__ uint32_t lane_addr(const uint16_t* tile, int row, int chunk) {
  return smem_u32(tile) + row * (2 * LD) + ((chunk ^ (row & 7)) << 4);
}

// A from a tile of LD-wide rows holding A row-major: rows m0.. (m0 % 16 == 0); k steps XOR 2·kk.
template <int LD>
struct RowA {
  uint32_t base;
  __device__ __forceinline__ RowA(const uint16_t* tile, int m0, int lane) : base(lane_addr<LD>(tile, m0 + (lane & 15), lane >> 4)) {}
  __device__ __forceinline__ void operator()(uint32_t (&a)[4], int mt, int kk, int) const {
    ldmatrix_x4(a, (base + mt * 16 * (2 * LD)) ^ (kk << 5));
  }
};
// A from a tile holding Aᵀ row-major (k rows of m columns): columns m0.. (m0 % 32 == 0 when MT = 2,
// so m0/8 and 2·mt share no bits); k steps are 16 rows. Matrix j of the ldmatrix is (m 8·(j & 1)..,
// k 8·(j >> 1)..), which .trans turns into the row-major fragment.
template <int LD>
struct TransA {
  uint32_t base;
  __device__ __forceinline__ TransA(const uint16_t* tile, int m0, int lane)
      : base(lane_addr<LD>(tile, (lane & 7) + ((lane >> 4) << 3), (m0 >> 3) + ((lane >> 3) & 1))) {}
  __device__ __forceinline__ void operator()(uint32_t (&a)[4], int mt, int kk, int) const {
    ldmatrix_x4_trans(a, (base + kk * 16 * (2 * LD)) ^ (mt << 5));
  }
};
// B from a tile holding Bᵀ row-major (n rows of k columns, K or V in S and dP): rows n0..
// (n0 % 8 == 0); k steps XOR 2·kk.
template <int LD>
struct KeyB {
  uint32_t base;
  __device__ __forceinline__ KeyB(const uint16_t* tile, int n0, int lane)
      : base(lane_addr<LD>(tile, n0 + (lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1)) {}
  __device__ __forceinline__ void operator()(uint32_t (&b)[4], int np, int kk, int) const {
    ldmatrix_x4(b, (base + np * 16 * (2 * LD)) ^ (kk << 5));
  }
};
// B from a tile holding B row-major (k rows of n columns, dO, Q or K over D): columns n0..
// (n0/8 sharing no bits with the 2·np stepped over); k steps are 16 rows.
template <int LD>
struct DimB {
  uint32_t base;
  __device__ __forceinline__ DimB(const uint16_t* tile, int n0, int lane)
      : base(lane_addr<LD>(tile, (lane & 7) + (((lane >> 3) & 1) << 3), (n0 >> 3) + (lane >> 4))) {}
  __device__ __forceinline__ void operator()(uint32_t (&b)[4], int np, int kk, int) const {
    ldmatrix_x4_trans(b, (base + kk * 16 * (2 * LD)) ^ (np << 5));
  }
};

// kFresh: acc starts at zero (S, dP, dQ's share of a step): the first k step writes it without
// reading it, so it needs no zeroing first. Otherwise the product is added (dK, dV over the steps).
template <bool kBf16, bool kFresh, int MT, int NT, int KT, class ReadA, class ReadB>
__device__ __forceinline__ void warp_gemm(float (&acc)[MT][NT][4], const ReadA& read_a, const ReadB& read_b, int lane) {
  static_assert(NT % 2 == 0, "B is read two n8 tiles at a time");
#pragma unroll
  for (int kk = 0; kk < KT; ++kk) {
    uint32_t a[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) read_a(a[mt], mt, kk, lane);
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      uint32_t b[4];
      read_b(b, np, kk, lane);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        if (kFresh && kk == 0) {
          mma_16816_zero<kBf16>(acc[mt][2 * np], a[mt], b[0], b[1]);
          mma_16816_zero<kBf16>(acc[mt][2 * np + 1], a[mt], b[2], b[3]);
        } else {
          mma_16816<kBf16>(acc[mt][2 * np], a[mt], b[0], b[1]);
          mma_16816<kBf16>(acc[mt][2 * np + 1], a[mt], b[2], b[3]);
        }
      }
    }
  }
}

template <int MT, int NT>
__device__ __forceinline__ void zero(float (&acc)[MT][NT][4]) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.0f;
}

// Calls f(r, c, x, y) for each pair of a warp's share of an accumulator tile: rows r0 + 16·mt +
// lane/4 (+8) below `len`, columns c0 + 8·nt + 2·(lane % 4), x and y the pair's two values.
template <int MT, int NT, class F>
__device__ __forceinline__ void for_each_pair(int r0, int c0, int len, const float (&acc)[MT][NT][4], int lane, F&& f) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int r = r0 + 16 * mt + (lane >> 2) + 8 * hf;
      if (r >= len) continue;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) f(r, c0 + 8 * nt + 2 * (lane & 3), acc[mt][nt][2 * hf], acc[mt][nt][2 * hf + 1]);
    }
}

// Writes a warp's share of dK, dV or dQ, times `mul`, as 16-bit pairs to rows of a tensor (row i at
// g + i·ld).
template <bool kBf16, int MT, int NT>
__device__ __forceinline__ void store_acc(uint16_t* g, int64_t ld, int r0, int c0, int len, const float (&acc)[MT][NT][4], float mul,
                                          int lane) {
  for_each_pair(r0, c0, len, acc, lane, [=](int r, int c, float x, float y) {
    *reinterpret_cast<uint32_t*>(g + static_cast<int64_t>(r) * ld + c) = pack2<kBf16>(x * mul, y * mul);
  });
}

}  // namespace flashcheck::kernels::bwd
