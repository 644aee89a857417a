// mma_f16's backward, pass 1: dK and dV of one KV tile, FlashAttention-2's column loop. The CTA
// holds kBlockN keys (K and V tiles) and walks every (query head of the KV head's group, query
// tile) whose rows see them, recomputing per step, in the transposed orientation so that each warp
// owns 16 keys:
//   Sᵀ = K·Qᵀ, Pᵀ = exp2(Sᵀ·scale·log2 e − LSE·log2 e)   (P from the forward's LSE, fp32)
//   dPᵀ = V·dOᵀ, dSᵀ = Pᵀ ∘ (dPᵀ − D)                    (D = rowsum(dO ∘ O), bwd_delta.cuh)
//   dV += Pᵀ·dO, dK += dSᵀ·Q                              (P and dS rounded to the input type)
// and writes dK·scale and dV once, after the loop: a KV head's gradients sum its whole query group
// in one fixed order (deterministic, no atomics). Keys no row sees get exact zeros.
#pragma once
#include <cuda_runtime.h>

#include <cmath>

#include "gpu/mma_f16/bwd_params.h"
#include "gpu/mma_f16/bwd_tile_size.h"
#include "gpu/mma_f16/bwd_tiles.cuh"

namespace flashcheck::kernels::bwd {

template <int D, bool kBf16>
__global__ void __launch_bounds__(BwdTraits<D>::kThreads) dkdv_kernel(BwdParams p) {
  using Tr = BwdTraits<D>;
  constexpr int BN = Tr::kBlockN, BM = Tr::kBlockM, NT = BM / 8, DT = D / 8;
  constexpr float kLog2e = 1.4426950408889634f;
  extern __shared__ __align__(128) uint16_t smem[];
  uint16_t* sK = smem;
  uint16_t* sV = sK + 64 * D;
  uint16_t* sQ = sV + 64 * D;    // [2][64][D]
  uint16_t* sdO = sQ + 2 * 64 * D;  // [2][64][D]
  float* sLse = reinterpret_cast<float*>(sdO + 2 * 64 * D);  // [2][BM]: LSE·log2 e
  float* sDel = sLse + 2 * BM;                               // [2][BM]: D

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int n0 = blockIdx.x * BN, hk = blockIdx.y, b = blockIdx.z;
  const int group = p.heads_q / p.heads_kv;
  // Row i sees key j when j ≤ i + off (causal); the tile's first key is seen from row n0 − off on.
  const int off = p.causal == 2 ? p.seq_kv - p.seq_q : 0;
  const int first_row = p.causal ? max(0, n0 - off) : 0;
  const int t_begin = first_row / BM, t_count = first_row < p.seq_q ? (p.seq_q + BM - 1) / BM - t_begin : 0;
  const int steps = group * t_count;

  load_rows<D, Tr::kThreads>(sK, row0_of(p.k, p.sk_, b, hk), p.sk_.seq, n0, p.seq_kv, tid);
  load_rows<D, Tr::kThreads>(sV, row0_of(p.v, p.sv_, b, hk), p.sv_.seq, n0, p.seq_kv, tid);
  // Step s: query head hk·group + s / t_count, query tile t_begin + s % t_count.
  auto prefetch = [&](int s) {
    const int st = s & 1, h = hk * group + s / t_count, m0 = (t_begin + s % t_count) * BM;
    load_rows<D, Tr::kThreads>(sQ + st * 64 * D, row0_of(p.q, p.sq_, b, h), p.sq_.seq, m0, p.seq_q, tid);
    load_rows<D, Tr::kThreads>(sdO + st * 64 * D, row0_of(p.dout, p.sdo_, b, h), p.sdo_.seq, m0, p.seq_q, tid);
    for (int r = tid; r < BM; r += Tr::kThreads) {
      const int i = m0 + r;
      const bool ok = i < p.seq_q;
      const float* lse = p.lse + static_cast<int64_t>(b) * p.slse_.outer + static_cast<int64_t>(h) * p.slse_.head;
      sLse[st * BM + r] = ok ? lse[static_cast<int64_t>(i) * p.slse_.seq] * kLog2e : 0.0f;
      sDel[st * BM + r] = ok ? p.delta[(static_cast<int64_t>(b) * p.heads_q + h) * p.seq_q + i] : 0.0f;
    }
  };
  if (steps > 0) prefetch(0);
  cp_async_commit();

  float dk[DT][4], dv[DT][4];
#pragma unroll
  for (int dt = 0; dt < DT; ++dt)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[dt][e] = dv[dt][e] = 0.0f;

  const float scale_log2 = p.scale * kLog2e;
  const int key_lo = n0 + 16 * warp + (lane >> 2);  // this thread's keys: key_lo and key_lo + 8
  for (int s = 0; s < steps; ++s) {
    const int st = s & 1, m0 = (t_begin + s % t_count) * BM;
    if (s + 1 < steps) prefetch(s + 1);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const uint16_t* q = sQ + st * 64 * D;
    const uint16_t* dO = sdO + st * 64 * D;
    const float* lse2 = sLse + st * BM;
    const float* del = sDel + st * BM;

    float pt[NT][4], dpt[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) pt[nt][e] = dpt[nt][e] = 0.0f;
    gemm_tiles<D, kBf16, NT>(pt, sK, 16 * warp, q, lane);   // Sᵀ
    gemm_tiles<D, kBf16, NT>(dpt, sV, 16 * warp, dO, lane);  // dPᵀ
    // Masking only where a key of the tile can be hidden from a row of the step: the tile's last
    // keys, the query tile's last rows, and causal tiles the diagonal crosses.
    const bool edge = n0 + BN > p.seq_kv || m0 + BM > p.seq_q || (p.causal && m0 + off < n0 + BN - 1);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int c = 8 * nt + 2 * (lane & 3) + (e & 1), key = key_lo + 8 * (e >> 1), row = m0 + c;
        const bool hidden = edge && (key >= p.seq_kv || row >= p.seq_q || (p.causal && key > row + off));
        const float pv = exp2f(pt[nt][e] * scale_log2 - lse2[c]);
        // Hidden pairs are zeros, not products with zero: 0·NaN from a NaN the row never sees
        // (or exp2 of a −inf LSE's +inf) would reach the gradients.
        pt[nt][e] = hidden ? 0.0f : pv;
        dpt[nt][e] = hidden ? 0.0f : pv * (dpt[nt][e] - del[c]);  // dSᵀ
      }
    gemm_acc_tile<D, kBf16, NT>(dv, pt, dO, lane);
    gemm_acc_tile<D, kBf16, NT>(dk, dpt, q, lane);
    __syncthreads();  // every warp is done with stage st before step s + 2's prefetch refills it
  }
  cp_async_wait<0>();

  store_rows<D, kBf16>(static_cast<uint16_t*>(p.dk) + static_cast<int64_t>(b) * p.sdk_.outer + static_cast<int64_t>(hk) * p.sdk_.head,
                       p.sdk_.seq, n0 + 16 * warp, p.seq_kv, dk, p.scale, lane);
  store_rows<D, kBf16>(static_cast<uint16_t*>(p.dv) + static_cast<int64_t>(b) * p.sdv_.outer + static_cast<int64_t>(hk) * p.sdv_.head,
                       p.sdv_.seq, n0 + 16 * warp, p.seq_kv, dv, 1.0f, lane);
}

}  // namespace flashcheck::kernels::bwd
