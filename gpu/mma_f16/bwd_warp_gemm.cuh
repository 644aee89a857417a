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

// A from a tile of LD-wide rows holding A row-major: rows m0.. of this warp.
template <int LD>
struct RowA {
  const uint16_t* tile;
  int m0;
  __device__ __forceinline__ void operator()(uint32_t (&a)[4], int mt, int kk, int lane) const {
    frag_a<LD>(a, tile, m0 + 16 * mt, kk, lane);
  }
};
// A from a tile holding Aᵀ row-major (k rows of m columns): columns m0.. of this warp.
template <int LD>
struct TransA {
  const uint16_t* tile;
  int m0;
  __device__ __forceinline__ void operator()(uint32_t (&a)[4], int mt, int kk, int lane) const {
    frag_a_trans<LD>(a, tile, m0 + 16 * mt, kk, lane);
  }
};
// B from a tile holding Bᵀ row-major (n rows of k columns, K or V in S and dP): rows n0...
template <int LD>
struct KeyB {
  const uint16_t* tile;
  int n0;
  __device__ __forceinline__ void operator()(uint32_t (&b)[4], int np, int kk, int lane) const {
    frag_b<LD>(b, tile, n0 + 16 * np, kk, lane);
  }
};
// B from a tile holding B row-major (k rows of n columns, dO, Q or K over D): columns n0...
template <int LD>
struct DimB {
  const uint16_t* tile;
  int n0;
  __device__ __forceinline__ void operator()(uint32_t (&b)[4], int np, int kk, int lane) const {
    frag_b_trans<LD>(b, tile, kk, (n0 >> 4) + np, lane);
  }
};

template <bool kBf16, int MT, int NT, int KT, class ReadA, class ReadB>
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
        mma_16816<kBf16>(acc[mt][2 * np], a[mt], b[0], b[1]);
        mma_16816<kBf16>(acc[mt][2 * np + 1], a[mt], b[2], b[3]);
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

}  // namespace flashcheck::kernels::bwd
