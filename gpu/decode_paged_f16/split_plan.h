// How decode_paged_f16 divides a sequence's keys among split CTAs, and how many splits a launch
// uses. Plain arithmetic shared by the host (the launch) and the device (each split CTA finds its
// own key range), and tested on the CPU (split_plan_test.cpp), where CI has no GPU.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define FC_DECODE_HD __host__ __device__
#else
#define FC_DECODE_HD
#endif

namespace flashcheck::kernels {

struct KeyRange {
  int64_t begin = 0, end = 0;  // keys [begin, end); empty when begin == end
  FC_DECODE_HD int64_t size() const { return end - begin; }
};

// Split s of `splits` over n keys, in whole tiles of `tile` keys: the ranges of s = 0, 1, ... are
// consecutive, disjoint and cover [0, n) exactly; each starts on a tile boundary (so a tile never
// straddles two splits and pages of a multiple of the tile stay whole); splits past the last tile
// are empty (begin = end = n). The combine merges every split, empty ones as the empty state.
FC_DECODE_HD inline KeyRange split_range(int64_t n, int64_t splits, int64_t tile, int64_t s) {
  if (n <= 0 || splits <= 0 || tile <= 0) return {0, 0};
  const int64_t tiles = (n + tile - 1) / tile;
  const int64_t per = (tiles + splits - 1) / splits;  // tiles per split, the last ones short or empty
  const int64_t b = s * per * tile, e = (s + 1) * per * tile;
  return {b < n ? b : n, e < n ? e : n};
}

// Splits per (sequence, KV head, query chunk): `base_ctas` CTAs without splitting, the longest
// sequence's `tiles` key tiles, `slots` CTAs resident at once (SMs × CTAs per SM). A launch that
// fills the machine takes 1 (no combine traffic beyond one pass). Otherwise the wave efficiency of
// s splits is waves / ceil(waves), waves = base·s / slots (a last wave half full idles half the
// SMs for a whole wave); the smallest s within 90% of the best efficiency wins, since every split
// costs a partial O in the workspace and a term in the combine. Never more splits than tiles
// (a split without keys does no work), nor than max_splits.
inline int64_t choose_num_splits(int64_t base_ctas, int64_t tiles, int64_t slots, int64_t max_splits = 128) {
  if (base_ctas <= 0 || tiles <= 1 || slots <= 0 || max_splits <= 1) return 1;
  if (base_ctas * 10 >= slots * 8) return 1;  // 80% of the slots or more already
  const int64_t limit = tiles < max_splits ? tiles : max_splits;
  auto efficiency = [&](int64_t s) {
    const double waves = static_cast<double>(base_ctas * s) / static_cast<double>(slots);
    const double whole = static_cast<double>(static_cast<int64_t>(waves) + (waves > static_cast<int64_t>(waves) ? 1 : 0));
    return waves / whole;
  };
  double best = 0;
  for (int64_t s = 1; s <= limit; ++s) best = efficiency(s) > best ? efficiency(s) : best;
  for (int64_t s = 1; s <= limit; ++s)
    if (efficiency(s) >= 0.9 * best) return s;
  return 1;
}

}  // namespace flashcheck::kernels
