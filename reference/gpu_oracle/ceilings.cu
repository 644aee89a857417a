// Synthetic kernels that measure the device's FP64 FMA, FP64 tensor-core and unfused fp32 rates and
// its copy bandwidth: the ceilings the oracle's kernels are judged against in the benchmark.
#include <cuda_runtime.h>

#include <algorithm>

#include "reference/gpu_oracle/check.h"
#include "reference/gpu_oracle/detail.h"
#include "reference/gpu_oracle/device_common.cuh"

namespace flashcheck::gpu_oracle {
namespace {

constexpr int kChains = 8;  // independent dependency chains per thread: enough to hide the latency

__global__ void dfma_loop(double* out, int iters, double b, double c) {
  double x[kChains];
#pragma unroll
  for (int i = 0; i < kChains; ++i) x[i] = threadIdx.x * 1e-3 + i;
  for (int it = 0; it < iters; ++it)
#pragma unroll
    for (int i = 0; i < kChains; ++i) x[i] = fma(x[i], b, c);
  double sum = 0;
#pragma unroll
  for (int i = 0; i < kChains; ++i) sum += x[i];
  if (sum == 1234.5) out[0] = sum;  // never true for these inputs; keeps the loop alive
}

__global__ void fp32_mul_add_loop(float* out, int iters, float b, float c) {
  float x[kChains];
#pragma unroll
  for (int i = 0; i < kChains; ++i) x[i] = threadIdx.x * 1e-3f + i;
  for (int it = 0; it < iters; ++it)
#pragma unroll
    for (int i = 0; i < kChains; ++i) x[i] = __fadd_rn(__fmul_rn(x[i], b), c);
  float sum = 0;
#pragma unroll
  for (int i = 0; i < kChains; ++i) sum += x[i];
  if (sum == 1234.5f) out[0] = sum;
}

__global__ void dmma_loop(double* out, int iters, double a0) {
  double c[kChains][2];
#pragma unroll
  for (int i = 0; i < kChains; ++i) c[i][0] = c[i][1] = 0.0;
  const double a = a0 + (threadIdx.x & 31) * 1e-3, b = a0 * 0.5;
  for (int it = 0; it < iters; ++it)
#pragma unroll
    for (int i = 0; i < kChains; ++i)
      dmma(c[i][0], c[i][1], a, b);
  double sum = 0;
#pragma unroll
  for (int i = 0; i < kChains; ++i) sum += c[i][0] + c[i][1];
  if (sum == 1234.5) out[0] = sum;
}

// Median of 5 timed launches after one warm-up.
template <typename F>
double median_ms(F launch) {
  cudaEvent_t a, b;
  FCO_CUDA(cudaEventCreate(&a));
  FCO_CUDA(cudaEventCreate(&b));
  launch();
  float t[5];
  for (float& x : t) {
    FCO_CUDA(cudaEventRecord(a));
    launch();
    FCO_CUDA(cudaEventRecord(b));
    FCO_CUDA(cudaEventSynchronize(b));
    FCO_CUDA(cudaEventElapsedTime(&x, a, b));
  }
  FCO_CUDA(cudaEventDestroy(a));
  FCO_CUDA(cudaEventDestroy(b));
  std::sort(t, t + 5);
  return t[2];
}

}  // namespace
}  // namespace flashcheck::gpu_oracle

namespace flashcheck::gpu_oracle_detail {

Ceilings measure_ceilings() {
  using namespace flashcheck::gpu_oracle;
  int dev = 0, sms = 0;
  FCO_CUDA(cudaGetDevice(&dev));
  FCO_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  void* buf = nullptr;
  const size_t bytes = size_t{1} << 30;
  FCO_CUDA(cudaMalloc(&buf, 2 * bytes));
  Ceilings c;
  const int blocks = sms * 8, threads = 256, iters = 4096;
  const double fma_ops = 2.0 * kChains * iters * blocks * threads;
  double ms = median_ms([&] {
    dfma_loop<<<blocks, threads>>>(static_cast<double*>(buf), iters, 0.999, 1e-3);
    FCO_LAUNCHED(dfma_loop);
  });
  c.dfma_tflops = fma_ops / ms * 1e-9;
  ms = median_ms([&] {
    fp32_mul_add_loop<<<blocks, threads>>>(static_cast<float*>(buf), iters, 0.999f, 1e-3f);
    FCO_LAUNCHED(fp32_mul_add_loop);
  });
  c.fp32_mul_add_tflops = fma_ops / ms * 1e-9;
  const int mma_iters = 1024;
  ms = median_ms([&] {
    dmma_loop<<<blocks, threads>>>(static_cast<double*>(buf), mma_iters, 0.5);
    FCO_LAUNCHED(dmma_loop);
  });
  // 8·8·4 multiply-adds per warp-wide mma.
  c.dmma_tflops = 2.0 * 256 * kChains * mma_iters * (blocks * threads / 32.0) / ms * 1e-9;
  FCO_CUDA(cudaMemset(buf, 0x3c, 2 * bytes));
  ms = median_ms([&] { FCO_CUDA(cudaMemcpyAsync(static_cast<char*>(buf) + bytes, buf, bytes, cudaMemcpyDeviceToDevice)); });
  c.copy_gbs = 2.0 * static_cast<double>(bytes) / ms * 1e-6;
  FCO_CUDA(cudaDeviceSynchronize());
  FCO_CUDA(cudaFree(buf));
  return c;
}

}  // namespace flashcheck::gpu_oracle_detail
