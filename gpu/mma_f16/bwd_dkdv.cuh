// mma_f16's backward, pass 1: dK and dV of one KV tile, FlashAttention-2's column loop (and, in
// the default mode, dQ's share of it). The CTA holds kBlockN keys (K and V tiles) and walks every
// (query head of the KV head's group, query tile) whose rows see them, recomputing per step:
//   S = Q·Kᵀ, P = exp2(S·scale·log2 e − LSE·log2 e)   (P from the forward's LSE, fp32)
//   dP = dO·Vᵀ, dS = P ∘ (dP − D)                      (D = rowsum(dO ∘ O), bwd_delta.cuh)
//   dV += Pᵀ·dO, dK += dSᵀ·Q                           (P and dS rounded to the input type)
//   kAtomicDq: dQ_sum[rows] += dS·K                    (fp32 atomics, bwd_dq_sum.cuh rounds it)
// and writes dK·scale and dV once, after the loop: a KV head's gradients sum its whole query group
// in one fixed order (no atomics). Keys no row sees get exact zeros. The warp grids are in
// bwd_tile_size.h.
#pragma once
#include <cuda_runtime.h>

#include <cmath>
#include <type_traits>

#include "gpu/common/bwd_params.h"
#include "gpu/mma_f16/bwd_tile_size.h"
#include "gpu/mma_f16/bwd_tiles.cuh"
#include "gpu/mma_f16/bwd_warp_gemm.cuh"
#include "gpu/mma_f16/softmax.cuh"

namespace flashcheck::kernels::bwd {

// Adds a warp's dQ share to the fp32 sum ([rows][D]). Pairs go as one 8-byte reduction where the
// GPU has them (sm_90): half the atomic instructions. red, not atomicAdd: atomicAdd(float2*)
// compiles to atom.add.v2.f32, whose unused result still holds two registers until the L2
// answers. Tried and measured slower (PERF.md session 13): one per-lane pointer with immediate
// offsets (fewer instructions, 1.5% slower) and Hopper's bulk reductions from a staged tile (2.5%).
template <int MT, int NT, int D>
__device__ __forceinline__ void add_dq(float* sum, int r0, int c0, int len, const float (&acc)[MT][NT][4], int lane) {
  for_each_pair(r0, c0, len, acc, lane, [sum](int r, int c, float x, float y) {
    float* at = sum + static_cast<int64_t>(r) * D + c;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(at), "f"(x), "f"(y) : "memory");
#else
    atomicAdd(at, x);
    atomicAdd(at + 1, y);
#endif
  });
}

