// wgmma_f16's backward launches (gpu/common/bwd_params.h): mma_f16's pass 0 (D = rowsum(dO ∘ O)),
// this kernel's dK/dV pass with the atomic dQ sum (bwd_mainloop.cuh), then mma_f16's pass that
// scales and rounds the sum; in stream order on the caller's stream, workspaces likewise.
#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>

#include "gpu/common/cuda_check.h"
#include "gpu/mma_f16/bwd_delta.cuh"
#include "gpu/mma_f16/bwd_dq_sum.cuh"
#include "gpu/wgmma_f16/bwd_mainloop.cuh"

namespace flashcheck::kernels {
namespace {

float* workspace(int64_t n, cudaStream_t st) {
  float* w = nullptr;
  FC_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&w), static_cast<size_t>(std::max<int64_t>(n, 1)) * sizeof(float), st));
  return w;
}

template <int D, bool kBf16>
void run(BwdParams p, cudaStream_t st) {
  using Tr = WgmmaBwdTraits<D>;
  if (p.heads_q > 65535 || p.heads_kv > 65535 || p.batch > 65535)
    throw std::invalid_argument("wgmma_f16 backward: heads or batch beyond the grid's 65535");
  const int64_t rows = static_cast<int64_t>(p.batch) * p.heads_q * p.seq_q;
  p.delta = workspace(rows, st);
  p.dq_sum = nullptr;
  try {
    p.dq_sum = workspace(rows * D, st);
    FC_CUDA_CHECK(cudaMemsetAsync(p.dq_sum, 0, static_cast<size_t>(rows) * D * sizeof(float), st));
    if (rows > 0) {
      const int64_t blocks = std::min<int64_t>((rows + 7) / 8, int64_t{1} << 20);
      bwd::delta_kernel<D, kBf16><<<static_cast<unsigned>(blocks), 256, 0, st>>>(p);
      FC_CHECK_LAUNCH("wgmma_f16 backward delta_kernel");
    }
    if (p.seq_kv > 0 && p.batch > 0) {
      auto* kernel = wbwd::dkdv_kernel<D, kBf16>;
      FC_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(Tr::kSmem)));
      const dim3 grid(static_cast<unsigned>((p.seq_kv + Tr::kBlockN - 1) / Tr::kBlockN), static_cast<unsigned>(p.heads_kv),
                      static_cast<unsigned>(p.batch));
      kernel<<<grid, Tr::kThreads, Tr::kSmem, st>>>(p);
      FC_CHECK_LAUNCH("wgmma_f16 backward dkdv_kernel");
    }
    if (rows > 0) {
      const int64_t blocks = std::min<int64_t>((rows * (D / 8) + 255) / 256, int64_t{1} << 20);
      bwd::dq_sum_kernel<D, kBf16><<<static_cast<unsigned>(blocks), 256, 0, st>>>(p);
      FC_CHECK_LAUNCH("wgmma_f16 backward dq_sum_kernel");
    }
  } catch (...) {
    (void)cudaFreeAsync(p.delta, st);
    if (p.dq_sum) (void)cudaFreeAsync(p.dq_sum, st);
    throw;
  }
  FC_CUDA_CHECK(cudaFreeAsync(p.delta, st));
  FC_CUDA_CHECK(cudaFreeAsync(p.dq_sum, st));
}

}  // namespace

template <int D>
void launch_wgmma_f16_backward(const BwdParams& p, bool bf16, void* stream) {
  const cudaStream_t st = static_cast<cudaStream_t>(stream);
  return bf16 ? run<D, true>(p, st) : run<D, false>(p, st);
}

template void launch_wgmma_f16_backward<64>(const BwdParams&, bool, void*);
template void launch_wgmma_f16_backward<128>(const BwdParams&, bool, void*);

}  // namespace flashcheck::kernels
