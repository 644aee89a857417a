// mma_f16's variant launches, one translation unit per head dim (variants_dD.cu), called by
// launch2.cpp with the VarParams it filled.
#pragma once
#include "gpu/common/var_params.h"

namespace flashcheck::kernels {

// Launches the variant instantiation `kind` at head dim D (one per translation unit: variants_dD.cu).
// grid_x is the number of q-tiles: per sequence for a dense batch, all sequences' for a packed one.
template <int D>
void launch_mma_f16_variant(const VarParams& p, bool bf16, VariantKind kind, int grid_x, void* stream);
template <>
void launch_mma_f16_variant<64>(const VarParams& p, bool bf16, VariantKind kind, int grid_x, void* stream);
template <>
void launch_mma_f16_variant<128>(const VarParams& p, bool bf16, VariantKind kind, int grid_x, void* stream);
template <>
void launch_mma_f16_variant<256>(const VarParams& p, bool bf16, VariantKind kind, int grid_x, void* stream);

}  // namespace flashcheck::kernels
