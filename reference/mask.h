// The oracle's own statement of which keys a query sees. Deliberately written apart from any
// kernel's mask code: a verifier that reuses a kernel's mask repeats its bugs.
//
// Every mask flashcheck knows (causal alignments, sliding windows and both together) makes the
// visible keys of a row one interval [lo, hi) of the sequence's used keys.
#pragma once
#include <algorithm>
#include <cstdint>

#include "reference/problem.h"

namespace flashcheck {

struct KeyRange {
  int64_t lo = 0, hi = 0;  // visible keys j: lo <= j < hi; empty when hi <= lo
  int64_t count() const { return hi > lo ? hi - lo : 0; }
  bool empty() const { return hi <= lo; }
  bool contains(int64_t j) const { return j >= lo && j < hi; }
};

// The alignment offset d of a sequence with sq queries and skv keys: query i is aligned with key
// i + d. bottom_right (FlashAttention's): d = skv − sq, so the last query meets the last key;
// top_left: d = 0. A window without a causal mode is aligned bottom-right, as FlashAttention's.
inline int64_t alignment_offset(const Problem& p, int64_t sq, int64_t skv) {
  return p.causal == Causal::top_left ? 0 : skv - sq;
}

// Keys visible to query `row` of sequence b: with d the alignment offset,
//   i + d − left ≤ j ≤ i + d + right   (inclusive; left/right −1: unbounded on that side)
// where a causal mode makes right = min(right, 0) (−1 counting as +∞), intersected with the
// sequence's used keys [0, skv(b)). Without a causal mode and a window every key is visible.
// n == 0 means the row sees no key: O = 0 and LSE per the declared empty-row convention.
inline KeyRange visible_range(const Problem& p, int64_t b, int64_t row) {
  const int64_t sq = p.sq(b), skv = p.skv(b);
  KeyRange r{0, skv};
  if (p.causal == Causal::none && p.window.none()) return r;
  const int64_t d = alignment_offset(p, sq, skv);
  // Bounds past the sequence mean "unbounded": clamp before adding, so no sum can overflow.
  const int64_t reach = sq + skv + 1;
  int64_t right = p.window.right < 0 ? reach : std::min(p.window.right, reach);
  if (p.causal != Causal::none) right = std::min<int64_t>(right, 0);
  const int64_t center = row + d;
  // Both ends within [0, skv], an empty range included: callers take lo as the first key a block
  // reads (a row whose window lies past the used keys must not send a block beyond them).
  if (p.window.left >= 0) r.lo = std::clamp<int64_t>(center - std::min(p.window.left, reach), 0, skv);
  r.hi = std::clamp<int64_t>(center + right + 1, 0, skv);
  if (r.hi < r.lo) r.hi = r.lo;
  return r;
}

// Dense problems (one sequence shape): the range of `row` in any batch element.
inline KeyRange visible_range(const Problem& p, int64_t row) { return visible_range(p, 0, row); }

inline bool key_visible(const Problem& p, int64_t b, int64_t row, int64_t key) {
  return visible_range(p, b, row).contains(key);
}

// Problem model 1's prefix form, for masks whose visible keys are a prefix [0, n) (no left window
// bound): n. Kept for callers that only handle prefixes; they must check lo == 0.
inline int64_t visible_keys(const Problem& p, int64_t row) { return visible_range(p, 0, row).hi; }
inline bool key_visible(const Problem& p, int64_t row, int64_t key) { return visible_range(p, 0, row).contains(key); }

}  // namespace flashcheck
