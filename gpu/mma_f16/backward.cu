// mma_f16's backward launches (bwd_params.h): pass 0 (D), pass 1 (dK, dV and the atomic dQ sum),
// then the dQ sum's rounding, or in the deterministic mode pass 1 without dQ and pass 2 (dQ);
// bwd_passes.cuh orders them and their workspaces on the caller's stream.
#include <cuda_runtime.h>

#include "gpu/common/cuda_check.h"
#include "gpu/mma_f16/bwd_dkdv.cuh"
#include "gpu/mma_f16/bwd_dq.cuh"
#include "gpu/mma_f16/bwd_passes.cuh"

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

template <int D, bool kBf16>
void run(const BwdParams& p, bool deterministic, cudaStream_t st) {
  using Tr = BwdTraits<D>;
  bwd::run_passes<D, kBf16>(
      p, deterministic, st, "mma_f16",
      [&](const BwdParams& q) {
        if (deterministic) launch_dkdv<D, kBf16, false>(q, st);
        else launch_dkdv<D, kBf16, true>(q, st);
      },
      [&](const BwdParams& q) {
        FC_CUDA_CHECK(cudaFuncSetAttribute(bwd::dq_kernel<D, kBf16>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(Tr::kSmemDq)));
        const dim3 grid(static_cast<unsigned>((q.seq_q + Tr::kBlockMq - 1) / Tr::kBlockMq), static_cast<unsigned>(q.heads_q),
                        static_cast<unsigned>(q.batch));
        bwd::dq_kernel<D, kBf16><<<grid, Tr::kThreadsQ, Tr::kSmemDq, st>>>(q);
        FC_CHECK_LAUNCH("mma_f16 backward dq_kernel");
      });
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
