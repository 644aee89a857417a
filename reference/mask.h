// The oracle's own statement of which keys a query sees. Deliberately written apart from any
// kernel's mask code: a verifier that reuses a kernel's mask repeats its bugs.
#pragma once
#include <algorithm>
#include <cstdint>

#include "reference/problem.h"

namespace flashcheck {

// Every alignment flashcheck knows makes the visible keys of a row a prefix [0, n): returns n.
// n == 0 means the row sees no key (bottom_right with seq_q > seq_kv); such rows get O = 0 and
// LSE = -inf by convention.
inline int64_t visible_keys(const Problem& p, int64_t row) {
  switch (p.causal) {
    case Causal::none: return p.seq_kv;
    case Causal::top_left: return std::min(row + 1, p.seq_kv);
    case Causal::bottom_right: return std::clamp(row + 1 + p.seq_kv - p.seq_q, int64_t{0}, p.seq_kv);
  }
  return p.seq_kv;
}

inline bool key_visible(const Problem& p, int64_t row, int64_t key) { return key < visible_keys(p, row); }

}  // namespace flashcheck
