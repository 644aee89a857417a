// How the fp64 oracle multiplies one row block against its strip of keys (reference/naive.cpp).
//
// A block of rows sees the union of its rows' visible keys, the strip. One GEMM over the whole
// strip also computes the pairs each row masks: under a sliding window those are two triangles
// at the strip's corners (a 256-row block under a (1024, 0) window computes 1,280 keys a row for
// 1,025 visible, 20% thrown away), under a causal mask one triangle. The plan cuts the block's
// (rows × strip) rectangle into pieces, each one GEMM: the keys every row of a group sees as one
// piece over all of them, and the corners recursively into a square every row of a half sees plus
// two smaller triangles (the way a triangular matrix product is blocked), down to pieces of
// `min_rows` rows. So the masked pairs computed fall from ~R² to ~R·min_rows per block, and the
// GEMMs stay as large as the shape allows (the middle one over every row of the block).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "reference/mask.h"

namespace flashcheck {

// One GEMM of a block: rows [r0, r0 + nr) of the block (0 = its first row) against keys
// [k0, k0 + nk) of the sequence.
struct StripPiece {
  int64_t r0, nr, k0, nk;
  bool operator==(const StripPiece&) const = default;
};

struct StripSplit {
  // A group of rows whose masked share of its strip is at most this is one piece: splitting would
  // trade a few percent of wasted pairs for thinner GEMMs.
  double max_masked_share = 1.0 / 16;
  // Groups of at most this many rows are one piece whatever they mask (their triangle costs at
  // most min_rows²/2 pairs). 0: never split (every block one piece over its whole strip, the
  // oracle before the split).
  int64_t min_rows = 32;
  bool splits() const { return min_rows > 0; }
  static StripSplit none() { return {1.0, 0}; }
  // The oracle's default: the above unless FLASHCHECK_ORACLE_SPLIT sets min_rows (0: off; 1..4096),
  // a knob for timing both on one machine with one binary.
  static const StripSplit& oracle_default();
};

// The pieces of one block whose rows see `vis` (one range per row, in the block's order), appended
// to `out` (cleared first). Every visible pair (row i, key j ∈ vis[i]) lies in exactly one piece;
// every piece lies within the block's strip [min lo, max hi) of its non-empty rows and begins and
// ends on rows that see some of its keys (so rows that see nothing at a block's ends are in no
// piece). That holds for any ranges; the masked pairs are few where both ends of the ranges never
// decrease from one row to the next, as every mask of the problem model makes them (reference/
// mask.h: a causal mode, a window, both, or neither; varlen, paged and sampled rows alike).
// The plan depends on the block's ranges alone, never on timing or the thread that runs it.
void plan_strip(std::span<const KeyRange> vis, const StripSplit& split, std::vector<StripPiece>& out);

// Pairs the pieces compute, and of those the visible ones: for reports and tests.
struct PlanCost {
  int64_t computed = 0, visible = 0;
};
PlanCost plan_cost(std::span<const KeyRange> vis, std::span<const StripPiece> pieces);

}  // namespace flashcheck
