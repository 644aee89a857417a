// One mma_f16 instantiation = head dim × dtype × a Policy: where the rows live (block_rows.cuh),
// which keys each row sees (gpu/common/variant_mask.cuh) and how scores are modified
// (gpu/common/score_mod.cuh). The variant is chosen once, on the host, by picking the
// instantiation; the mainloop never branches on it.
//
// Instantiated: the plain policy (mma_f16.cu), and for problem model 2 (variants_dD.cu) strided
// rows with {prefix, window} mask × softcap {off, on} × ALiBi {off, on}: 1 + 8 per (head dim,
// dtype), not the cross product with layouts, sinks or seqused. Sinks,
// seqused_kv, packed batches and the layouts are run-time data of the strided policy: they cost
// a few instructions per CTA or per row, not per score, so they need no instantiation of their own.
#pragma once
#include <type_traits>

#include "gpu/mma_f16/block_rows.cuh"
#include "gpu/common/variant_mask.cuh"
#include "gpu/common/score_mod.cuh"
#include "gpu/mma_f16/tile_size.h"

namespace flashcheck::kernels {

template <class RowsT, class MaskT, class SoftcapT, class BiasT>
struct MmaPolicy {
  using Rows = RowsT;
  using Mask = MaskT;
  using Softcap = SoftcapT;
  using Bias = BiasT;
  using Params = typename Rows::Params;
  // Problem model 2's data (window, softcap constant, slopes, sinks) exists only in VarParams.
  static constexpr bool kVariant = std::is_same_v<Params, VarParams>;
  static_assert(kVariant || std::is_same_v<Params, FwdParams>, "rows address FwdParams or VarParams");
  static_assert(kVariant || (std::is_same_v<Mask, PrefixMask> && !Softcap::kOn && !Bias::kOn),
                "a plain launch has no window, softcap or ALiBi to apply");
  static_assert(std::is_same_v<Mask, PrefixMask> || std::is_same_v<Mask, WindowMask>, "a mask of variant_mask.cuh");
};

template <int D>
using PlainPolicy = MmaPolicy<DenseRows<D, MmaF16Traits<D>::kBlockM>, PrefixMask, NoSoftcap, NoBias>;

template <int D, class Mask, class Softcap, class Bias>
using VariantPolicy = MmaPolicy<StridedRows<D, MmaF16Traits<D>::kBlockM>, Mask, Softcap, Bias>;

}  // namespace flashcheck::kernels
