// mma_f16's backward launches (bwd_params.h): pass 0 (D), pass 1 (dK, dV and the atomic dQ sum),
// then the dQ sum's rounding, or in the deterministic mode pass 1 without dQ and pass 2 (dQ); in
// stream order on the caller's stream, with the workspaces allocated and freed in that order too.
#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>

#include "gpu/common/cuda_check.h"
#include "gpu/mma_f16/bwd_delta.cuh"
#include "gpu/mma_f16/bwd_dkdv.cuh"
#include "gpu/mma_f16/bwd_dq.cuh"
#include "gpu/mma_f16/bwd_dq_sum.cuh"

namespace flashcheck::kernels {
namespace {

template <int D, bool kBf16, bool kAtomicDq>
void launch_dkdv(const BwdParams& p, cudaStream_t st) {
  using Tr = BwdTraits<D>;
  auto* kernel = bwd::dkdv_kernel<D, kBf16, kAtomicDq>;
  FC_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(Tr::kSmemDkdv)));
  const dim3 grid(static_cast<unsigned>((p.seq_kv + Tr::kBlockN - 1) / Tr::kBlockN), static_cast<unsigned>(p.heads_kv),
                  static_cast<unsigned>(p.batch));
  kernel<<<grid, Tr::kThreads, Tr::kSmemDkdv, st>>>(p);
  FC_CHECK_LAUNCH("mma_f16 backward dkdv_kernel");
}

// Allocates n floats on the stream (at least one, so a null never stands for an empty workspace).
float* workspace(int64_t n, cudaStream_t st) {
  float* w = nullptr;
  FC_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&w), static_cast<size_t>(std::max<int64_t>(n, 1)) * sizeof(float), st));
  return w;
}

template <int D, bool kBf16>
void run(BwdParams p, bool deterministic, cudaStream_t st) {
  using Tr = BwdTraits<D>;
  if (p.heads_q > 65535 || p.heads_kv > 65535 || p.batch > 65535)
    throw std::invalid_argument("mma_f16 backward: heads or batch beyond the grid's 65535");
  const int64_t rows = static_cast<int64_t>(p.batch) * p.heads_q * p.seq_q;
  p.delta = workspace(rows, st);
  p.dq_sum = nullptr;
  try {
    if (!deterministic) {
      p.dq_sum = workspace(rows * D, st);
      FC_CUDA_CHECK(cudaMemsetAsync(p.dq_sum, 0, static_cast<size_t>(rows) * D * sizeof(float), st));
    }
    if (rows > 0) {
      const int64_t blocks = std::min<int64_t>((rows + 7) / 8, int64_t{1} << 20);
      bwd::delta_kernel<D, kBf16><<<static_cast<unsigned>(blocks), 256, 0, st>>>(p);
      FC_CHECK_LAUNCH("mma_f16 backward delta_kernel");
    }
    if (p.seq_kv > 0 && p.batch > 0) {
      if (deterministic) launch_dkdv<D, kBf16, false>(p, st);
      else launch_dkdv<D, kBf16, true>(p, st);
    }
    if (rows > 0 && deterministic) {
      FC_CUDA_CHECK(cudaFuncSetAttribute(bwd::dq_kernel<D, kBf16>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(Tr::kSmemDq)));
      const dim3 grid(static_cast<unsigned>((p.seq_q + Tr::kBlockMq - 1) / Tr::kBlockMq), static_cast<unsigned>(p.heads_q),
                      static_cast<unsigned>(p.batch));
      bwd::dq_kernel<D, kBf16><<<grid, Tr::kThreadsQ, Tr::kSmemDq, st>>>(p);
      FC_CHECK_LAUNCH("mma_f16 backward dq_kernel");
    }
    if (rows > 0 && !deterministic) {
      const int64_t blocks = std::min<int64_t>((rows * (D / 8) + 255) / 256, int64_t{1} << 20);
      bwd::dq_sum_kernel<D, kBf16><<<static_cast<unsigned>(blocks), 256, 0, st>>>(p);
      FC_CHECK_LAUNCH("mma_f16 backward dq_sum_kernel");
    }
  } catch (...) {
    (void)cudaFreeAsync(p.delta, st);
    if (p.dq_sum) (void)cudaFreeAsync(p.dq_sum, st);
    throw;
  }
  FC_CUDA_CHECK(cudaFreeAsync(p.delta, st));
  if (p.dq_sum) FC_CUDA_CHECK(cudaFreeAsync(p.dq_sum, st));
}

}  // namespace

template <int D>
void launch_mma_f16_backward(const BwdParams& p, bool bf16, bool deterministic, void* stream) {
  const cudaStream_t st = static_cast<cudaStream_t>(stream);
  return bf16 ? run<D, true>(p, deterministic, st) : run<D, false>(p, deterministic, st);
}

template void launch_mma_f16_backward<64>(const BwdParams&, bool, bool, void*);
template void launch_mma_f16_backward<128>(const BwdParams&, bool, bool, void*);

}  // namespace flashcheck::kernels
