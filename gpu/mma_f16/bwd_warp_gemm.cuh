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

// Each reader holds a lane's shared-memory address for every value of the two swizzled chunk bits a
// step moves, computed once: in the swizzled tiles the chunk (c0 + j) ^ (r % 8) of a row r = r0 +
// (the lane's row), r0 % 8 == 0, is (c0 ^ (r % 8)) ^ j whenever c0's bits and the step's j's do not
// overlap. The steps XOR chunk offsets 2·x (x the k step, or the m/n tile the step does not walk):
// bits 1-2 of the chunk are the lane's own, so x % 4 picks one of four precomputed addresses, and
// bit 3 (x ≥ 4, rows of ≥ 128 elements) is an addition, as are the row offsets: every ldmatrix is a
// base register plus an immediate. The first builds spent five instructions on the swizzled chunk
// of each load, then one LOP3 (736M of 5.3G instructions at (4,16,8192,128), the one integer op SDPA
// flash's kernel hardly has: PERF.md session 13). Valid because every tile starts at a multiple of
// 2·LD bytes (row offsets never touch the chunk bits) and each lane's base chunk is below 8 (bit 3
// clear, so adding it carries nowhere), which lane_addr's callers keep (c0 < 2 before the XOR).
template <int LD>
__device__ __forceinline__ uint32_t lane_addr(const uint16_t* tile, int row, int chunk) {
  return smem_u32(tile) + row * (2 * LD) + ((chunk ^ (row & 7)) << 4);
}

// A lane's address XOR j << kShift for j = 0..3, computed once. x's low two bits pick one; higher
// bits are added (the caller keeps the base's bits there clear).
template <int kShift>
struct XorSteps {
  uint32_t at[4];
  __device__ __forceinline__ explicit XorSteps(uint32_t base) {
#pragma unroll
    for (int j = 0; j < 4; ++j) at[j] = base ^ (j << kShift);
  }
  __device__ __forceinline__ uint32_t operator()(int x) const { return at[x & 3] + ((x >> 2) << (kShift + 2)); }
};
// The readers' steps move whole 16-byte chunk pairs: chunk offset 2·x, bits 1-2 chosen, bit 3 added
// (base chunks are below 8).
using Swizzled4 = XorSteps<5>;

// A from a tile of LD-wide rows holding A row-major: rows m0.. (m0 % 16 == 0); k steps move chunks by 2·kk.
template <int LD>
struct RowA {
  static constexpr int kMaxK = LD / 16;  // k runs along the row: steps past it would leave the row
  Swizzled4 at;
  __device__ __forceinline__ RowA(const uint16_t* tile, int m0, int lane) : at(lane_addr<LD>(tile, m0 + (lane & 15), lane >> 4)) {}
  __device__ __forceinline__ void operator()(uint32_t (&a)[4], int mt, int kk, int) const {
    ldmatrix_x4(a, at(kk) + mt * 16 * (2 * LD));
  }
};
// A from a tile holding Aᵀ row-major (k rows of m columns): columns m0.. (m0 % 32 == 0 when MT = 2,
// so m0/8 and 2·mt share no bits); k steps are 16 rows. Matrix j of the ldmatrix is (m 8·(j & 1)..,
// k 8·(j >> 1)..), which .trans turns into the row-major fragment. (m0/8 may set chunk bit 3; then
// mt < 4, so only bits 1-2 move.)
template <int LD>
struct TransA {
  static constexpr int kMaxK = 1 << 20;  // k runs down the rows
  Swizzled4 at;
  __device__ __forceinline__ TransA(const uint16_t* tile, int m0, int lane)
      : at(lane_addr<LD>(tile, (lane & 7) + ((lane >> 4) << 3), (m0 >> 3) + ((lane >> 3) & 1))) {}
  __device__ __forceinline__ void operator()(uint32_t (&a)[4], int mt, int kk, int) const {
    ldmatrix_x4_trans(a, at(mt) + kk * 16 * (2 * LD));
  }
};
// B from a tile holding Bᵀ row-major (n rows of k columns, K or V in S and dP): rows n0..
// (n0 % 8 == 0); k steps move chunks by 2·kk.
template <int LD>
struct KeyB {
  static constexpr int kMaxK = LD / 16;  // k runs along the row: steps past it would leave the row
  Swizzled4 at;
  __device__ __forceinline__ KeyB(const uint16_t* tile, int n0, int lane)
      : at(lane_addr<LD>(tile, n0 + (lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1)) {}
  __device__ __forceinline__ void operator()(uint32_t (&b)[4], int np, int kk, int) const {
    ldmatrix_x4(b, at(kk) + np * 16 * (2 * LD));
  }
};
// B from a tile holding B row-major (k rows of n columns, dO, Q or K over D): columns n0..
// (n0/8 sharing no bits with the 2·np stepped over: np ≥ 4 only from n0 = 0, where the base chunk is
// below 8, as in the dQ pass over all of D); k steps are 16 rows.
template <int LD>
struct DimB {
  static constexpr int kMaxK = 1 << 20;  // k runs down the rows
  Swizzled4 at;
  __device__ __forceinline__ DimB(const uint16_t* tile, int n0, int lane)
      : at(lane_addr<LD>(tile, (lane & 7) + (((lane >> 3) & 1) << 3), (n0 >> 3) + (lane >> 4))) {}
  __device__ __forceinline__ void operator()(uint32_t (&b)[4], int np, int kk, int) const {
    ldmatrix_x4_trans(b, at(np) + kk * 16 * (2 * LD));
  }
};

// kFresh: acc starts at zero (S, dP, dQ's share of a step): the first k step writes it without
// reading it, so it needs no zeroing first. Otherwise the product is added (dK, dV over the steps).
template <bool kBf16, bool kFresh, int MT, int NT, int KT, class ReadA, class ReadB>
__device__ __forceinline__ void warp_gemm(float (&acc)[MT][NT][4], const ReadA& read_a, const ReadB& read_b, int lane) {
  static_assert(NT % 2 == 0, "B is read two n8 tiles at a time");
  static_assert(KT <= ReadA::kMaxK && KT <= ReadB::kMaxK, "more k steps than the operand rows hold");
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
