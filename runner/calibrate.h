// Measures the error distribution of correct implementations against the fp64 oracle, per dtype:
// the evidence behind the tolerance table (verify/tolerance.cpp, verify/TOLERANCE.md).
#pragma once
#include <cstdint>
#include <ostream>
#include <vector>

#include "reference/dtype.h"

namespace flashcheck {

// Draws `cases` problems per dtype from the fuzz generators (every distribution), runs the replica
// with kernel numerics at several tile shapes and the same-dtype baseline, and prints max / p99 of
// each metric the verdict uses. boundary_aware: the campaigns' draw (tile-boundary lengths, the
// hostile value classes often) instead of the uniform one the published figures were measured on.
// Per dtype (default: every one flashcheck judges, fp8 e4m3 and e5m2 with both output dtypes and
// every descale granularity), `cases` random problems judged on the kernel-numerics replica.
void calibrate(int64_t cases, uint64_t seed, std::ostream& out, bool boundary_aware = false,
               const std::vector<DType>& dtypes = {DType::f32, DType::f16, DType::bf16, DType::e4m3, DType::e5m2});

}  // namespace flashcheck
