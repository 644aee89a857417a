// decode_paged_f16's problem-model-2 launch (gpu/kernel.h LaunchFn2), for its declaration in
// register.cpp and for its tests.
#pragma once
#include "gpu/decode_paged_f16/launch_at.h"
#include "gpu/kernel.h"

namespace flashcheck {

// Any problem decode_paged_f16 declares, on buffers addressed by KernelArgs' strides; throws
// std::invalid_argument naming what it cannot take (a variant it does not compute, misaligned rows).
void launch_decode_paged_f16(const Problem& p, const KernelArgs& a);
// The same with the split count forced (tests: one split, one per tile, more splits than tiles).
void launch_decode_paged_f16(const Problem& p, const KernelArgs& a, const kernels::DecodePlanOverride& force);

}  // namespace flashcheck
