// wgmma_f16's backward, the dK/dV pass with dQ's atomic share (bwd_tile_size.h has the design).
// Per step, warpgroup w (keys n0 + 64w ..) with the step's query rows m0 ..:
//   Sᵀ = K_w·Qᵀ, dPᵀ = V_w·dOᵀ                         (SS wgmma, issued together)
//   Pᵀ = exp2(Sᵀ·scale·log2 e − LSE·log2 e)             (per column: the rows are N now)
//   dSᵀ = Pᵀ ∘ (dPᵀ − D)                                (D = rowsum(dO ∘ O), mma_f16's pass 0)
//   dV_w += Pᵀ·dO, dK_w += dSᵀ·Q                        (RS wgmma: Pᵀ, dSᵀ rounded in registers)
//   dS → shared memory (stmatrix.trans), then dQ piece w = dS·K → fp32 atomics
// and after the walk dK·scale and dV are written once. The walk's order is fixed, so dK and dV
// are deterministic; dQ's atomics are not (no deterministic mode: BackwardCaps says so).
#pragma once
#include <cuda_runtime.h>

#include <type_traits>

#include "gpu/common/bwd_params.h"
#include "gpu/mma_f16/bwd_tiles.cuh"
#include "gpu/mma_f16/mma.cuh"
#include "gpu/mma_f16/softmax.cuh"
#include "gpu/wgmma_f16/barrier.cuh"
#include "gpu/wgmma_f16/bwd_smem.cuh"
#include "gpu/wgmma_f16/bwd_tile_size.h"
#include "gpu/wgmma_f16/wgmma.cuh"

namespace flashcheck::kernels::wbwd {

using bwd::BwdMask;
using bwd::load_row_stats;
using bwd::row0_of;

// Rows of the step this thread's accumulator column pair (j, e = 0/1) stands for: Sᵀ's columns are
// the step's rows, 8j + 2·(lane % 4) + e (wgmma.cuh's layout).
__device__ __forceinline__ int col_of(int j, int lane) { return 8 * j + 2 * (lane & 3); }

template <int D, bool kBf16>
__global__ void __launch_bounds__(WgmmaBwdTraits<D>::kThreads, 1) dkdv_kernel(BwdParams p) {
  using Tr = WgmmaBwdTraits<D>;
  constexpr int BN = Tr::kBlockN, BM = Tr::kBlockM, T = Tr::kThreads;
  constexpr float kLog2e = 1.4426950408889634f;
  extern __shared__ uint8_t smem_raw[];
  // wgmma's swizzle pattern is anchored at 1024-byte boundaries: align the base (kSmem has room).
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  uint8_t* const gbase = smem_raw + (base - raw);
  const uint32_t sK = base, sV = sK + Tr::kKeyTile, sQ = sV + Tr::kKeyTile, sdO = sQ + 2 * Tr::kRowTile;
  const uint32_t sdS = sdO + 2 * Tr::kRowTile;
  float* sLse = reinterpret_cast<float*>(gbase + (sdS + Tr::kDsTile - base));  // [2][BM]: LSE (base e)
  float* sDel = sLse + 2 * BM;                                                // [2][BM]: D

  const int tid = threadIdx.x, lane = tid & 31, wg = tid >> 7, ww = (tid >> 5) & 3;
  const int n0 = blockIdx.x * BN, hk = blockIdx.y, b = blockIdx.z;
  const int group = p.heads_q / p.heads_kv;
  const BwdMask mask(p);
  const int first_row = p.causal ? max(0, n0 - mask.off) : 0;
  const int t_begin = first_row / BM, t_count = first_row < p.seq_q ? (p.seq_q + BM - 1) / BM - t_begin : 0;
  const int steps = group * t_count;

  load_tile<D, T, BN>(sK, row0_of(p.k, p.sk_, b, hk), p.sk_.seq, n0, p.seq_kv, tid);
  load_tile<D, T, BN>(sV, row0_of(p.v, p.sv_, b, hk), p.sv_.seq, n0, p.seq_kv, tid);
  auto prefetch = [&](int st, int h, int m0) {
    load_tile<D, T, BM>(sQ + st * Tr::kRowTile, row0_of(p.q, p.sq_, b, h), p.sq_.seq, m0, p.seq_q, tid);
    load_tile<D, T, BM>(sdO + st * Tr::kRowTile, row0_of(p.dout, p.sdo_, b, h), p.sdo_.seq, m0, p.seq_q, tid);
    load_row_stats<BM, T>(sLse + st * BM, sDel + st * BM, p, b, h, m0, tid);
  };
  // As mma_f16's pass: each CTA starts at a query tile of its own, so that the CTAs of a KV head
  // add into different rows of the dQ sum at a time.
  const int t_first = t_count > 0 ? t_begin + static_cast<int>(blockIdx.x) % t_count : t_begin;
  int h = hk * group, t = t_first;
  if (steps > 0) prefetch(0, h, t * BM);
  cp_async_commit();

  // Descriptors (wgmma.cuh): K-major operands with SBO 1024 (LBO unused), N-major ones with the
  // 64-column blocks LBO apart.
  const uint64_t dK_a = wgmma::make_desc(sK + wg * 64 * 128, 16, 1024);  // A of Sᵀ: this group's 64 keys
  const uint64_t dV_a = wgmma::make_desc(sV + wg * 64 * 128, 16, 1024);
  const uint64_t dQ_b = wgmma::make_desc(sQ, 16, 1024);  // B of Sᵀ (K-major)
  const uint64_t dO_b = wgmma::make_desc(sdO, 16, 1024);
  const uint64_t dQ_n = wgmma::make_desc(sQ, static_cast<uint32_t>(Tr::kRowBlockBytes), 1024);  // B of dK (N-major)
  const uint64_t dO_n = wgmma::make_desc(sdO, static_cast<uint32_t>(Tr::kRowBlockBytes), 1024);
  const uint64_t dS_a = wgmma::make_desc(sdS + wg * Tr::kDqRows * 128, 16, 1024);  // A of dQ: its rows
  const uint64_t K_n = wgmma::make_desc(sK + (wg * Tr::kDqCols / 64) * Tr::kKeyBlockBytes,
                                        static_cast<uint32_t>(Tr::kKeyBlockBytes), 1024);  // B of dQ: its columns

  float dk[Tr::kAccRegs], dv[Tr::kAccRegs];
#pragma unroll
  for (int i = 0; i < Tr::kAccRegs; ++i) dk[i] = dv[i] = 0.0f;

  const float scale_log2 = p.scale * kLog2e;
  const int key_base = n0 + wg * 64 + 16 * ww + (lane >> 2);  // key of accumulator rows e < 2 (+8 for e ≥ 2)
  for (int s = 0; s < steps; ++s) {
    const int st = s & 1, m0 = t * BM;
    const int t_next = t + 1 == t_begin + t_count ? t_begin : t + 1, h_next = t_next == t_first ? h + 1 : h;
    // Stage st landed and, past the barrier, every thread has finished step s − 1 (its wgmmas
    // waited for), so stage st ^ 1 and dS are free for the next step's copies and this step's dS.
    cp_async_wait<0>();
    sync::fence_proxy_async();  // cp.async wrote through the generic proxy; wgmma reads through the async one
    __syncthreads();
    if (s + 1 < steps) prefetch(st ^ 1, h_next, t_next * BM);
    cp_async_commit();
    const uint32_t qoff = st * static_cast<uint32_t>(Tr::kRowTile);

    float sc[Tr::kSRegs], dp[Tr::kSRegs];
    wgmma::fence();
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks)
      wgmma::WgmmaOp<BM, kBf16>::ss(sc, wgmma::desc_add(dK_a, (ks / 4) * Tr::kKeyBlockBytes + (ks % 4) * 32),
                                    wgmma::desc_add(dQ_b, qoff + (ks / 4) * Tr::kRowBlockBytes + (ks % 4) * 32), ks > 0);
    wgmma::commit();
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks)
      wgmma::WgmmaOp<BM, kBf16>::ss(dp, wgmma::desc_add(dV_a, (ks / 4) * Tr::kKeyBlockBytes + (ks % 4) * 32),
                                    wgmma::desc_add(dO_b, qoff + (ks / 4) * Tr::kRowBlockBytes + (ks % 4) * 32), ks > 0);
    wgmma::commit();

