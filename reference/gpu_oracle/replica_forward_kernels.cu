// The forward replica (reference/replica.cpp) on the GPU: FlashAttention 2's online softmax over
// KV tiles of the configuration's block_kv keys, in fp32 on CUDA cores. One block holds 64 query
// rows of one (sequence, head) and visits the KV tiles the CPU replica's q-tile of block_q rows
// visits (RowTile::t_begin/t_end; a tile none of its rows sees changes no row, the finite −2^30
// fill making it exact, but a non-finite V there reaches the tile's rows through 0·Inf as on the
// CPU). Per KV tile, as replica.cpp:
//   S = Q·Kᵀ (raw; −Q·Kᵀ for a negative scale), masked keys −inf
//   m_new = max(m, max_j S) (NaN ignored), m_use = 0 if m_new = −inf, corr = ex((m − m_use)·sc)
//   p = ex(S·sc − m_use·sc); rowsum = Σ_j p in key order, from the unrounded p
//   ℓ = ℓ·corr + rowsum; O = O·corr + rd(p)·V; m = m_new
// with ex exp2 or exp, and at the end O·(1/ℓ) rounded to O's dtype, LSE = (m·sc + log2 ℓ)·ln 2
// (or m·sc + log ℓ); a row that sees no key, or whose ℓ underflowed to 0: O = 0, LSE = −inf.
// The row max is a reduction over the tile (order-free: only NaN, which it ignores, and the sign of
// a zero could tell orders apart, and neither reaches a result); the row sum is sequential.
#include <cuda_runtime.h>

#include "reference/gpu_oracle/check.h"
#include "reference/gpu_oracle/replica_device.cuh"

namespace flashcheck::gpu_oracle {
namespace {

using namespace replica;

template <int BN, int NCV>
constexpr size_t forward_smem_floats() {
  constexpr size_t s_stage = 16 * kLd64 + 16 * (BN + 4), v_stage = 16 * (64 * NCV + 4);
  return 64 * (BN + 4) + BN * kLd64 + (s_stage > v_stage ? s_stage : v_stage);
}

// BN keys per KV tile (block_kv), NCV = dv_pad / 64.
template <int BN, int NCV>
__global__ void __launch_bounds__(kThreads) replica_forward_kernel(const float* __restrict__ q, const float* __restrict__ k,
                                                                   const float* __restrict__ v, float* __restrict__ o,
                                                                   float* __restrict__ lse, const RowTile* __restrict__ tiles,
                                                                   const ReplicaArgs a) {
  constexpr int NCS = BN / 64, kLdS = BN + 4, kLdV = 64 * NCV + 4;
  float* const Ps = dynamic_smem<float>();      // [64][kLdS]: unrounded p, row-major
  float* const PT = Ps + 64 * kLdS;             // [BN][kLd64]: P as P·V takes it, rounded, transposed
  float* const Xs = PT + BN * kLd64;            // S stages (Q, K) ...
  float* const Ys = Xs + 16 * kLd64;
  float* const Vs = Xs;                         // ... or the V stage of P·V
  __shared__ float row_m[kRows], row_mn[kRows], row_l[kRows], row_corr[kRows];
  __shared__ int row_lo[kRows], row_hi[kRows];

  const RowTile t = tiles[blockIdx.x];
  const int tid = threadIdx.x, ty = tid >> 4, tx = tid & 15;
  const int nq = imin(kRows, t.sq - t.r0);
  if (tid < kRows) {
    row_m[tid] = a.finite_neg_inf ? kFiniteNegInf : -INFINITY;
    row_l[tid] = 0.0f;
    const bool real = tid < nq;
    row_lo[tid] = real ? a.vis_lo[t.vis0 + t.r0 + tid] : 0;
    row_hi[tid] = real ? a.vis_hi[t.vis0 + t.r0 + tid] : 0;
  }
  const float sc = a.sc;
  auto ex = [&](float x) { return a.use_exp2 ? exp2_f(x) : exp_f32(x); };
  const float* const qb = q + (t.q0 + t.r0) * a.dqk_pad;
  float oacc[4][4 * NCV];
  zero(oacc);
  __syncthreads();

  for (int kt = t.t_begin; kt < t.t_end; ++kt) {
    const int k0 = kt * BN, nk = imin(BN, t.skv - k0);
    float s[4][4 * NCS];
    rows_dot_rows<NCS>(s, qb, nq, k + (t.kv0 + k0) * a.dqk_pad, nk, a.dqk_pad, a.dqk_pad, Xs, Ys);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = 4 * ty + i, lo = row_lo[row] - k0, hi = row_hi[row] - k0;  // keys ≥ nk are ≥ skv − k0 ≥ hi
      float mt = -INFINITY;
#pragma unroll
      for (int c = 0; c < 4 * NCS; ++c) {
        const int key = 64 * (c >> 2) + 4 * tx + (c & 3);
        float x = a.negate ? -s[i][c] : s[i][c];
        if (key < lo || key >= hi) x = -INFINITY;
        s[i][c] = x;
        mt = cpu_max(mt, x);
      }
#pragma unroll
      for (int off = 1; off < 16; off <<= 1) mt = cpu_max(mt, __shfl_xor_sync(0xffffffffu, mt, off));
      const float m_old = row_m[row], m_new = cpu_max(m_old, mt);
      // A row that has seen only masked keys under a −inf fill: 0 stands in for the max (every p is
      // exp(−inf) = 0 anyway), as the kernels guard against −inf − (−inf).
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;
      const float corr = ex(__fmul_rn(__fsub_rn(m_old, m_use), sc));
      const float max_scaled = __fmul_rn(m_use, sc);
#pragma unroll
      for (int c = 0; c < NCS; ++c) {
        float p[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) p[j] = ex(__fsub_rn(__fmul_rn(s[i][4 * c + j], sc), max_scaled));
        *reinterpret_cast<float4*>(Ps + row * kLdS + 64 * c + 4 * tx) = make_float4(p[0], p[1], p[2], p[3]);
      }
      if (tx == 0) row_mn[row] = m_new, row_corr[row] = corr;
    }
    __syncthreads();
    // The row sum in key order over the tile's nk keys, from the unrounded p; P rounded for P·V.
    if (tid < kRows) {
      float rs = 0.0f;
      for (int j = 0; j < BN; ++j) {
        const float p = Ps[tid * kLdS + j];
        if (j < nk) rs = __fadd_rn(rs, p);
        PT[j * kLd64 + tid] = a.round_p ? round_to(a.rd_p, p) : p;
      }
      row_l[tid] = __fadd_rn(__fmul_rn(row_l[tid], row_corr[tid]), rs);
      row_m[tid] = row_mn[tid];
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float corr = row_corr[4 * ty + i];
#pragma unroll
      for (int c = 0; c < 4 * NCV; ++c) oacc[i][c] = __fmul_rn(oacc[i][c], corr);
    }
    // O += rd(P)·V over the tile's keys (stages past nk would add exact zeros).
    for (int kk0 = 0; kk0 < nk; kk0 += kBK) {
      stage_rows(Vs, kLdV, v + (t.kv0 + k0 + kk0) * a.dv_pad, a.dv_pad, nk - kk0, 64 * NCV);
      __syncthreads();
      block_gemm<NCV>(oacc, PT + kk0 * kLd64, kLd64, Vs, kLdV, kBK);
      __syncthreads();
    }
  }
  __syncthreads();

#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int row = 4 * ty + i;
    if (row >= nq) continue;
    const float li = row_l[row];
    const bool ok = row_lo[row] < row_hi[row] && !(li == 0.0f);
    const float inv = __fdiv_rn(1.0f, li);
    float* const orow = o + (t.q0 + t.r0 + row) * a.dv;
#pragma unroll
    for (int c = 0; c < 4 * NCV; ++c) {
      const int col = 64 * (c >> 2) + 4 * tx + (c & 3);
      if (col >= a.dv) continue;
      const float x = __fmul_rn(oacc[i][c], inv);
      orow[col] = ok ? (a.round_o ? round_to(a.rd_o, x) : x) : 0.0f;
    }
    if (tx == 0) {
      const float ms = __fmul_rn(row_m[row], sc);
      const float l = ok ? (a.use_exp2 ? __fmul_rn(__fadd_rn(ms, log2_f(li)), a.ln2) : __fadd_rn(ms, log_f(li))) : -INFINITY;
      lse[t.q0 + t.r0 + row] = l;
    }
  }
}

