// The passes around a backward's dK/dV kernel, for both built-in backwards (mma_f16's, and
// wgmma_f16's, which shares all but its dK/dV pass): pass 0 (D = rowsum(dO ∘ O)), the kernel's
// dK/dV pass, then the dQ sum's rounding or, in a deterministic mode, the kernel's dQ pass; in
// stream order on the caller's stream, with the workspaces allocated and freed in that order too.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "gpu/common/bwd_params.h"
#include "gpu/common/cuda_check.h"
#include "gpu/mma_f16/bwd_delta.cuh"
#include "gpu/mma_f16/bwd_dq_sum.cuh"

namespace flashcheck::kernels::bwd {

// Allocates n floats on the stream (at least one, so a null never stands for an empty workspace).
inline float* workspace(int64_t n, cudaStream_t st) {
  float* w = nullptr;
  FC_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&w), static_cast<size_t>(std::max<int64_t>(n, 1)) * sizeof(float), st));
  return w;
}

// dkdv(p) launches the kernel's dK/dV pass (p.dq_sum is the sum's workspace, or null in the
// deterministic mode); dq(p) its deterministic dQ pass. `kernel` names it in argument errors.
template <int D, bool kBf16, class Dkdv, class Dq>
void run_passes(BwdParams p, bool deterministic, cudaStream_t st, const std::string& kernel, Dkdv&& dkdv, Dq&& dq) {
  if (p.heads_q > 65535 || p.heads_kv > 65535 || p.batch > 65535)
    throw std::invalid_argument(kernel + " backward: heads or batch beyond the grid's 65535");
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
      delta_kernel<D, kBf16><<<static_cast<unsigned>(blocks), 256, 0, st>>>(p);
      FC_CHECK_LAUNCH("backward delta_kernel (pass 0)");
    }
    if (p.seq_kv > 0 && p.batch > 0) dkdv(p);
    if (rows > 0 && deterministic) dq(p);
    if (rows > 0 && !deterministic) {
      const int64_t blocks = std::min<int64_t>((rows * (D / 8) + 255) / 256, int64_t{1} << 20);
      dq_sum_kernel<D, kBf16><<<static_cast<unsigned>(blocks), 256, 0, st>>>(p);
      FC_CHECK_LAUNCH("backward dq_sum_kernel (the dQ sum's rounding)");
    }
  } catch (...) {
    (void)cudaFreeAsync(p.delta, st);
    if (p.dq_sum) (void)cudaFreeAsync(p.dq_sum, st);
    throw;
  }
  FC_CUDA_CHECK(cudaFreeAsync(p.delta, st));
  if (p.dq_sum) FC_CUDA_CHECK(cudaFreeAsync(p.dq_sum, st));
}

}  // namespace flashcheck::kernels::bwd
