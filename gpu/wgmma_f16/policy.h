// One wgmma_f16 instantiation = tiles (tile_size.h) × dtype × a KernelPolicy
// (gpu/common/kernel_policy.h) whose place is a place.cuh policy. Sinks, seqused_kv, packed batches
// and the layouts are run-time data of VarPlace: a few instructions per CTA or per row, not per score.
#pragma once
#include "gpu/common/kernel_policy.h"
#include "gpu/wgmma_f16/place.cuh"

namespace flashcheck::kernels {

template <class T>
using WgmmaPlainPolicy = KernelPolicy<DensePlace<T::kBlockM>, PrefixMask, NoSoftcap, NoBias>;

template <class T, class Mask, class Softcap, class Bias>
using WgmmaVariantPolicy = KernelPolicy<VarPlace<T::kBlockM>, Mask, Softcap, Bias>;

}  // namespace flashcheck::kernels
