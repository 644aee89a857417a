// One wgmma_f16 instantiation = tiles (tile_size.h) × dtype × a Policy: where the CTA's rows live
// (place.cuh), which keys each row sees (gpu/common/variant_mask.cuh) and how scores are modified
// (gpu/common/score_mod.cuh). The variant is chosen once, on the host, by picking the
// instantiation; the main loop never branches on it. Sinks, seqused_kv, packed batches and the
// layouts are run-time data of VarPlace: a few instructions per CTA or per row, not per score.
#pragma once
#include <type_traits>

#include "gpu/common/score_mod.cuh"
#include "gpu/common/variant_mask.cuh"
#include "gpu/wgmma_f16/place.cuh"

namespace flashcheck::kernels {

template <class PlaceT, class MaskT, class SoftcapT, class BiasT>
struct WgmmaPolicy {
  using Place = PlaceT;
  using Mask = MaskT;
  using Softcap = SoftcapT;
  using Bias = BiasT;
  using Params = typename Place::Params;
  // Problem model 2's data (window, softcap constant, slopes, sinks) exists only in VarParams.
  static constexpr bool kVariant = std::is_same_v<Params, VarParams>;
  static_assert(kVariant || std::is_same_v<Params, FwdParams>, "a place addresses FwdParams or VarParams");
  static_assert(kVariant || (std::is_same_v<Mask, PrefixMask> && !Softcap::kOn && !Bias::kOn),
                "a plain launch has no window, softcap or ALiBi to apply");
  static_assert(std::is_same_v<Mask, PrefixMask> || std::is_same_v<Mask, WindowMask>, "a mask of variant_mask.cuh");
};

template <class T>
using WgmmaPlainPolicy = WgmmaPolicy<DensePlace<T::kBlockM>, PrefixMask, NoSoftcap, NoBias>;

template <class T, class Mask, class Softcap, class Bias>
using WgmmaVariantPolicy = WgmmaPolicy<VarPlace<T::kBlockM>, Mask, Softcap, Bias>;

}  // namespace flashcheck::kernels
