// mma_f16's backward, pass 2 of the deterministic mode (bwd_tile_size.h): dQ of one query tile,
// FlashAttention-2's row loop without atomics. Each warp owns 16 query rows and walks the KV tiles
// they see, recomputing
//   S = Q·Kᵀ, P = exp2(S·scale·log2 e − LSE·log2 e), dP = dO·Vᵀ, dS = P ∘ (dP − D)
// and accumulating dQ += dS·K (dS rounded to the input type) in fp32, in key order: one writer per
// dQ element, so dQ is bitwise the same from run to run.
#pragma once
#include <cuda_runtime.h>

#include <cmath>

#include "gpu/common/bwd_params.h"
#include "gpu/mma_f16/bwd_tile_size.h"
#include "gpu/mma_f16/bwd_tiles.cuh"
#include "gpu/mma_f16/bwd_warp_gemm.cuh"
#include "gpu/mma_f16/softmax.cuh"

namespace flashcheck::kernels::bwd {

template <int D, bool kBf16>
__global__ void __launch_bounds__(BwdTraits<D>::kThreadsQ) dq_kernel(BwdParams p) {
  using Tr = BwdTraits<D>;
  constexpr int BM = Tr::kBlockMq, BN = Tr::kBlockNq, NT = BN / 8, DT = D / 8;
  constexpr float kLog2e = 1.4426950408889634f;
  extern __shared__ __align__(128) uint16_t smem[];
  uint16_t* sQ = smem;
  uint16_t* sdO = sQ + 64 * D;
  uint16_t* sK = sdO + 64 * D;      // [2][64][D]
  uint16_t* sV = sK + 2 * 64 * D;   // [2][64][D]

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int m0 = blockIdx.x * BM, h = blockIdx.y, b = blockIdx.z;
  const int hk = h / (p.heads_q / p.heads_kv);
  const BwdMask mask(p);
  // Keys the tile's last row sees; rows before it see no more.
  const int kv_end = mask.visible(min(m0 + BM, p.seq_q) - 1);
  const int n_tiles = (kv_end + BN - 1) / BN;

  load_rows<D, Tr::kThreadsQ>(sQ, row0_of(p.q, p.sq_, b, h), p.sq_.seq, m0, p.seq_q, tid);
  load_rows<D, Tr::kThreadsQ>(sdO, row0_of(p.dout, p.sdo_, b, h), p.sdo_.seq, m0, p.seq_q, tid);
  const uint16_t* gk = row0_of(p.k, p.sk_, b, hk);
  const uint16_t* gv = row0_of(p.v, p.sv_, b, hk);
  if (n_tiles > 0) {
    load_rows<D, Tr::kThreadsQ>(sK, gk, p.sk_.seq, 0, p.seq_kv, tid);
    load_rows<D, Tr::kThreadsQ>(sV, gv, p.sv_.seq, 0, p.seq_kv, tid);
  }
  cp_async_commit();

  // This thread's rows: r[hf] = m0 + 16·warp + lane/4 + 8·hf.
  float lse2[2], del[2];
  int rows[2];
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    rows[hf] = m0 + 16 * warp + (lane >> 2) + 8 * hf;
    const bool ok = rows[hf] < p.seq_q;
    const float* lse = p.lse + static_cast<int64_t>(b) * p.slse_.outer + static_cast<int64_t>(h) * p.slse_.head;
    lse2[hf] = ok ? lse[static_cast<int64_t>(rows[hf]) * p.slse_.seq] * kLog2e : 0.0f;
    del[hf] = ok ? p.delta[(static_cast<int64_t>(b) * p.heads_q + h) * p.seq_q + rows[hf]] : 0.0f;
  }
  float dq[1][DT][4];
  zero(dq);

  const float scale_log2 = p.scale * kLog2e;
  for (int t = 0; t < n_tiles; ++t) {
    const int st = t & 1, n0 = t * BN;
    if (t + 1 < n_tiles) {
      load_rows<D, Tr::kThreadsQ>(sK + (st ^ 1) * 64 * D, gk, p.sk_.seq, n0 + BN, p.seq_kv, tid);
      load_rows<D, Tr::kThreadsQ>(sV + (st ^ 1) * 64 * D, gv, p.sv_.seq, n0 + BN, p.seq_kv, tid);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const uint16_t* k = sK + st * 64 * D;
    const uint16_t* v = sV + st * 64 * D;

    float s[1][NT][4], dp[1][NT][4];
    warp_gemm<kBf16, true, 1, NT, D / 16>(s, RowA<D>(sQ, 16 * warp, lane), KeyB<D>(k, 0, lane), lane);
    warp_gemm<kBf16, true, 1, NT, D / 16>(dp, RowA<D>(sdO, 16 * warp, lane), KeyB<D>(v, 0, lane), lane);
    const bool edge = mask.edge(m0, BM, n0, BN);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int hf = e >> 1, key = n0 + 8 * nt + 2 * (lane & 3) + (e & 1);
        const bool hidden = edge && mask.hidden(rows[hf], key);
        const float pv = exp2_ftz(s[0][nt][e] * scale_log2 - lse2[hf]);
        dp[0][nt][e] = hidden ? 0.0f : pv * (dp[0][nt][e] - del[hf]);  // dS
      }
    // dQ += dS·K, dS from the accumulators as A fragments (rounded to the input type), K read as
    // B over D through one per-lane base.
    const DimB<D> read_k(k, 0, lane);
#pragma unroll
    for (int kk = 0; kk < NT / 2; ++kk) {
      uint32_t a[4];
      acc_to_a<kBf16>(a, dp[0][2 * kk], dp[0][2 * kk + 1]);
#pragma unroll
      for (int np = 0; np < DT / 2; ++np) {
        uint32_t bk[4];
        read_k(bk, np, kk, lane);
        mma_16816<kBf16>(dq[0][2 * np], a, bk[0], bk[1]);
        mma_16816<kBf16>(dq[0][2 * np + 1], a, bk[2], bk[3]);
      }
    }
    __syncthreads();  // every warp is done with stage st before tile t + 2 refills it
  }
  cp_async_wait<0>();
  store_acc<kBf16>(static_cast<uint16_t*>(p.dq) + static_cast<int64_t>(b) * p.sdq_.outer + static_cast<int64_t>(h) * p.sdq_.head,
                   p.sdq_.seq, m0 + 16 * warp, 0, p.seq_q, dq, p.scale, lane);
}

}  // namespace flashcheck::kernels::bwd
