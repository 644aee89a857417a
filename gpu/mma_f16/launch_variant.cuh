// The host side of mma_f16's variant launches at one head dim: the run-time VariantKind picks one
// compile-time policy (policy.h) and launches it. Included once per head dim (variants_dD.cu), so
// the 16 instantiations of a head dim build in their own translation unit, in parallel with the
// others.
#pragma once
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "gpu/common/cuda_check.h"
#include "gpu/common/launched_tile.h"
#include "gpu/mma_f16/mainloop.cuh"
#include "gpu/mma_f16/policy.h"
#include "gpu/mma_f16/tile_size.h"
#include "gpu/mma_f16/variant_launch.h"
#ifdef FLASHCHECK_PERTURB
#include "gpu/common/perturb_host.h"
#endif

namespace flashcheck::kernels {

// One launch: a (grid_x, heads, batch) grid, or (grid_x, heads, 1) for a packed batch whose
// grid_x q-tiles span every sequence; the launch checked and named, its tile noted.
template <int D, bool kBf16, class Pol>
void launch_policy(const VarParams& p, int grid_x, void* stream) {
  using T = MmaF16Traits<D>;
  const auto kernel = mma_f16_kernel<D, kBf16, Pol>;
  const unsigned batch = p.cu_seqlens_q ? 1u : static_cast<unsigned>(p.base.batch);
  if (p.base.heads_q > 65535 || batch > 65535)
    throw std::invalid_argument("mma_f16 (variant): heads or batch beyond the grid's 65535");
  if (grid_x <= 0) return;  // no query at all (every sequence empty): nothing to write
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  VarParams pp = p;
  size_t smem = T::kSmemBytes + kCtaScalarBytes;  // the tiles, then the parked CtaScalars
  const char* name = "mma_f16_kernel (variant)";
#ifdef FLASHCHECK_PERTURB
  pp.base.perturb = perturb::begin(p.base, s);
  smem += perturb::kExtraSmem;
  name = "mma_f16_kernel (variant, perturbed build)";
#endif
  FC_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  const dim3 grid(static_cast<unsigned>(grid_x), static_cast<unsigned>(p.base.heads_q), batch);
  kernel<<<grid, T::kThreads, smem, s>>>(pp);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) cuda_fail(e, name, __FILE__, __LINE__);
  note_launched_tile(name, T::kBlockM, T::kBlockN);
#ifdef FLASHCHECK_PERTURB
  perturb::end(pp.base.perturb, s, "mma_f16");
#endif
}

template <int D, bool kBf16, class Mask>
void launch_mask(const VarParams& p, VariantKind k, int grid_x, void* stream) {
  if (k.softcap && k.alibi) return launch_policy<D, kBf16, VariantPolicy<D, Mask, TanhSoftcap, AlibiSymmetric>>(p, grid_x, stream);
  if (k.softcap) return launch_policy<D, kBf16, VariantPolicy<D, Mask, TanhSoftcap, NoBias>>(p, grid_x, stream);
  if (k.alibi) return launch_policy<D, kBf16, VariantPolicy<D, Mask, NoSoftcap, AlibiSymmetric>>(p, grid_x, stream);
  return launch_policy<D, kBf16, VariantPolicy<D, Mask, NoSoftcap, NoBias>>(p, grid_x, stream);
}

template <int D>
void launch_variants_at(const VarParams& p, bool bf16, VariantKind k, int grid_x, void* stream) {
  if (bf16)
    return k.window ? launch_mask<D, true, WindowMask>(p, k, grid_x, stream) : launch_mask<D, true, PrefixMask>(p, k, grid_x, stream);
  return k.window ? launch_mask<D, false, WindowMask>(p, k, grid_x, stream) : launch_mask<D, false, PrefixMask>(p, k, grid_x, stream);
}

}  // namespace flashcheck::kernels
