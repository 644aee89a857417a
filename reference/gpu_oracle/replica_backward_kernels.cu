// The FlashAttention-2 backward replica (reference/replica_backward.cpp) on the GPU, in fp32 on CUDA
// cores, with no atomics: three launches.
//   delta: D = Σ_c dO·O per row, in column order (the preprocessing kernel).
//   dkdv:  per 64 keys of one (sequence, KV head), over every 64-row tile of each head of its group
//          that sees them: S = Q·Kᵀ and dP = dO·Vᵀ, then per pair P = ex(S·sc − LSE′) (LSE′ = LSE,
//          or LSE·log2 e with exp2) and dS = P·(dP − D), both exactly 0 where the mask hides the key;
//          P's column sums in (head, row) order from the unrounded P; then dV += rd(P)ᵀ·dO and
//          dK += rd(dS)ᵀ·Q, and at the end dK × scale, both rounded to the gradients' dtype.
//   dq:    per 64 rows, over the 64-key tiles its rows see: the same S, dP, P and dS, dQ += rd(dS)·K,
//          at the end × scale, rounded.
// The backward replica's tiles (Br, Bc) only order its GEMMs' sums (P and dS are per pair, from the
// saved LSE), so these kernels take their own; every score, P and dS is the CPU's to the bit given
// the same S and dP, and the key and query sides compute the same S and dP (one FMA chain per
// element). Non-finite inputs: a masked pair's exact zero still multiplies its operands in these
// tiles' products, as on the CPU, but the tiles differ, so 0·Inf reaches other pairs than there.
#include <cuda_runtime.h>

#include "reference/gpu_oracle/check.h"
#include "reference/gpu_oracle/replica_device.cuh"

namespace flashcheck::gpu_oracle {
namespace {

using namespace replica;

// The per-row inputs of a 64-row tile: LSE in the exponent's units, D and the visible keys (rows past
// the sequence see none).
struct RowStats {
  float lse[kRows], delta[kRows];
  int lo[kRows], hi[kRows];
};

__device__ __forceinline__ void load_row_stats(RowStats& rs, const float* lse, const float* delta, int64_t row0,
                                               int64_t vis_row0, int nq, const ReplicaArgs& a) {
  const int r = threadIdx.x;
  if (r >= kRows) return;
  const bool real = r < nq;
  const float l = real ? lse[row0 + r] : 0.0f;
  rs.lse[r] = a.use_exp2 ? __fmul_rn(l, a.log2e) : l;
  rs.delta[r] = real ? delta[row0 + r] : 0.0f;
  rs.lo[r] = real ? a.vis_lo[vis_row0 + r] : 0;
  rs.hi[r] = real ? a.vis_hi[vis_row0 + r] : 0;
}

// P (unrounded, into s) and dS (rounded as configured, into ds) of the thread's 4 × 4 pairs: rows
// 4ty + i, keys k0 + 4tx + j.
__device__ __forceinline__ void p_and_ds(float (&s)[4][4], const float (&dp)[4][4], float (&ds)[4][4], int k0,
                                         const RowStats& rs, const ReplicaArgs& a) {
  const int ty = threadIdx.x >> 4, tx = threadIdx.x & 15;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int row = 4 * ty + i, lo = rs.lo[row], hi = rs.hi[row];
    const float l = rs.lse[row], d = rs.delta[row];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int key = k0 + 4 * tx + j;
      if (key < lo || key >= hi) {  // a masked pair, or a row that sees nothing: exactly 0
        s[i][j] = ds[i][j] = 0.0f;
        continue;
      }
      const float x = a.negate ? -s[i][j] : s[i][j];
      const float arg = __fsub_rn(__fmul_rn(x, a.sc), l);
      const float p = a.use_exp2 ? exp2_f(arg) : exp_f32(arg);
      const float g = __fmul_rn(p, __fsub_rn(dp[i][j], d));  // dP times V's descale (1) is dP
      s[i][j] = p;
      ds[i][j] = a.round_ds ? round_to(a.rd_p, g) : g;
    }
  }
}

__device__ __forceinline__ float grad_out(float acc, float mul, const ReplicaArgs& a) {
  const float x = __fmul_rn(acc, mul);
  return a.round_grads ? round_to(a.rd_g, x) : x;
}

__global__ void __launch_bounds__(kThreads) replica_delta_kernel(const float* __restrict__ d_out,
                                                                 const float* __restrict__ o, float* __restrict__ delta,
                                                                 int64_t rows, const ReplicaArgs a) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (r >= rows) return;
  const float* x = d_out + r * a.dv_pad;
  const float* y = o + r * a.dv;
  float d = 0.0f;
  for (int64_t c = 0; c < a.dv; ++c) d = __fadd_rn(d, __fmul_rn(x[c], y[c]));
  delta[r] = d;
}

