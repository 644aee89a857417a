// The tile-boundary residues the generators aim lengths at, shared by the draw
// (fuzz/generators.cpp) and its statistics (fuzz/boundary_statistics.cpp).
#pragma once
#include <cstdint>

namespace flashcheck::residues {

// Residues aimed at, as offsets from a multiple of the modulus M: 0, 1, 2, M−2, M−1. A tile's first
// row or key, the two after it and the two before the next tile are where predicates, diagonals
// and "is this tile fully masked" tests go wrong.
inline constexpr int64_t kResidues[] = {0, 1, 2, -2, -1};

inline int64_t mod(int64_t x, int64_t m) { return ((x % m) + m) % m; }

}  // namespace flashcheck::residues
