// Factories of the built-in variants; each lives in its own folder under gpu/.
#pragma once
#include <memory>

#include "gpu/registry.h"

namespace flashcheck {

std::shared_ptr<Variant> make_replica_variant();
#if FLASHCHECK_HAVE_CUDA
std::shared_ptr<Variant> make_rowwise_f32_variant();
std::shared_ptr<Variant> make_warp_f32x4_variant();
std::shared_ptr<Variant> make_mma_f16_variant();
#endif

}  // namespace flashcheck