template <int NCQ, int NCV>
constexpr size_t dkdv_smem_floats() {
  constexpr int nc = NCQ > NCV ? NCQ : NCV;
  constexpr size_t s_stage = 2 * 16 * kLd64, b_stage = 16 * (64 * nc + 4);
  return 2 * 64 * kLd64 + (s_stage > b_stage ? s_stage : b_stage);
}

// NCQ = dqk_pad / 64, NCV = dv_pad / 64. Thread (ty, tx) accumulates keys 4ty + i of dK and dV.
template <int NCQ, int NCV>
__global__ void __launch_bounds__(kThreads) replica_dkdv_kernel(
    const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
    const float* __restrict__ d_out, const float* __restrict__ lse, const float* __restrict__ delta,
    float* __restrict__ dk, float* __restrict__ dv, float* __restrict__ colsum, const KeyTile* __restrict__ tiles,
    const ReplicaArgs a) {
  constexpr int nc = NCQ > NCV ? NCQ : NCV, kLdB = 64 * nc + 4;
  float* const Ps = dynamic_smem<float>();  // [64 rows][kLd64 keys]: P, unrounded then rounded
  float* const Ds = Ps + 64 * kLd64;        // [64 rows][kLd64 keys]: dS, rounded
  float* const Xs = Ds + 64 * kLd64;        // S / dP stages ...
  float* const Ys = Xs + 16 * kLd64;
  float* const Bs = Xs;                     // ... or the dO / Q rows of dV / dK
  __shared__ RowStats rs;

  const KeyTile t = tiles[blockIdx.x];
  const int tid = threadIdx.x, ty = tid >> 4, tx = tid & 15;
  const int nk = imin(kReplicaBwdKeys, t.skv - t.k0);
  const float* const kb = k + (t.kv0 + t.k0) * a.dqk_pad;
  const float* const vb = v + (t.kv0 + t.k0) * a.dv_pad;
  float dkacc[4][4 * NCQ], dvacc[4][4 * NCV];
  zero(dkacc);
  zero(dvacc);
  float csum = 0.0f;  // thread tid < 64: key tid's Σ P, heads ascending, then rows ascending

  for (int h = 0; h < t.group; ++h) {
    for (int rt = t.rt_begin; rt < t.rt_end; ++rt) {
      const int r0 = rt * kRows, nq = imin(kRows, t.sq - r0);
      const int64_t row0 = t.q0 + static_cast<int64_t>(h) * t.sq + r0;
      load_row_stats(rs, lse, delta, row0, t.vis0 + r0, nq, a);
      float s[4][4], dp[4][4], ds[4][4];
      rows_dot_rows<1>(s, q + row0 * a.dqk_pad, nq, kb, nk, a.dqk_pad, a.dqk_pad, Xs, Ys);
      rows_dot_rows<1>(dp, d_out + row0 * a.dv_pad, nq, vb, nk, a.dv_pad, a.dv_pad, Xs, Ys);
      p_and_ds(s, dp, ds, t.k0, rs, a);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        *reinterpret_cast<float4*>(Ps + (4 * ty + i) * kLd64 + 4 * tx) = make_float4(s[i][0], s[i][1], s[i][2], s[i][3]);
        *reinterpret_cast<float4*>(Ds + (4 * ty + i) * kLd64 + 4 * tx) = make_float4(ds[i][0], ds[i][1], ds[i][2], ds[i][3]);
      }
      __syncthreads();
      if (tid < kReplicaBwdKeys)
        for (int r = 0; r < nq; ++r) csum = __fadd_rn(csum, Ps[r * kLd64 + tid]);
      __syncthreads();
      if (a.round_p) {
#pragma unroll
        for (int i = 0; i < 4; ++i)
          *reinterpret_cast<float4*>(Ps + (4 * ty + i) * kLd64 + 4 * tx) =
              make_float4(round_to(a.rd_p, s[i][0]), round_to(a.rd_p, s[i][1]), round_to(a.rd_p, s[i][2]),
                          round_to(a.rd_p, s[i][3]));
      }
      // dV += rd(P)ᵀ·dO and dK += rd(dS)ᵀ·Q over the tile's rows (rows past nq add exact zeros).
      for (int rr = 0; rr < nq; rr += kBK) {
        stage_rows(Bs, kLdB, d_out + (row0 + rr) * a.dv_pad, a.dv_pad, nq - rr, 64 * NCV);
        __syncthreads();
        block_gemm<NCV>(dvacc, Ps + rr * kLd64, kLd64, Bs, kLdB, kBK);
        __syncthreads();
      }
      for (int rr = 0; rr < nq; rr += kBK) {
        stage_rows(Bs, kLdB, q + (row0 + rr) * a.dqk_pad, a.dqk_pad, nq - rr, 64 * NCQ);
        __syncthreads();
        block_gemm<NCQ>(dkacc, Ds + rr * kLd64, kLd64, Bs, kLdB, kBK);
        __syncthreads();
      }
    }
  }

