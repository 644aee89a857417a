// Device helpers shared by the GPU oracle's own kernels (and by nothing in gpu/).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "reference/gpu_oracle/kernels.h"

namespace flashcheck::gpu_oracle {

// The tile a scores-kernel block works on: the last t with block0[t] <= blk (block0 ascends; tiles
// that see no key have no blocks, so equal neighbours are skipped by taking the last).
__device__ __forceinline__ int64_t tile_of_block(const int64_t* block0, int64_t ntiles, int64_t blk) {
  int64_t lo = 0, hi = ntiles - 1;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (block0[mid] <= blk) lo = mid; else hi = mid - 1;
  }
  return lo;
}

// The ALiBi slope of query head h in sequence b ([Hq], or [B, Hq] per batch).
__device__ __forceinline__ float alibi_slope(const Params& p, int64_t b, int64_t h) {
  return p.slopes[p.alibi_per_batch ? b * p.heads_q + h : h];
}

__device__ __forceinline__ double quiet_nan() { return __longlong_as_double(0x7ff8000000000000LL); }
__device__ __forceinline__ double neg_inf() { return __longlong_as_double(static_cast<long long>(0xfff0000000000000ULL)); }

// Four consecutive packed elements, loaded in one access (16 bytes of fp32, 8 of a 16-bit type)
// into registers, widened exactly to fp32 later: loads of the next stage stay in flight while the
// current one computes.
template <typename T>
struct Ld;
template <>
struct Ld<float> {
  using R = float4;
  static __device__ __forceinline__ R load(const float* p) { return __ldg(reinterpret_cast<const float4*>(p)); }
  static __device__ __forceinline__ float4 widen(R r) { return r; }
};
template <>
struct Ld<__nv_bfloat16> {
  using R = uint2;
  static __device__ __forceinline__ R load(const __nv_bfloat16* p) { return __ldg(reinterpret_cast<const uint2*>(p)); }
  // bf16 is the upper half of an fp32: widening is a shift.
  static __device__ __forceinline__ float4 widen(R r) {
    return make_float4(__uint_as_float(r.x << 16), __uint_as_float(r.x & 0xffff0000u), __uint_as_float(r.y << 16),
                       __uint_as_float(r.y & 0xffff0000u));
  }
};
template <>
struct Ld<__half> {
  using R = uint2;
  static __device__ __forceinline__ R load(const __half* p) { return __ldg(reinterpret_cast<const uint2*>(p)); }
  static __device__ __forceinline__ float h(unsigned bits) {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
  }
  static __device__ __forceinline__ float4 widen(R r) {
    return make_float4(h(r.x & 0xffffu), h(r.x >> 16), h(r.y & 0xffffu), h(r.y >> 16));
  }
};

__device__ __forceinline__ bool all_finite(float4 x) {
  return isfinite(x.x) && isfinite(x.y) && isfinite(x.z) && isfinite(x.w);
}

// Weights never underflow to 0 here: exp's argument is floored at −709.784, so every visible key
// (−inf scores included) weighs at least e^−709.784 ≈ 5.6e−309, as every exact softmax weight is
// positive. An Inf value at a visible key then reaches the output as ±Inf, never as 0·Inf = NaN.
// This is the CPU oracle's behaviour wherever Eigen's vectorised exp (which clamps at that very
// argument) takes the key; its scalar tail underflows to 0 instead, so for Inf at such faint keys
// the CPU oracle says Inf or NaN by the key's position (gpu_oracle_test accepts both there). In
// finite rows the floor moves no output by more than n·5.6e−309·max|v|.
constexpr double kExpArgFloor = -709.784;

// Max that keeps NaN: a visible NaN score must make its row NaN, as in naive_attention.
__device__ __forceinline__ double nan_max(double a, double b) { return (isnan(a) || isnan(b)) ? quiet_nan() : fmax(a, b); }

// The NaN-sticky max of a row's visible scores, from the scores pass's per-64-key-tile maxima
// (row r of its tile); −inf for a row that sees no key.
__device__ __forceinline__ double visible_max(const double* pmax, const Tile& tile, const Row& rw, int64_t r) {
  double m = neg_inf();
  if (rw.lo < rw.hi) {
    const double* pm = pmax + tile.s_off / 64 + r * (tile.ncols / 64);
    for (int64_t x = (rw.lo - tile.key0) / 64; tile.key0 + 64 * x < rw.hi; ++x) m = nan_max(m, pm[x]);
  }
  return m;
}

// fp32 helpers of the same-dtype baselines (baseline_kernels.cu) and the replicas (replica_*.cu),
// which the CPU computes with these very roundings.
__device__ __forceinline__ float round_to(Round r, float x) {
  if (r == Round::bf16) return __bfloat162float(__float2bfloat16_rn(x));
  if (r == Round::f16) return __half2float(__float2half_rn(x));
  return x;
}

// exp in fp32, faithfully rounded: the double exp is within 1 ulp of e^x in fp64, far inside half an
// fp32 ulp, so the conversion lands on one of the two floats around e^x.
__device__ __forceinline__ float exp_f32(float x) { return static_cast<float>(exp(static_cast<double>(x))); }
// tanh in fp32, faithfully rounded for the same reason.
__device__ __forceinline__ float tanh_f32(float x) { return static_cast<float>(tanh(static_cast<double>(x))); }

// std::max(m, s) as the CPU baseline writes it: (m < s) ? s : m, which never takes a NaN.
__device__ __forceinline__ float cpu_max(float m, float s) { return (m < s) ? s : m; }

#ifndef FCO_HOST_EMULATION
// D = A·B + D for one 8×8×4 fp64 tile (IEEE fp64 fused multiply-adds). Fragments, per lane
// (g = lane / 4, t = lane % 4): A[g][t], B[t][g] (k = t), C[g][2t], C[g][2t + 1].
__device__ __forceinline__ void dmma(double& c0, double& c1, double a, double b) {
  asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0, %1}, {%2}, {%3}, {%0, %1};\n"
               : "+d"(c0), "+d"(c1)
               : "d"(a), "d"(b));
}

// The block's dynamic shared memory.
template <typename T>
__device__ __forceinline__ T* dynamic_smem() {
  extern __shared__ __align__(16) unsigned char fco_dynamic_smem[];
  return reinterpret_cast<T*>(fco_dynamic_smem);
}

#define FCO_LAUNCH(kernel, blocks, threads, smem_bytes, stream, ...) \
  kernel<<<(blocks), (threads), (smem_bytes), (stream)>>>(__VA_ARGS__)
#else
// reference/gpu_oracle/emulation runs these kernels on the host (fibers for threads, the warp's
// mma and shuffles emulated), so CI machines without a GPU execute the very same kernel code.
#define FCO_LAUNCH(kernel, blocks, threads, smem_bytes, stream, ...) \
  ::fco_emu::launch((kernel), (blocks), (threads), (smem_bytes), (stream), __VA_ARGS__)
#endif

}  // namespace flashcheck::gpu_oracle
