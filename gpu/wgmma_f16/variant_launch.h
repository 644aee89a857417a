// wgmma_f16's variant launches (problem model 2), one translation unit per head-dim pair
// (variants_dD.cu), called by launch2.cpp with the VarParams it filled.
#pragma once
#include <cstdint>

#include "gpu/common/var_params.h"

namespace flashcheck::kernels {

// The [outer, heads, rows, dim] view a tensor map takes of q (or of k and v): a dense batch is
// (B, stored rows per sequence), a packed one (1, tokens of all sequences).
struct TmaRows {
  int64_t outer, rows;
};

// Launches the variant instantiation `kind` at head dims (Dqk, Dv). grid_x is the number of q-tiles:
// per sequence for a dense batch, all sequences' for a packed one.
template <int Dqk, int Dv>
void launch_wgmma_f16_variant(const VarParams& p, TmaRows q, TmaRows kv, bool bf16, VariantKind kind, int grid_x,
                              void* stream);
template <>
void launch_wgmma_f16_variant<64, 64>(const VarParams&, TmaRows, TmaRows, bool, VariantKind, int, void*);
template <>
void launch_wgmma_f16_variant<128, 128>(const VarParams&, TmaRows, TmaRows, bool, VariantKind, int, void*);
template <>
void launch_wgmma_f16_variant<192, 128>(const VarParams&, TmaRows, TmaRows, bool, VariantKind, int, void*);
template <>
void launch_wgmma_f16_variant<256, 256>(const VarParams&, TmaRows, TmaRows, bool, VariantKind, int, void*);

}  // namespace flashcheck::kernels
