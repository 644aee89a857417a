// The same-dtype naive baseline of the baseline-relative rule (as FlashAttention's and PyTorch's
// tests use it): plain attention computed the way an eager framework does in the low precision —
// S = Q Kᵀ rounded to the dtype, softmax in fp32 rounded to the dtype, O = P V accumulated in fp32
// and rounded to the dtype. A kernel is held to a multiple of this baseline's error.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "reference/inputs.h"
#include "reference/problem.h"

namespace flashcheck {

// O [B, Hq, rows, Dv] for the given query rows (all rows when empty), values in the problem's dtype.
std::vector<float> dtype_baseline(const Problem& p, const Inputs& in, std::span<const int64_t> rows = {});

}  // namespace flashcheck