template <int D, bool kBf16, bool kAtomicDq>
__global__ void __launch_bounds__(BwdTraits<D>::kThreads, BwdTraits<D>::kMinBlocks) dkdv_kernel(BwdParams p) {
  using Tr = BwdTraits<D>;
  constexpr int BN = Tr::kBlockN, BM = Tr::kBlockM, T = Tr::kThreads;
  constexpr int kSm = BM / 32;      // S, dP: each warp BM/2 rows (m16 tiles) × 32 keys (4 n8 tiles)
  constexpr int kVn = D / 16;       // dK, dV: each warp 32 keys (2 m16 tiles) × D/2 dims
  constexpr int kQn = D / 32;       // dQ: each warp BM/2 rows × D/4 dims
  constexpr float kLog2e = 1.4426950408889634f;
  extern __shared__ __align__(128) uint16_t smem[];
  uint16_t* sK = smem;                // [BN][D]
  uint16_t* sV = sK + BN * D;         // [BN][D]
  uint16_t* sQ = sV + BN * D;         // [2][BM][D]
  uint16_t* sdO = sQ + 2 * BM * D;    // [2][BM][D]
  uint16_t* sP = sdO + 2 * BM * D;    // [BM][BN]: P of the step, rounded
  uint16_t* sdS = sP + BM * BN;       // [BM][BN]: dS of the step, rounded
  float* sLse = reinterpret_cast<float*>(sdS + BM * BN);  // [2][BM]: LSE (base e)
  float* sDel = sLse + 2 * BM;                            // [2][BM]: D

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int n0 = blockIdx.x * BN, hk = blockIdx.y, b = blockIdx.z;
  const int group = p.heads_q / p.heads_kv;
  const BwdMask mask(p);
  // The tile's first key is seen from row n0 − off on (causal).
  const int first_row = p.causal ? max(0, n0 - mask.off) : 0;
  const int t_begin = first_row / BM, t_count = first_row < p.seq_q ? (p.seq_q + BM - 1) / BM - t_begin : 0;
  const int steps = group * t_count;
  // The warp grids: S/dP rows sr0.. × keys sc0..; dK/dV keys kr0.. × dims kc0..; dQ rows sr0.. (the
  // rows of the warp's S) × dims qc0...
  const int sr0 = (warp >> 2) * (BM / 2), sc0 = (warp & 3) * 32;
  const int kr0 = (warp >> 1) * 32, kc0 = (warp & 1) * (D / 2);
  const int qc0 = (warp & 3) * (D / 4);

  load_rows<D, T, BN>(sK, row0_of(p.k, p.sk_, b, hk), p.sk_.seq, n0, p.seq_kv, tid);
  load_rows<D, T, BN>(sV, row0_of(p.v, p.sv_, b, hk), p.sv_.seq, n0, p.seq_kv, tid);
  // Step s: query head hk·group + s / t_count, query tile t_begin + s % t_count; stepped, not
  // divided (two divisions by t_count a step cost ~50 instructions per warp, 4% of them).
  auto prefetch = [&](int st, int h, int m0) {
    load_rows<D, T, BM, !kAtomicDq>(sQ + st * BM * D, row0_of(p.q, p.sq_, b, h), p.sq_.seq, m0, p.seq_q, tid);
    load_rows<D, T, BM, !kAtomicDq>(sdO + st * BM * D, row0_of(p.dout, p.sdo_, b, h), p.sdo_.seq, m0, p.seq_q, tid);
    load_row_stats<BM, T>(sLse + st * BM, sDel + st * BM, p, b, h, m0, tid);
  };
  // Each CTA starts its walk at a query tile of its own (its key tile's index, modulo), so that the
  // CTAs of one KV head add to different rows of the dQ sum at a time instead of all to the same
  // rows: on an H100, (4,16,8192,128) 1.2% and its causal form 2.2% faster, D = 64 8% (PERF.md,
  // session 20). The order of a CTA's steps is still fixed, so dK and dV stay deterministic.
  const int t_first = t_count > 0 ? t_begin + static_cast<int>(blockIdx.x) % t_count : t_begin;
  int h = hk * group, t = t_first;  // step s's query head and query tile
  if (steps > 0) prefetch(0, h, t * BM);
  cp_async_commit();

  float dk[2][kVn][4], dv[2][kVn][4];
  zero(dk);
  zero(dv);

  const float scale_log2 = p.scale * kLog2e;
  for (int s = 0; s < steps; ++s) {
    const int st = s & 1, m0 = t * BM;
    const int t_next = t + 1 == t_begin + t_count ? t_begin : t + 1, h_next = t_next == t_first ? h + 1 : h;
    // Stage st (issued a step ago) lands, and past this barrier every warp has finished step s − 1,
    // so stage st ^ 1, P and dS are free: the next step's copies go there now, in flight during
    // this step, and the step needs no barrier at its end (two per step, not three).
    cp_async_wait<0>();
    __syncthreads();
    if (s + 1 < steps) prefetch(st ^ 1, h_next, t_next * BM);
    cp_async_commit();
    const uint16_t* q = sQ + st * BM * D;
    const uint16_t* dO = sdO + st * BM * D;
    const float* lse = sLse + st * BM;
    const float* del = sDel + st * BM;

    {
      float sc[kSm][4][4], dp[kSm][4][4];
      warp_gemm<kBf16, true, kSm, 4, D / 16>(sc, RowA<D>(q, sr0, lane), KeyB<D>(sK, sc0, lane), lane);
      warp_gemm<kBf16, true, kSm, 4, D / 16>(dp, RowA<D>(dO, sr0, lane), KeyB<D>(sV, sc0, lane), lane);
      // Masking only where a key of the tile can be hidden from a row of the step: the tile's last
      // keys, the query tile's last rows, and causal tiles the diagonal crosses; the other steps
      // run a copy of the loop without the tests.
      const bool edge = mask.edge(m0, BM, n0, BN);
      // This thread's pairs of P and dS go to rows sr0 + 16·mt + lane/4 (+8), chunk sc0/8 + nt,
      // bytes 4·(lane % 4): the address XOR (nt << 4) (sc0/8 is a multiple of 4, nt < 4), the four
      // precomputed (XorSteps, as the operand readers'): each store is one plus an immediate row offset.
      const XorSteps<4> at0(smem_u32(sP) + (sr0 + (lane >> 2)) * (2 * BN) + ((((sc0 >> 3)) ^ (lane >> 2)) << 4) + 4 * (lane & 3));
      constexpr uint32_t kPairBytes = 2 * BM * BN;  // sdS follows sP
      auto scores_to_pairs = [&](auto masked) {
#pragma unroll
        for (int mt = 0; mt < kSm; ++mt)
#pragma unroll
          for (int hf = 0; hf < 2; ++hf) {
            const int r = sr0 + 16 * mt + (lane >> 2) + 8 * hf, row = m0 + r;
            const float lse2 = lse[r] * kLog2e, d = del[r];
#pragma unroll
            for (int nt = 0; nt < 4; ++nt) {
              float pv[2], ds[2];
#pragma unroll
              for (int e = 0; e < 2; ++e) {
                const float x = exp2_ftz(sc[mt][nt][2 * hf + e] * scale_log2 - lse2);
                pv[e] = x;
                ds[e] = x * (dp[mt][nt][2 * hf + e] - d);
                if constexpr (decltype(masked)::value) {
                  const int key = n0 + sc0 + 8 * nt + 2 * (lane & 3) + e;
                  // Hidden pairs are zeros, not products with zero: 0·NaN from a NaN the row never
                  // sees (or exp2 of a −inf LSE's +inf) would reach the gradients.
                  if (mask.hidden(row, key)) pv[e] = ds[e] = 0.0f;
                }
              }
              const uint32_t at = at0.at[nt] + (16 * mt + 8 * hf) * (2 * BN);
              st_shared_u32(at, pack2<kBf16>(pv[0], pv[1]));
              st_shared_u32(at + kPairBytes, pack2<kBf16>(ds[0], ds[1]));
            }
          }
      };
      if (edge) scores_to_pairs(std::true_type{});
      else scores_to_pairs(std::false_type{});
    }
    __syncthreads();  // P and dS of the step are whole
    warp_gemm<kBf16, false, 2, kVn, BM / 16>(dv, TransA<BN>(sP, kr0, lane), DimB<D>(dO, kc0, lane), lane);
    warp_gemm<kBf16, false, 2, kVn, BM / 16>(dk, TransA<BN>(sdS, kr0, lane), DimB<D>(q, kc0, lane), lane);
    if constexpr (kAtomicDq) {
      float dq[kSm][kQn][4];
      warp_gemm<kBf16, true, kSm, kQn, BN / 16>(dq, RowA<BN>(sdS, sr0, lane), DimB<D>(sK, qc0, lane), lane);
      add_dq<kSm, kQn, D>(p.dq_sum + (static_cast<int64_t>(b) * p.heads_q + h) * p.seq_q * D, m0 + sr0, qc0, p.seq_q, dq, lane);
    }
    h = h_next, t = t_next;
  }
  cp_async_wait<0>();

  store_acc<kBf16>(static_cast<uint16_t*>(p.dk) + static_cast<int64_t>(b) * p.sdk_.outer + static_cast<int64_t>(hk) * p.sdk_.head,
                   p.sdk_.seq, n0 + kr0, kc0, p.seq_kv, dk, p.scale, lane);
  store_acc<kBf16>(static_cast<uint16_t*>(p.dv) + static_cast<int64_t>(b) * p.sdv_.outer + static_cast<int64_t>(hk) * p.sdv_.head,
                   p.sdv_.seq, n0 + kr0, kc0, p.seq_kv, dv, 1.0f, lane);
}

}  // namespace flashcheck::kernels::bwd
