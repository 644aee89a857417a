// wgmma_f16's backward launches (gpu/common/bwd_params.h): mma_f16's pass 0 (D = rowsum(dO ∘ O)),
// this kernel's dK/dV pass with the atomic dQ sum (bwd_mainloop.cuh), then mma_f16's pass that
// scales and rounds the sum, ordered by mma_f16's bwd_passes.cuh.
#include <cuda_runtime.h>

#include <stdexcept>

#include "gpu/common/cuda_check.h"
#include "gpu/mma_f16/bwd_passes.cuh"
#include "gpu/wgmma_f16/bwd_mainloop.cuh"

namespace flashcheck::kernels {
namespace {

template <int D, bool kBf16>
void run(const BwdParams& p, cudaStream_t st) {
  using Tr = WgmmaBwdTraits<D>;
  bwd::run_passes<D, kBf16>(
      p, false, st, "wgmma_f16",
      [&](const BwdParams& q) {
        auto* kernel = wbwd::dkdv_kernel<D, kBf16>;
        FC_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(Tr::kSmem)));
        const dim3 grid(static_cast<unsigned>((q.seq_kv + Tr::kBlockN - 1) / Tr::kBlockN), static_cast<unsigned>(q.heads_kv),
                        static_cast<unsigned>(q.batch));
        kernel<<<grid, Tr::kThreads, Tr::kSmem, st>>>(q);
        FC_CHECK_LAUNCH("wgmma_f16 backward dkdv_kernel");
      },
      [](const BwdParams&) { throw std::logic_error("wgmma_f16 backward: no deterministic dQ pass"); });
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