#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int key = 4 * ty + i;
    if (key >= nk) continue;
    const int64_t at = t.kv0 + t.k0 + key;
#pragma unroll
    for (int c = 0; c < 4 * NCQ; ++c) {
      const int col = 64 * (c >> 2) + 4 * tx + (c & 3);
      if (col < a.dqk) dk[at * a.dqk + col] = grad_out(dkacc[i][c], a.grad_mul, a);
    }
#pragma unroll
    for (int c = 0; c < 4 * NCV; ++c) {
      const int col = 64 * (c >> 2) + 4 * tx + (c & 3);
      if (col < a.dv) dv[at * a.dv + col] = grad_out(dvacc[i][c], 1.0f, a);
    }
  }
  if (tid < nk) colsum[t.kv0 + t.k0 + tid] = csum;
}

template <int NCQ>
constexpr size_t dq_smem_floats() {
  constexpr size_t s_stage = 2 * 16 * kLd64, b_stage = 16 * (64 * NCQ + 4);
  return 64 * kLd64 + (s_stage > b_stage ? s_stage : b_stage);
}

template <int NCQ>
__global__ void __launch_bounds__(kThreads) replica_dq_kernel(const float* __restrict__ q, const float* __restrict__ k,
                                                              const float* __restrict__ v,
                                                              const float* __restrict__ d_out,
                                                              const float* __restrict__ lse,
                                                              const float* __restrict__ delta, float* __restrict__ dq,
                                                              const RowTile* __restrict__ tiles, const ReplicaArgs a) {
  constexpr int kLdB = 64 * NCQ + 4;
  float* const DsT = dynamic_smem<float>();  // [64 keys][kLd64 rows]: rd(dS), transposed for dS·K
  float* const Xs = DsT + 64 * kLd64;
  float* const Ys = Xs + 16 * kLd64;
  float* const Bs = Xs;
  __shared__ RowStats rs;

  const RowTile t = tiles[blockIdx.x];
  const int tid = threadIdx.x, ty = tid >> 4, tx = tid & 15;
  const int nq = imin(kRows, t.sq - t.r0);
  const int64_t row0 = t.q0 + t.r0;
  load_row_stats(rs, lse, delta, row0, t.vis0 + t.r0, nq, a);
  float dqacc[4][4 * NCQ];
  zero(dqacc);
  for (int kt = t.t_begin; kt < t.t_end; ++kt) {
    const int k0 = kt * kReplicaBwdKeys, nk = imin(kReplicaBwdKeys, t.skv - k0);
    const float* const kb = k + (t.kv0 + k0) * a.dqk_pad;
    float s[4][4], dp[4][4], ds[4][4];
    rows_dot_rows<1>(s, q + row0 * a.dqk_pad, nq, kb, nk, a.dqk_pad, a.dqk_pad, Xs, Ys);
    rows_dot_rows<1>(dp, d_out + row0 * a.dv_pad, nq, v + (t.kv0 + k0) * a.dv_pad, nk, a.dv_pad, a.dv_pad, Xs, Ys);
    p_and_ds(s, dp, ds, k0, rs, a);
#pragma unroll
    for (int j = 0; j < 4; ++j)
      *reinterpret_cast<float4*>(DsT + (4 * tx + j) * kLd64 + 4 * ty) = make_float4(ds[0][j], ds[1][j], ds[2][j], ds[3][j]);
    for (int kk0 = 0; kk0 < nk; kk0 += kBK) {
      stage_rows(Bs, kLdB, kb + kk0 * a.dqk_pad, a.dqk_pad, nk - kk0, 64 * NCQ);
      __syncthreads();
      block_gemm<NCQ>(dqacc, DsT + kk0 * kLd64, kLd64, Bs, kLdB, kBK);
      __syncthreads();
    }
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int row = 4 * ty + i;
    if (row >= nq) continue;
#pragma unroll
    for (int c = 0; c < 4 * NCQ; ++c) {
      const int col = 64 * (c >> 2) + 4 * tx + (c & 3);
      if (col < a.dqk) dq[(row0 + row) * a.dqk + col] = grad_out(dqacc[i][c], a.grad_mul, a);
    }
  }
}

