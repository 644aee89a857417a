// decode_paged_f16's split planning on the CPU (split_plan.h, the arithmetic its split CTAs run on
// the device): the ranges of a sequence's splits cover every key exactly once, in order, in whole
// tiles, none past the cache; empty caches and more splits than tiles give empty ranges; the split
// count stays within its bounds and is 1 when the CTAs already fill the machine.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <cstdint>
#include <vector>

#include "gpu/decode_paged_f16/split_plan.h"
#include "gpu/decode_paged_f16/tile_size.h"

namespace flashcheck::kernels {
namespace {

// The ranges of every split of n keys: each key in exactly one, in split order, begins on tile
// boundaries, nothing past n; a split past the last tile empty; with n > 0 every split before the
// last non-empty one is non-empty (no hole a combine would have to skip).
void check_cover(int64_t n, int64_t splits, int64_t tile) {
  std::vector<int> seen(static_cast<size_t>(n), 0);
  int64_t next = 0;
  bool ended = false;
  for (int64_t s = 0; s < splits; ++s) {
    const KeyRange r = split_range(n, splits, tile, s);
    RC_ASSERT(r.begin <= r.end);
    RC_ASSERT(r.end <= n);
    if (r.size() == 0) {
      ended = true;
      continue;
    }
    RC_ASSERT(!ended);  // empty splits only at the tail
    RC_ASSERT(r.begin == next);
    RC_ASSERT(r.begin % tile == 0);
    for (int64_t j = r.begin; j < r.end; ++j) ++seen[static_cast<size_t>(j)];
    next = r.end;
  }
  RC_ASSERT(next == n);
  for (int c : seen) RC_ASSERT(c == 1);
}

RC_GTEST_PROP(DecodeSplitPlan, EveryKeyInExactlyOneSplit, ()) {
  const int64_t tile = *rc::gen::element<int64_t>(DecodeTraits<64>::kBlockN, DecodeTraits<128>::kBlockN,
                                                   DecodeTraits<256>::kBlockN, 1, 7);
  // Lengths on and next to tile and split boundaries as well as anywhere, empty included.
  const int64_t splits = *rc::gen::inRange<int64_t>(1, 200);
  const int64_t n = *rc::gen::oneOf(rc::gen::inRange<int64_t>(0, 20000),
                                    rc::gen::map(rc::gen::inRange<int64_t>(0, 300), [&](int64_t k) { return k * tile; }),
                                    rc::gen::map(rc::gen::inRange<int64_t>(1, 300), [&](int64_t k) { return k * tile + 1; }),
                                    rc::gen::map(rc::gen::inRange<int64_t>(1, 40),
                                                 [&](int64_t k) { return k * splits * tile - 1; }));
  RC_TAG(n == 0 ? "empty" : n % tile == 0 ? "whole tiles" : "partial tile");
  check_cover(n, splits, tile);
}

TEST(DecodeSplitPlan, EdgesByHand) {
  // One split takes everything; an empty cache gives empty ranges for every split.
  EXPECT_EQ(split_range(1000, 1, 64, 0).begin, 0);
  EXPECT_EQ(split_range(1000, 1, 64, 0).end, 1000);
  for (int64_t s = 0; s < 5; ++s) EXPECT_EQ(split_range(0, 5, 64, s).size(), 0);
  // 3 tiles over 5 splits: one tile each for splits 0..2, 3 and 4 empty and placed at the end.
  EXPECT_EQ(split_range(130, 5, 64, 2).begin, 128);
  EXPECT_EQ(split_range(130, 5, 64, 2).end, 130);
  EXPECT_EQ(split_range(130, 5, 64, 3).begin, 130);
  EXPECT_EQ(split_range(130, 5, 64, 4).size(), 0);
  // A cache on a split boundary: 4 splits of 2 tiles over 8 tiles exactly.
  EXPECT_EQ(split_range(512, 4, 64, 3).begin, 384);
  EXPECT_EQ(split_range(512, 4, 64, 3).end, 512);
}

RC_GTEST_PROP(DecodeSplitPlan, SplitCountWithinBounds, ()) {
  const int64_t base = *rc::gen::inRange<int64_t>(1, 5000);
  const int64_t tiles = *rc::gen::inRange<int64_t>(0, 5000);
  const int64_t slots = *rc::gen::inRange<int64_t>(1, 1000);
  const int64_t s = choose_num_splits(base, tiles, slots);
  RC_ASSERT(s >= 1);
  RC_ASSERT(s <= 128);
  RC_ASSERT(s <= (tiles > 1 ? tiles : 1));
  if (base * 10 >= slots * 8) RC_ASSERT(s == 1);
}

TEST(DecodeSplitPlan, TheIssueShapesOnAnH100) {
  // 132 SMs, two CTAs each: B = 16 × Hkv = 8 (128 CTAs, under one wave) splits in 2, filling
  // 97% of the slots; B = 1 × Hkv = 8 over a 128K cache fills at least 90% of them.
  const int64_t slots = 132 * 2;
  EXPECT_EQ(choose_num_splits(128, 8192 / 64, slots), 2);
  const int64_t s = choose_num_splits(8, 131072 / 64, slots);
  EXPECT_GE(8 * s, slots * 9 / 10);
  EXPECT_LE(8 * s, slots);
  // Enough CTAs already: no split (and no combine traffic beyond one pass).
  EXPECT_EQ(choose_num_splits(1024, 8192 / 64, slots), 1);
  EXPECT_EQ(choose_num_splits(8, 1, slots), 1);  // one tile cannot be split
}

}  // namespace
}  // namespace flashcheck::kernels