    const float* lse = sLse + st * BM;
    const float* del = sDel + st * BM;
    const bool edge = mask.edge(m0, BM, n0, BN);
    uint32_t pf[Tr::kSRegs / 2], dsf[Tr::kSRegs / 2];
    wgmma::wait<1>();
    wgmma::fence_operands(sc);
    // Pᵀ in place of Sᵀ; hidden pairs are zeros, not products with zero (0·NaN from a NaN the row
    // never sees, or exp2 of a −inf LSE's +inf, would reach the gradients).
    auto probabilities = [&](auto masked) {
#pragma unroll
      for (int j = 0; j < BM / 8; ++j) {
        const float2 l = *reinterpret_cast<const float2*>(lse + col_of(j, lane));
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float x = exp2_ftz(sc[4 * j + e] * scale_log2 - ((e & 1) ? l.y : l.x) * kLog2e);
          if constexpr (decltype(masked)::value) {
            if (mask.hidden(m0 + col_of(j, lane) + (e & 1), key_base + 8 * (e >> 1))) x = 0.0f;
          }
          sc[4 * j + e] = x;
        }
      }
    };
    if (edge) probabilities(std::true_type{});
    else probabilities(std::false_type{});
    wgmma::wait<0>();
    wgmma::fence_operands(dp);
    // dSᵀ in place of dPᵀ, hidden pairs zeros again (a NaN dP would survive P = 0).
    auto ds_of = [&](auto masked) {
#pragma unroll
      for (int j = 0; j < BM / 8; ++j) {
        const float2 d = *reinterpret_cast<const float2*>(del + col_of(j, lane));
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float x = sc[4 * j + e] * (dp[4 * j + e] - ((e & 1) ? d.y : d.x));
          if constexpr (decltype(masked)::value) {
            if (mask.hidden(m0 + col_of(j, lane) + (e & 1), key_base + 8 * (e >> 1))) x = 0.0f;
          }
          dp[4 * j + e] = x;
        }
      }
    };
    if (edge) ds_of(std::true_type{});
    else ds_of(std::false_type{});
