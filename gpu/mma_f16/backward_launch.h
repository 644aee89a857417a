// mma_f16's backward pass (gpu/kernel.h BackwardFn), for its declaration in register.cpp.
#pragma once
#include "gpu/kernel.h"

namespace flashcheck {

// dQ, dK, dV of a plain problem (causal modes, GQA; bf16/f16, Dqk = Dv ∈ {64, 128}) on buffers
// addressed by their row strides (rows 16-byte aligned). dQ is summed with fp32 atomics, or with
// BackwardArgs::deterministic by a separate pass, bitwise the same from run to run (dK and dV are
// both ways; bwd_tile_size.h). Throws std::invalid_argument for a problem or
// view it does not take, naming it.
void launch_mma_f16_backward_problem(const Problem& p, const KernelArgs& fwd, const BackwardArgs& g);

// What it takes, as BackwardCaps.
BackwardCaps mma_f16_backward_caps();

}  // namespace flashcheck
