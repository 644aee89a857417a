#include "fuzz/wide_grid.h"

#include <algorithm>

namespace flashcheck {

int64_t grid_ctas(const Problem& p, int64_t block_q) {
  int64_t tiles = 0;
  for (int64_t b = 0; b < p.batch; ++b) tiles += (p.sq(b) + block_q - 1) / block_q;
  return tiles * p.heads_q;
}

namespace {

// A length in the space's declared multiple: x rounded up to one (x itself when any is taken).
int64_t up_to_multiple(int64_t x, int64_t n) { return n > 1 ? (x + n - 1) / n * n : x; }

// The batch that makes the grid reach kWideGridCtas with Hq heads and Sq rows in tiles of bm.
int64_t batch_for(const Problem& p, int64_t bm) {
  const int64_t per_entry = p.heads_q * ((p.seq_q + bm - 1) / bm);
  return (kWideGridCtas + per_entry - 1) / per_entry;
}

bool fits(const Problem& p, const ProblemSpace& s) {
  const double d = static_cast<double>(p.head_dim_qk + p.head_dim_v);
  const double work = static_cast<double>(p.batch * p.heads_q) * static_cast<double>(p.seq_q) * static_cast<double>(p.seq_kv) * d;
  const double elems = static_cast<double>(p.batch) *
                       (static_cast<double>(p.heads_q * p.seq_q) + static_cast<double>(p.heads_kv * p.seq_kv)) * d;
  return work <= s.max_work && elems <= static_cast<double>(kWideGridElements);
}

}  // namespace

std::optional<Case> wide_case(const Case& c, const ProblemSpace& s) {
  Problem p = c.problem;
  if (!p.seqlens_q.empty() || !p.seqlens_kv.empty() || !p.seqused_kv.empty()) return std::nullopt;
  const int64_t bm = tile_for(s, p.head_dim_qk).block_q, n = std::max<int64_t>(1, s.seq_multiple);
  // One query tile, at the residue the generator aimed at; a few keys (up to 16), or Sq of them.
  p.seq_q = up_to_multiple((p.seq_q - 1) % bm + 1, n);
  p.seq_kv = s.equal_lengths ? p.seq_q : up_to_multiple((p.seq_kv - 1) % 16 + 1, n);
  const int64_t shortest = n;  // no length may go below one multiple (1 when any is taken)
  for (;;) {
    if (std::max(p.seq_q, p.seq_kv) > s.max_seq) return std::nullopt;
    p.batch = batch_for(p, bm);
    if (fits(p, s)) break;
    // Over the budget: fewer keys first, then fewer rows (both together where they must be equal).
    if (!s.equal_lengths && p.seq_kv > shortest) {
      p.seq_kv = std::max(shortest, up_to_multiple(p.seq_kv / 2, n));
    } else if (p.seq_q > shortest) {
      p.seq_q = std::max(shortest, up_to_multiple(p.seq_q / 2, n));
      if (s.equal_lengths) p.seq_kv = p.seq_q;
    } else {
      return std::nullopt;  // the shortest lengths the space allows do not fit
    }
  }
  normalize(p);
  validate(p);
  Case out = c;
  out.problem = p;
  return out;
}

}  // namespace flashcheck