template <int NCQ, int NCV>
void dkdv_as(const float* q, const float* k, const float* v, const float* d_out, const float* lse, const float* delta,
             float* dk, float* dv, float* colsum, const KeyTile* tiles, int64_t ntiles, const ReplicaArgs& a,
             cudaStream_t st) {
  auto kernel = replica_dkdv_kernel<NCQ, NCV>;
  const size_t smem = dkdv_smem_floats<NCQ, NCV>() * sizeof(float);
  FCO_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  FCO_LAUNCH(kernel, static_cast<unsigned>(ntiles), kThreads, smem, st, q, k, v, d_out, lse, delta, dk, dv, colsum,
             tiles, a);
  FCO_LAUNCHED(replica_dkdv_kernel);
}

template <int NCQ>
void dkdv_dv(const float* q, const float* k, const float* v, const float* d_out, const float* lse, const float* delta,
             float* dk, float* dv, float* colsum, const KeyTile* tiles, int64_t ntiles, const ReplicaArgs& a,
             cudaStream_t st) {
  switch (a.dv_pad / 64) {
    case 1: return dkdv_as<NCQ, 1>(q, k, v, d_out, lse, delta, dk, dv, colsum, tiles, ntiles, a, st);
    case 2: return dkdv_as<NCQ, 2>(q, k, v, d_out, lse, delta, dk, dv, colsum, tiles, ntiles, a, st);
    case 3: return dkdv_as<NCQ, 3>(q, k, v, d_out, lse, delta, dk, dv, colsum, tiles, ntiles, a, st);
    default: return dkdv_as<NCQ, 4>(q, k, v, d_out, lse, delta, dk, dv, colsum, tiles, ntiles, a, st);
  }
}

template <int NCQ>
void dq_as(const float* q, const float* k, const float* v, const float* d_out, const float* lse, const float* delta,
           float* dq, const RowTile* tiles, int64_t ntiles, const ReplicaArgs& a, cudaStream_t st) {
  auto kernel = replica_dq_kernel<NCQ>;
  const size_t smem = dq_smem_floats<NCQ>() * sizeof(float);
  FCO_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  FCO_LAUNCH(kernel, static_cast<unsigned>(ntiles), kThreads, smem, st, q, k, v, d_out, lse, delta, dq, tiles, a);
  FCO_LAUNCHED(replica_dq_kernel);
}

}  // namespace

void launch_replica_delta(const float* d_out, const float* o, float* delta, int64_t rows, const ReplicaArgs& a,
                          cudaStream_t st) {
  if (rows <= 0) return;
  FCO_LAUNCH(replica_delta_kernel, static_cast<unsigned>((rows + kThreads - 1) / kThreads), kThreads, 0, st, d_out, o,
             delta, rows, a);
  FCO_LAUNCHED(replica_delta_kernel);
}

void launch_replica_dkdv(const float* q, const float* k, const float* v, const float* d_out, const float* lse,
                         const float* delta, float* dk, float* dv, float* colsum, const KeyTile* tiles, int64_t ntiles,
                         const ReplicaArgs& a, cudaStream_t st) {
  if (ntiles <= 0) return;
  switch (a.dqk_pad / 64) {
    case 1: return dkdv_dv<1>(q, k, v, d_out, lse, delta, dk, dv, colsum, tiles, ntiles, a, st);
    case 2: return dkdv_dv<2>(q, k, v, d_out, lse, delta, dk, dv, colsum, tiles, ntiles, a, st);
    case 3: return dkdv_dv<3>(q, k, v, d_out, lse, delta, dk, dv, colsum, tiles, ntiles, a, st);
    default: return dkdv_dv<4>(q, k, v, d_out, lse, delta, dk, dv, colsum, tiles, ntiles, a, st);
  }
}

void launch_replica_dq(const float* q, const float* k, const float* v, const float* d_out, const float* lse,
                       const float* delta, float* dq, const RowTile* tiles, int64_t ntiles, const ReplicaArgs& a,
                       cudaStream_t st) {
  if (ntiles <= 0) return;
  switch (a.dqk_pad / 64) {
    case 1: return dq_as<1>(q, k, v, d_out, lse, delta, dq, tiles, ntiles, a, st);
    case 2: return dq_as<2>(q, k, v, d_out, lse, delta, dq, tiles, ntiles, a, st);
    case 3: return dq_as<3>(q, k, v, d_out, lse, delta, dq, tiles, ntiles, a, st);
    default: return dq_as<4>(q, k, v, d_out, lse, delta, dq, tiles, ntiles, a, st);
  }
}

}  // namespace flashcheck::gpu_oracle
