// wgmma_f16's problem-model-2 launch (launch2.cpp), for its declaration in register.cpp.
#pragma once
#include "gpu/kernel.h"

namespace flashcheck {

// Any problem wgmma_f16 declares, on buffers addressed by KernelArgs' strides; throws
// std::invalid_argument for a view it cannot address (misaligned rows, negative strides).
void launch_wgmma_f16_problem(const Problem& p, const KernelArgs& a);

}  // namespace flashcheck
