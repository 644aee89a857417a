// The same-dtype naive baseline of the baseline-relative rule (as FlashAttention's and PyTorch's
// tests use it): plain attention computed the way an eager framework does in the low precision —
// S = Q Kᵀ rounded to the dtype, softmax in fp32 rounded to the dtype, O = P V accumulated in fp32
// and rounded to the dtype. A kernel is held to a multiple of this baseline's error. Variants are
// applied in fp32 in the problem's order (softcap, mask, ALiBi, sink); fp8 inputs take their
// dot products in fp32 from the raw fp8 values, times the descales, and round scores, P and O to
// the output dtype.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "reference/inputs.h"
#include "reference/problem.h"
#include "reference/rows.h"

namespace flashcheck {

// O over the rows (reference/rows.h layout), values in the problem's output dtype.
std::vector<float> dtype_baseline(const Problem& p, const Inputs& in, const RowSet& rows);
// The same rows in every sequence (all rows when empty): [B, Hq, rows, Dv] for dense problems.
std::vector<float> dtype_baseline(const Problem& p, const Inputs& in, std::span<const int64_t> rows = {});

}  // namespace flashcheck
