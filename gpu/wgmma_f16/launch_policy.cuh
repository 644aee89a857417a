// The host side of one wgmma_f16 launch: a policy's kernel on three tensor maps, its shared memory
// and the perturbed build's state, the launch checked and its tile noted. Used by the plain launch
// (wgmma_f16.cu) and the variant launches (launch_variant.cuh).
#pragma once
#include <cuda_runtime.h>

#include <type_traits>

#include "gpu/common/cuda_check.h"
#include "gpu/common/launched_tile.h"
#include "gpu/wgmma_f16/kernel.cuh"
#ifdef FLASHCHECK_PERTURB
#include "gpu/common/perturb_host.h"
#endif

namespace flashcheck::kernels {

template <class T, bool kBf16, int kSched, class Pol>
void launch_policy(const CUtensorMap& mq, const CUtensorMap& mk, const CUtensorMap& mv, const typename Pol::Params& p,
                   dim3 grid, cudaStream_t stream) {
  auto* kernel = wgmma_f16_kernel<T, kBf16, kSched, Pol>;
  const char* name = Pol::kVariant ? "wgmma_f16_kernel (variant)" : "wgmma_f16_kernel";
#ifndef FLASHCHECK_PERTURB
  FC_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(T::kSmemBytes)));
  kernel<<<grid, T::kThreads, T::kSmemBytes, stream>>>(mq, mk, mv, p);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) cuda_fail(e, name, __FILE__, __LINE__);
#else
  // The perturbed build: its state area after the kernel's shared memory, its settings in the
  // parameters, and the tracker's report read back (a violation throws, failing the case).
  constexpr unsigned kSmem = T::kSmemBytes + perturb::kExtraSmem;
  static_assert(kSmem <= 227 * 1024, "the perturbed build's state area fits beside the kernel's shared memory");
  FC_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmem)));
  typename Pol::Params pp = p;
  FwdParams* f;
  if constexpr (Pol::kVariant)
    f = &pp.base;
  else
    f = &pp;
  f->perturb = perturb::begin(*f, stream);
  kernel<<<grid, T::kThreads, kSmem, stream>>>(mq, mk, mv, pp);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) cuda_fail(e, "wgmma_f16_kernel (perturbed build)", __FILE__, __LINE__);
  perturb::end(f->perturb, stream, "wgmma_f16");
#endif
  note_launched_tile("wgmma_f16", T::kBlockM, T::kBlockN);
}

}  // namespace flashcheck::kernels
