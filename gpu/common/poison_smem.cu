#include "gpu/common/poison_smem.h"

#include <cuda_runtime.h>

#include "gpu/common/cuda_check.h"

namespace flashcheck::kernels {

namespace {

// volatile: the stores have no reader in this kernel, and must not be dropped as dead.
__global__ void fill_shared_memory_kernel(int words) {
  extern __shared__ uint32_t smem[];
  volatile uint32_t* s = smem;
  for (int i = threadIdx.x; i < words; i += blockDim.x) s[i] = 0xFFFFFFFFu;
}

__global__ void and_shared_memory_kernel(int words, uint32_t* out) {
  extern __shared__ uint32_t smem[];
  volatile uint32_t* s = smem;
  uint32_t acc = 0xFFFFFFFFu;
  for (int i = threadIdx.x; i < words; i += blockDim.x) acc &= s[i];
  atomicAnd(out, acc);
}

struct Geometry {
  int blocks = 0, bytes = 0;
};

// Two blocks per SM, each with the opt-in maximum of dynamic shared memory: at most one fits on an
// SM at a time, so the scheduler spreads them over every SM.
Geometry geometry() {
  static const Geometry g = [] {
    int dev = 0, sms = 0, optin = 0;
    FC_CUDA_CHECK(cudaGetDevice(&dev));
    FC_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    FC_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    FC_CUDA_CHECK(cudaFuncSetAttribute(fill_shared_memory_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin));
    FC_CUDA_CHECK(cudaFuncSetAttribute(and_shared_memory_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin));
    return Geometry{2 * sms, optin};
  }();
  return g;
}

}  // namespace

void poison_shared_memory(void* stream) {
  const Geometry g = geometry();
  fill_shared_memory_kernel<<<g.blocks, 1024, static_cast<size_t>(g.bytes), static_cast<cudaStream_t>(stream)>>>(g.bytes / 4);
  FC_CHECK_LAUNCH("fill_shared_memory_kernel");
}

uint32_t probe_shared_memory(void* stream) {
  const Geometry g = geometry();
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  uint32_t* d = nullptr;
  FC_CUDA_CHECK(cudaMalloc(&d, sizeof(uint32_t)));
  uint32_t h = 0xFFFFFFFFu;
  FC_CUDA_CHECK(cudaMemcpyAsync(d, &h, sizeof h, cudaMemcpyHostToDevice, s));
  and_shared_memory_kernel<<<g.blocks, 1024, static_cast<size_t>(g.bytes), s>>>(g.bytes / 4, d);
  FC_CHECK_LAUNCH("and_shared_memory_kernel");
  FC_CUDA_CHECK(cudaMemcpyAsync(&h, d, sizeof h, cudaMemcpyDeviceToHost, s));
  FC_CUDA_CHECK(cudaStreamSynchronize(s));
  FC_CUDA_CHECK(cudaFree(d));
  return h;
}

}  // namespace flashcheck::kernels
