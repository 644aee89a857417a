// One mma_f16 instantiation = head dim × dtype × a KernelPolicy (gpu/common/kernel_policy.h) whose
// place is a block_rows.cuh policy.
//
// Instantiated: the plain policy (mma_f16.cu), and for problem model 2 (variants_dD.cu) strided
// rows with {prefix, window} mask × softcap {off, on} × ALiBi {off, on}: 1 + 8 per (head dim,
// dtype), not the cross product with layouts, sinks or seqused. Sinks, seqused_kv, packed batches
// and the layouts are run-time data of the strided policy: they cost a few instructions per CTA or
// per row, not per score, so they need no instantiation of their own.
#pragma once
#include "gpu/common/kernel_policy.h"
#include "gpu/mma_f16/block_rows.cuh"
#include "gpu/mma_f16/tile_size.h"

namespace flashcheck::kernels {

template <int D>
using PlainPolicy = KernelPolicy<DenseRows<D, MmaF16Traits<D>::kBlockM>, PrefixMask, NoSoftcap, NoBias>;

template <int D, class Mask, class Softcap, class Bias>
using VariantPolicy = KernelPolicy<StridedRows<D, MmaF16Traits<D>::kBlockM>, Mask, Softcap, Bias>;

}  // namespace flashcheck::kernels
