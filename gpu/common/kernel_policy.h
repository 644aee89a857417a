// A variant kernel's compile-time policy (mma_f16's policy.h, wgmma_f16's): where a CTA's rows live
// (the kernel's own place type, which names the parameters it reads), which keys each row sees
// (variant_mask.cuh) and how scores are modified (score_mod.cuh). The variant is chosen once, on
// the host, by picking the instantiation; the main loop never branches on it.
#pragma once
#include <type_traits>

#include "gpu/common/params.h"
#include "gpu/common/score_mod.cuh"
#include "gpu/common/var_params.h"
#include "gpu/common/variant_mask.cuh"

namespace flashcheck::kernels {

template <class PlaceT, class MaskT, class SoftcapT, class BiasT>
struct KernelPolicy {
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

}  // namespace flashcheck::kernels
