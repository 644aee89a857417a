// DeviceInputs' kernels (reference/gpu_oracle.h): the pieces' q, k and v gathered from a problem's
// raw 16-bit tensors on the device, and the two input passes a check makes before any oracle runs
// (the first NaN/Inf, the row norms of the score bounds). Each is memory-bound and simple; what
// matters is that their results are the host's to the bit, which the conversions of
// reference/dtype_bits.h (the host's own) and exact fp64 products give.
#include <cuda_runtime.h>

#include <algorithm>

#include "reference/dtype_bits.h"
#include "reference/gpu_oracle/check.h"
#include "reference/gpu_oracle/device_common.cuh"
#include "reference/gpu_oracle/kernels.h"

namespace flashcheck::gpu_oracle {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 8192;  // grid-stride beyond: a grid of at most 2M threads

__device__ __forceinline__ float widen16(bool bf16, uint16_t h) {
  return bf16 ? bits::bf16_bits_to_f32(h) : bits::f16_bits_to_f32(h);
}

__global__ void __launch_bounds__(kThreads) gather_rows_kernel(bool bf16, const uint16_t* src, int64_t width,
                                                               const int64_t* src_row, int64_t n, int64_t width_pad,
                                                               uint16_t* dst) {
  const int64_t total = n * width_pad;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; e < total; e += stride) {
    const int64_t r = e / width_pad, c = e % width_pad;
    const int64_t from = src_row[r];
    uint16_t out = 0;
    if (from >= 0 && c < width) {
      // What the host's pack stores for this value: narrow(widen(x)), the pattern itself but for a
      // signalling NaN, which comes back quiet.
      const float x = widen16(bf16, src[from * width + c]);
      out = bf16 ? bits::f32_to_bf16_bits(x) : bits::f32_to_f16_bits(x);
    }
    dst[e] = out;
  }
}

__global__ void __launch_bounds__(kThreads) first_nonfinite_kernel(bool bf16, const uint16_t* x, int64_t n,
                                                                   unsigned long long* first) {
  const uint16_t exponent = bf16 ? 0x7f80u : 0x7c00u;  // all ones: Inf or NaN
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; e < n; e += stride)
    if ((x[e] & exponent) == exponent) {
      atomicMin(first, static_cast<unsigned long long>(e));
      return;  // this thread's later elements lie past e
    }
}

__global__ void __launch_bounds__(kThreads) row_norms_kernel(bool bf16, const uint16_t* x, int64_t rows, int64_t width,
                                                             double* out) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (r >= rows) return;
  const uint16_t* row = x + r * width;
  double s = 0;
  for (int64_t c = 0; c < width; ++c) {
    const double v = widen16(bf16, row[c]);
    s = __dadd_rn(s, __dmul_rn(v, v));  // the host's order and roundings (the product is exact)
  }
  out[r] = sqrt(s);
}

unsigned blocks_for(int64_t work) {
  return static_cast<unsigned>(std::min<int64_t>(kMaxBlocks, std::max<int64_t>(1, (work + kThreads - 1) / kThreads)));
}

}  // namespace

void launch_gather_rows(Elem e, const uint16_t* src, int64_t width, const int64_t* src_row, int64_t n,
                        int64_t width_pad, uint16_t* dst, cudaStream_t st) {
  if (n <= 0 || width_pad <= 0) return;
  FCO_LAUNCH(gather_rows_kernel, blocks_for(n * width_pad), kThreads, 0, st, e == Elem::bf16, src, width, src_row, n,
             width_pad, dst);
  FCO_LAUNCHED(gather_rows_kernel);
}

void launch_first_nonfinite(Elem e, const uint16_t* x, int64_t n, unsigned long long* first, cudaStream_t st) {
  if (n <= 0) return;
  FCO_LAUNCH(first_nonfinite_kernel, blocks_for(n), kThreads, 0, st, e == Elem::bf16, x, n, first);
  FCO_LAUNCHED(first_nonfinite_kernel);
}

void launch_row_norms(Elem e, const uint16_t* x, int64_t rows, int64_t width, double* out, cudaStream_t st) {
  if (rows <= 0) return;
  FCO_LAUNCH(row_norms_kernel, static_cast<unsigned>((rows + kThreads - 1) / kThreads), kThreads, 0, st,
             e == Elem::bf16, x, rows, width, out);
  FCO_LAUNCHED(row_norms_kernel);
}

}  // namespace flashcheck::gpu_oracle
