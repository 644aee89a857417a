// wgmma_f16's host entry points (defined in wgmma_f16.cu, compiled for sm_90a only).
#pragma once
#include <string>

#include "gpu/common/params.h"

namespace flashcheck::kernels {

// FlashAttention forward on Hopper (TMA + wgmma + warp specialisation), bf16 or fp16 in, fp32
// accumulation, natural-log LSE. (Dqk, Dv) ∈ {(64,64), (128,128), (192,128), (256,256)}; any other
// pair throws std::invalid_argument. Throws std::runtime_error on any CUDA error.
// Tiles and consumer schedule per (Dqk, Dv, causal) come from the table in tile_size.h.
void launch_wgmma_f16(const FwdParams& p, bool bf16, void* stream);

}  // namespace flashcheck::kernels
