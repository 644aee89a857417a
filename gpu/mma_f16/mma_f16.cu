// mma_f16's plain launch: contiguous BHSD problems without variants run the plain policy's
// instantiation (policy.h), the kernel mma_f16 always had. Problem model 2 launches through
// variants_dD.cu (register.cpp picks which).
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "gpu/common/launch.cuh"
#include "gpu/common/params.h"
#include "gpu/mma_f16/mainloop.cuh"
#include "gpu/mma_f16/policy.h"
#include "gpu/mma_f16/tile_size.h"
#ifdef FLASHCHECK_PERTURB
#include "gpu/common/perturb_host.h"
#endif

namespace flashcheck::kernels {

template <int D, bool kBf16>
void launch(const FwdParams& p, void* s) {
  using T = MmaF16Traits<D>;
#ifndef FLASHCHECK_PERTURB
  launch_fwd(mma_f16_kernel<D, kBf16, PlainPolicy<D>>, "mma_f16_kernel", T::kBlockM, T::kThreads, T::kSmemBytes, p, s, T::kBlockN);
#else
  // The perturbed build: its state area after the tiles, its settings in the parameters.
  FwdParams pp = p;
  pp.perturb = perturb::begin(p, static_cast<cudaStream_t>(s));
  launch_fwd(mma_f16_kernel<D, kBf16, PlainPolicy<D>>, "mma_f16_kernel (perturbed build)", T::kBlockM, T::kThreads,
             T::kSmemBytes + perturb::kExtraSmem, pp, s, T::kBlockN);
  perturb::end(pp.perturb, static_cast<cudaStream_t>(s), "mma_f16");
#endif
}

void launch_mma_f16(const FwdParams& p, bool bf16, void* stream) {
  void* s = stream;
  switch (p.head_dim_qk) {
    case 64: return bf16 ? launch<64, true>(p, s) : launch<64, false>(p, s);
    case 128: return bf16 ? launch<128, true>(p, s) : launch<128, false>(p, s);
    case 256: return bf16 ? launch<256, true>(p, s) : launch<256, false>(p, s);
    default: throw std::invalid_argument("mma_f16: head dim " + std::to_string(p.head_dim_qk) + " not compiled");
  }
}

}  // namespace flashcheck::kernels
