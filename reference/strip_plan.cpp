#include "reference/strip_plan.h"

#include <algorithm>
#include <cstdlib>

namespace flashcheck {

const StripSplit& StripSplit::oracle_default() {
  static const StripSplit s = [] {
    StripSplit d;
    if (const char* e = std::getenv("FLASHCHECK_ORACLE_SPLIT")) {
      const long long x = std::atoll(e);
      if ((x == 0 && e[0] == '0') || (x >= 1 && x <= 4096)) d.min_rows = x;
    }
    return d;
  }();
  return s;
}

namespace {

// The pairs of rows [a, b) with keys in [kl, kh) still to be covered; pieces go to `out`.
struct Planner {
  std::span<const KeyRange> vis;
  const StripSplit& split;
  std::vector<StripPiece>& out;

  KeyRange within(int64_t i, int64_t kl, int64_t kh) const {
    const KeyRange& r = vis[static_cast<size_t>(i)];
    return {std::max(r.lo, kl), std::max(std::max(r.lo, kl), std::min(r.hi, kh))};
  }

  void plan(int64_t a, int64_t b, int64_t kl, int64_t kh) {
    while (a < b && within(a, kl, kh).empty()) ++a;  // rows that see none of these keys need no piece
    while (b > a && within(b - 1, kl, kh).empty()) --b;
    if (a == b) return;
    // U: the keys some row sees (what one piece must span); I: the keys every row sees.
    KeyRange u{kh, kl}, in{kl, kh};
    int64_t visible = 0;
    for (int64_t i = a; i < b; ++i) {
      const KeyRange r = within(i, kl, kh);
      visible += r.count();
      if (r.empty()) {  // a row seeing nothing between rows that see something: no common key
        in = {kl, kl};
        continue;
      }
      u = {std::min(u.lo, r.lo), std::max(u.hi, r.hi)};
      in = {std::max(in.lo, r.lo), std::min(in.hi, r.hi)};
    }
    const int64_t n = b - a, computed = n * u.count();
    if (!split.splits() || n <= split.min_rows ||
        static_cast<double>(computed - visible) <= split.max_masked_share * static_cast<double>(computed)) {
      out.push_back({a, n, u.lo, u.count()});
      return;
    }
    if (2 * in.count() >= u.count()) {
      // Most keys are seen by every row: one GEMM over all of them, then the corners on either
      // side, where each row sees a prefix or a suffix of the keys.
      out.push_back({a, n, in.lo, in.count()});
      plan(a, b, u.lo, in.lo);
      plan(a, b, in.hi, u.hi);
      return;
    }
    // A corner (or a window narrower than the group): halve the rows, each half then has a
    // larger share of keys in common. Halves split on a multiple of 8 rows from the block's first
    // row where they can, so the GEMMs' row panels stay whole.
    int64_t m = (a + b) / 2;
    const int64_t m8 = (m + 4) / 8 * 8;
    if (m8 > a && m8 < b) m = m8;
    plan(a, m, kl, kh);
    plan(m, b, kl, kh);
  }
};

}  // namespace

void plan_strip(std::span<const KeyRange> vis, const StripSplit& split, std::vector<StripPiece>& out) {
  out.clear();
  if (vis.empty()) return;
  int64_t kl = vis[0].lo, kh = vis[0].hi;
  for (const KeyRange& r : vis) kl = std::min(kl, r.lo), kh = std::max(kh, r.hi);
  Planner{vis, split, out}.plan(0, static_cast<int64_t>(vis.size()), kl, kh);
}

PlanCost plan_cost(std::span<const KeyRange> vis, std::span<const StripPiece> pieces) {
  PlanCost c;
  for (const StripPiece& x : pieces) {
    c.computed += x.nr * x.nk;
    for (int64_t i = x.r0; i < x.r0 + x.nr; ++i) {
      const KeyRange& r = vis[static_cast<size_t>(i)];
      c.visible += std::max<int64_t>(0, std::min(r.hi, x.k0 + x.nk) - std::max(r.lo, x.k0));
    }
  }
  return c;
}

}  // namespace flashcheck