#pragma unroll
    for (int i = 0; i < Tr::kSRegs / 2; ++i) {
      pf[i] = pack2<kBf16>(sc[2 * i], sc[2 * i + 1]);
      dsf[i] = pack2<kBf16>(dp[2 * i], dp[2 * i + 1]);
    }

    // dV += Pᵀ·dO and dK += dSᵀ·Q over the step's rows in k16 slices (16 rows: 2048 bytes into
    // every column block of the N-major B), in flight while dS goes to shared memory.
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < BM / 16; ++kk)
      wgmma::WgmmaOp<D, kBf16>::rs(dv, pf[4 * kk], pf[4 * kk + 1], pf[4 * kk + 2], pf[4 * kk + 3],
                                   wgmma::desc_add(dO_n, qoff + kk * 16 * 128), 1);
#pragma unroll
    for (int kk = 0; kk < BM / 16; ++kk)
      wgmma::WgmmaOp<D, kBf16>::rs(dk, dsf[4 * kk], dsf[4 * kk + 1], dsf[4 * kk + 2], dsf[4 * kk + 3],
                                   wgmma::desc_add(dQ_n, qoff + kk * 16 * 128), 1);
    wgmma::commit();

    // dSᵀ to dS (rows × keys): register pair 2j (keys +0..7) and 2j + 1 (keys +8..15) of columns
    // 8j.. are two 8 × 8 fragments; stored transposed, lane 8i + t addresses row 8(j + i/2) + t,
    // keys 16·ww + 8·(i % 2) of this group's 64-key block.
    {
      const int i = lane >> 3, r8 = lane & 7;
      const int cb = 2 * ww + (i & 1);
#pragma unroll
      for (int j = 0; j < BM / 8; j += 2) {
        const int r = 8 * (j + (i >> 1)) + r8;
        const uint32_t at = sdS + wg * Tr::kRowBlockBytes + r * 128 + ((cb ^ r8) << 4);
        stmatrix_x4_trans(at, dsf[2 * j], dsf[2 * j + 1], dsf[2 * j + 2], dsf[2 * j + 3]);
      }
    }
    sync::fence_proxy_async();  // stmatrix likewise
    __syncthreads();  // dS whole

    float dq[32];
    wgmma::fence();
#pragma unroll
    for (int ks = 0; ks < BN / 16; ++ks)
      wgmma::WgmmaOp<64, kBf16>::ss_tb(dq, wgmma::desc_add(dS_a, (ks / 4) * Tr::kRowBlockBytes + (ks % 4) * 32),
                                       wgmma::desc_add(K_n, ks * 16 * 128), ks > 0);
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::fence_operands(dq);
    wgmma::fence_operands(dk);
    wgmma::fence_operands(dv);
    // dQ piece (rows kDqRows·wg + 16·ww + lane/4 (+8), columns kDqCols·wg + 8j + 2·(lane%4)) into the
    // fp32 sum, pairs as one 8-byte reduction (mma_f16's add_dq has why).
    float* sum = p.dq_sum + (static_cast<int64_t>(b) * p.heads_q + h) * p.seq_q * D;
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int row = m0 + wg * Tr::kDqRows + 16 * ww + (lane >> 2) + 8 * hf;
      if (row < p.seq_q) {
        float* at = sum + static_cast<int64_t>(row) * D + wg * Tr::kDqCols + 2 * (lane & 3);
#pragma unroll
        for (int j = 0; j < 8; ++j)
          asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(at + 8 * j), "f"(dq[4 * j + 2 * hf]),
                       "f"(dq[4 * j + 2 * hf + 1])
                       : "memory");
      }
    }
    h = h_next, t = t_next;
  }
  cp_async_wait<0>();

  // dK·scale and dV: accumulator rows are keys key_base (+8), columns 8j + 2·(lane % 4).
  uint16_t* gk = static_cast<uint16_t*>(p.dk) + static_cast<int64_t>(b) * p.sdk_.outer + static_cast<int64_t>(hk) * p.sdk_.head;
  uint16_t* gv = static_cast<uint16_t*>(p.dv) + static_cast<int64_t>(b) * p.sdv_.outer + static_cast<int64_t>(hk) * p.sdv_.head;
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const int key = key_base + 8 * hf;
    if (key >= p.seq_kv) continue;
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      const int c = 8 * j + 2 * (lane & 3);
      *reinterpret_cast<uint32_t*>(gk + static_cast<int64_t>(key) * p.sdk_.seq + c) =
          pack2<kBf16>(dk[4 * j + 2 * hf] * p.scale, dk[4 * j + 2 * hf + 1] * p.scale);
      *reinterpret_cast<uint32_t*>(gv + static_cast<int64_t>(key) * p.sdv_.seq + c) =
          pack2<kBf16>(dv[4 * j + 2 * hf], dv[4 * j + 2 * hf + 1]);
    }
  }
}

}  // namespace flashcheck::kernels::wbwd
