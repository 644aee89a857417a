// Measures the error distribution of correct implementations against the fp64 oracle, per dtype:
// the evidence behind the tolerance table (verify/tolerance.cpp, verify/TOLERANCE.md).
#pragma once
#include <cstdint>
#include <ostream>

namespace flashcheck {

// Draws `cases` problems per dtype from the fuzz generators (every distribution), runs the replica
// with kernel numerics at several tile shapes and the same-dtype baseline, and prints max / p99 of
// each metric the verdict uses. boundary_aware: the campaigns' draw (tile-boundary lengths, the
// hostile value classes often) instead of the uniform one the published figures were measured on.
void calibrate(int64_t cases, uint64_t seed, std::ostream& out, bool boundary_aware = false);

}  // namespace flashcheck