template <int BN, int NCV>
void forward_as(const float* q, const float* k, const float* v, float* o, float* lse, const RowTile* tiles,
                int64_t ntiles, const ReplicaArgs& a, cudaStream_t st) {
  auto kernel = replica_forward_kernel<BN, NCV>;
  const size_t smem = forward_smem_floats<BN, NCV>() * sizeof(float);
  FCO_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  FCO_LAUNCH(kernel, static_cast<unsigned>(ntiles), kThreads, smem, st, q, k, v, o, lse, tiles, a);
  FCO_LAUNCHED(replica_forward_kernel);
}

template <int BN>
void forward_dv(const float* q, const float* k, const float* v, float* o, float* lse, const RowTile* tiles,
                int64_t ntiles, const ReplicaArgs& a, cudaStream_t st) {
  switch (a.dv_pad / 64) {
    case 1: return forward_as<BN, 1>(q, k, v, o, lse, tiles, ntiles, a, st);
    case 2: return forward_as<BN, 2>(q, k, v, o, lse, tiles, ntiles, a, st);
    case 3: return forward_as<BN, 3>(q, k, v, o, lse, tiles, ntiles, a, st);
    default: return forward_as<BN, 4>(q, k, v, o, lse, tiles, ntiles, a, st);
  }
}

}  // namespace

void launch_replica_forward(int block_kv, const float* q, const float* k, const float* v, float* o, float* lse,
                            const RowTile* tiles, int64_t ntiles, const ReplicaArgs& a, cudaStream_t st) {
  if (ntiles <= 0) return;
  if (block_kv == 64) return forward_dv<64>(q, k, v, o, lse, tiles, ntiles, a, st);
  return forward_dv<128>(q, k, v, o, lse, tiles, ntiles, a, st);
}

}  // namespace flashcheck::gpu_oracle
