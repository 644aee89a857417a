// mma_f16's tiles per head dim, in one table (shared by the kernel and its variant declaration).
#pragma once
#include <cstddef>

namespace flashcheck::kernels {

// kBlockM query rows per block, split over kWarps warps of kMTiles×16 rows each; kBlockN keys per
// KV tile. Each warp holding 32 rows reuses every K/V fragment it loads for two m16 tiles, which is
// what keeps ldmatrix traffic under the tensor cores' rate at D = 64 and 128. At D = 256 the O
// accumulator alone is 16×256/32 = 128 registers per m-tile, so warps hold 16 rows.
// Measured alternatives at D = 128 (PERF.md): kBlockN 32, or 8 warps of 16 rows, removed the first
// build's register spills but ran 10% and 18% slower; 256-row blocks of 8 warps (half the K/V
// copies per FLOP) ran 1–8% slower than this table.
template <int D>
struct MmaF16Traits {
  static constexpr int kHeadDim = D;
  static constexpr int kBlockM = 128;
  static constexpr int kBlockN = D == 64 ? 128 : 64;
  static constexpr int kWarps = D == 256 ? 8 : 4;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kMTiles = kBlockM / (16 * kWarps);  // m16 tiles per warp
  static constexpr int kNTiles = kBlockN / 8;              // n8 tiles of S per m-tile
  static constexpr int kDTiles = D / 8;                    // n8 tiles of O per m-tile
  static constexpr int kChunksPerRow = D / 8;              // 16-byte chunks per smem row
  static constexpr int kStages = 2;                        // K/V tiles in flight
  // Skip O's rescale when no row of an m-tile raised its max (bit-identical). Measured on H100:
  // +2.5–3% at D = 128, but −6% at D = 256, where the branch costs the schedule more than it saves.
  static constexpr bool kSkipUnchangedRescale = D != 256;
  static constexpr size_t kSmemQ = size_t(kBlockM) * D * 2;
  static constexpr size_t kSmemKV = size_t(kBlockN) * D * 2;
  static constexpr size_t kSmemBytes = kSmemQ + 2 * kStages * kSmemKV;
  static_assert(D == 64 || D == 128 || D == 256, "head dims 64, 128, 256");
  static_assert(kBlockM % (16 * kWarps) == 0 && kMTiles >= 1, "whole m16 tiles per warp");
  static_assert(kBlockN % 16 == 0, "P·V consumes keys 16 at a time");
  static_assert(kChunksPerRow % 8 == 0, "the XOR swizzle permutes 8 chunks");
  static_assert(kSmemBytes <= 227 * 1024, "fits Hopper's shared memory");
};

}  // namespace flashcheck::kernels
