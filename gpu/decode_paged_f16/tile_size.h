// decode_paged_f16's tiles per head dim, in one table shared by the kernels, the launch and the
// declaration (register.cpp).
#pragma once
#include <cstddef>

namespace flashcheck::kernels {

// A split CTA holds kRows query rows — (query position, query head of its KV head) pairs, so the
// query heads of one KV head share every K/V byte it reads — in kWarps m16 tiles, one per warp, and
// streams kBlockN keys per tile through a kStages-deep cp.async ring. Decode is memory-bound: what
// sets the speed is bytes in flight per SM, not FLOPs, so the ring is as deep as shared memory
// allows two CTAs per SM (Hopper, 228 KiB) and each warp does the whole tile's arithmetic for its
// 16 rows (at Sq·group ≤ 16 only warp 0 computes, about a fifth of the tile's load time; the
// others issue copies). At D = 256 the 16×256 O accumulator is 128 registers per thread, so tiles
// are 32 keys and the ring 2 deep.
template <int D>
struct DecodeTraits {
  static constexpr int kHeadDim = D;
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kRows = 16 * kWarps;                 // query rows per CTA (an m16 tile per warp)
  static constexpr int kBlockN = D == 256 ? 32 : 64;        // keys per K/V tile
  static constexpr int kStages = D == 64 ? 4 : D == 128 ? 3 : 2;
  static constexpr int kNTiles = kBlockN / 8;               // n8 tiles of S per warp
  static constexpr int kDTiles = D / 8;                     // n8 tiles of O per warp
  static constexpr int kChunks = D / 8;                     // 16-byte chunks per row
  static constexpr int kRowStep = kThreads / kChunks;       // rows one pass of the loader covers
  static constexpr size_t kSmemQ = size_t(kRows) * D * 2;
  static constexpr size_t kSmemTile = size_t(kBlockN) * D * 2;  // K (or V) of one stage
  static constexpr size_t kSmemBytes = kSmemQ + 2 * kStages * kSmemTile;
  // The combine: one warp per output row, each lane D/32 consecutive elements.
  static constexpr int kCombineWarps = 4;
  static constexpr int kPerLane = D / 32;

  static_assert(D == 64 || D == 128 || D == 256, "head dims 64, 128, 256");
  static_assert(kBlockN % 16 == 0, "P·V consumes keys 16 at a time, S is built from pairs of n8 tiles");
  static_assert(kChunks % 8 == 0, "the XOR swizzle permutes 8 chunks of a row");
  static_assert(kThreads % kChunks == 0 && kBlockN % kRowStep == 0 && kRows % kRowStep == 0,
                "every thread copies the same number of 16-byte chunks of a tile");
  static_assert(kStages >= 2, "a ring of at least two stages: one computed on, one landing");
  static_assert(2 * (kSmemBytes + 1024) <= 228 * 1024, "two CTAs per Hopper SM (1 KiB reserved per CTA)");
  static_assert(kPerLane == 2 || kPerLane == 4 || kPerLane == 8, "the combine stores 4, 8 or 16 bytes per lane");
};

}  // namespace flashcheck::kernels
