// wgmma_e4m3's host entry point (launch.cu, compiled for sm_90a only).
#pragma once
#include "gpu/wgmma_e4m3/params.h"

namespace flashcheck::kernels {

// FlashAttention forward on Hopper with e4m3 q, k, v (contiguous BHSD, head dims 64, 128 or 256,
// Dqk = Dv), 16-bit output (bf16, or f16 when !out_bf16), natural-log LSE. Makes the Vᵀ copy the
// kernel reads in stream-ordered scratch memory, freed after the kernel. Throws
// std::invalid_argument for a shape it does not compile, std::runtime_error on a CUDA error.
void launch_wgmma_e4m3(const E4m3Params& p, bool out_bf16, void* stream);

}  // namespace flashcheck::kernels
