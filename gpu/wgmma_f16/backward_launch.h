// wgmma_f16's backward pass (gpu/kernel.h BackwardFn), for its declaration in register.cpp.
#pragma once
#include "gpu/kernel.h"

namespace flashcheck {

// dQ, dK, dV of a plain problem (causal modes, GQA; bf16/f16, Dqk = Dv ∈ {64, 128}) on buffers
// addressed by their row strides (rows 16-byte aligned), every product on warpgroup MMA
// (bwd_tile_size.h); dQ summed with fp32 atomics, so no deterministic mode. Throws
// std::invalid_argument for a problem, view or mode it does not take, naming it.
void launch_wgmma_f16_backward_problem(const Problem& p, const KernelArgs& fwd, const BackwardArgs& g);

// What it takes, as BackwardCaps.
BackwardCaps wgmma_f16_backward_caps();

}  // namespace flashcheck
