// Device pieces the GPU replicas' kernels share (replica_forward_kernels.cu, replica_backward_kernels.cu):
// the replicas' element-wise numerics, shared-memory staging and the blocks' fp32 register-tiled GEMM.
//
// Numerics. Everything but a GEMM's summation order is reference/replica.cpp's and
// replica_backward.cpp's, operation for operation: products and sums outside the GEMMs are rounded
// one by one (__fmul_rn, __fadd_rn: never contracted into an FMA, as the CPU build has none), the
// dtype roundings are round-to-nearest-even (reference/dtype.h), and exp, exp2 and log2 are taken in
// double and rounded once to fp32: correctly rounded but where the exact value lies within a double
// rounding of an fp32 midpoint, where glibc's expf/exp2f/log2f, the CPU's, are the ones that may
// misround (log2f by up to 0.75 ulp). A GEMM's order is free (the CPU's is Eigen's blocking): here
// every output element is one chain of fused multiply-adds in reduction order, so a call repeats
// bit for bit and both kernels that recompute a score agree on it.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "reference/gpu_oracle/device_common.cuh"
#include "reference/gpu_oracle/replica_kernels.h"

namespace flashcheck::gpu_oracle::replica {

constexpr int kThreads = 256;   // 16 × 16: thread (ty, tx) = (tid / 16, tid % 16)
constexpr int kRows = kReplicaRows;
constexpr int kBK = 16;         // reduction depth of one shared-memory stage
constexpr int kLd64 = 64 + 4;   // row stride of a 64-wide stage or tile: rows stay 16-byte aligned
constexpr float kFiniteNegInf = -1073741824.0f;  // replica.cpp's −2^30 running-max fill

__device__ __forceinline__ float exp2_f(float x) { return static_cast<float>(exp2(static_cast<double>(x))); }
__device__ __forceinline__ float log2_f(float x) { return static_cast<float>(log2(static_cast<double>(x))); }
__device__ __forceinline__ float log_f(float x) { return static_cast<float>(log(static_cast<double>(x))); }
__device__ __forceinline__ int imin(int a, int b) { return a < b ? a : b; }

__device__ __forceinline__ float4 zero4() { return make_float4(0.0f, 0.0f, 0.0f, 0.0f); }
__device__ __forceinline__ float4 load4(const float* p) { return __ldg(reinterpret_cast<const float4*>(p)); }

// A stage whose reduction runs along the source's columns: dst[c][r] = src[r·ld + c0 + c] for
// rows r < NR (zero from `valid` on) and 16 columns — the transposed operand of a product with a
// reduction over head dims (S = Q·Kᵀ, dP = dO·Vᵀ).
template <int NR>
__device__ __forceinline__ void stage_cols(float* dst, int ld_dst, const float* src, int64_t ld, int valid, int64_t c0) {
  for (int f = threadIdx.x; f < NR * 4; f += kThreads) {
    const int r = f >> 2, c = (f & 3) * 4;
    const float4 x = r < valid ? load4(src + r * ld + c0 + c) : zero4();
    dst[(c + 0) * ld_dst + r] = x.x;
    dst[(c + 1) * ld_dst + r] = x.y;
    dst[(c + 2) * ld_dst + r] = x.z;
    dst[(c + 3) * ld_dst + r] = x.w;
  }
}

// A stage whose reduction runs along the source's rows: dst[kk][c] = src[kk·ld + c] for 16 rows
// (zero from `valid` on) and `ncols` columns (a multiple of 4) — the operand of a product with a
// reduction over keys or query rows (P·V, Pᵀ·dO, dSᵀ·Q, dS·K).
__device__ __forceinline__ void stage_rows(float* dst, int ld_dst, const float* src, int64_t ld, int valid, int ncols) {
  const int n4 = ncols >> 2;
  for (int f = threadIdx.x; f < kBK * n4; f += kThreads) {
    const int kk = f / n4, c = (f - kk * n4) * 4;
    const float4 x = kk < valid ? load4(src + kk * ld + c) : zero4();
    *reinterpret_cast<float4*>(dst + kk * ld_dst + c) = x;
  }
}

// acc[i][4c + j] += Σ_kk A[kk][4ty + i] · B[kk][64c + 4tx + j] over `depth` steps: a 64 × 64·NC
// block product, each output one FMA chain in kk order.
template <int NC>
__device__ __forceinline__ void block_gemm(float (&acc)[4][4 * NC], const float* A, int lda, const float* B, int ldb,
                                           int depth) {
  const int ty = threadIdx.x >> 4, tx = threadIdx.x & 15;
#pragma unroll 4
  for (int kk = 0; kk < depth; ++kk) {
    const float4 a4 = *reinterpret_cast<const float4*>(A + kk * lda + 4 * ty);
    const float a[4] = {a4.x, a4.y, a4.z, a4.w};
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      const float4 b4 = *reinterpret_cast<const float4*>(B + kk * ldb + 64 * c + 4 * tx);
      const float b[4] = {b4.x, b4.y, b4.z, b4.w};
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][4 * c + j] = __fmaf_rn(a[i], b[j], acc[i][4 * c + j]);
    }
  }
}

template <int N>
__device__ __forceinline__ void zero(float (&acc)[4][N]) {
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < N; ++j) acc[i][j] = 0.0f;
}

// out[i][4c + j] = Σ_d X[row 4ty + i][d] · Y[row 64c + 4tx + j][d] over `depth` (a multiple of 16)
// columns, X with rows past x_valid and Y with rows past y_valid read as zeros: the 64 × 64·NC
// score-like products (S = Q·Kᵀ, dP = dO·Vᵀ). xs, ys: stages of 16 × kLd64 and 16 × (64·NC + 4).
template <int NC>
__device__ __forceinline__ void rows_dot_rows(float (&out)[4][4 * NC], const float* x, int x_valid, const float* y,
                                              int y_valid, int64_t ld, int64_t depth, float* xs, float* ys) {
  zero(out);
  for (int64_t d0 = 0; d0 < depth; d0 += kBK) {
    stage_cols<64>(xs, kLd64, x, ld, x_valid, d0);
    stage_cols<64 * NC>(ys, 64 * NC + 4, y, ld, y_valid, d0);
    __syncthreads();
    block_gemm<NC>(out, xs, kLd64, ys, 64 * NC + 4, kBK);
    __syncthreads();
  }
}

}  // namespace flashcheck::gpu_oracle::replica
