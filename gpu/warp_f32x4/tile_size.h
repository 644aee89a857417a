// warp_f32x4's tiles per padded head dim, shared by the kernel (C++17) and its variant declaration.
#pragma once
#include <cstddef>

namespace flashcheck::kernels {

// Tile sizes per padded head dim, in one table. Every K/V float4 a lane reads from shared memory
// feeds kRowsPerGroup rows, so more rows per group means fewer shared-memory bytes per FMA (the
// limit at D = 64); the Q and O slices (rows × DP/16 floats each) must still fit in registers, so
// rows and threads shrink as the head dim grows.
template <int DP>
struct WarpF32x4Traits {
  static constexpr int kHeadDim = DP;  // Dqk and Dv are zero-padded up to this
  static constexpr int kThreads = DP == 256 ? 256 : 512;
  static constexpr int kGroups = kThreads / 16;
  static constexpr int kRowsPerGroup = DP == 64 ? 4 : 2;
  static constexpr int kBlockQ = kGroups * kRowsPerGroup;
  static constexpr int kBlockKV = 32;
  static constexpr int kChunks = DP / 64;  // float4s per lane per row
  static constexpr int kPStride = 40;      // P row stride: adjacent rows land 8 banks apart
  static constexpr int kStageFloats = 2 * kBlockKV * DP;  // K and V of one tile
  static constexpr size_t kSmemBytes = sizeof(float) * (2 * kStageFloats + kBlockQ * kPStride);
  static_assert(DP % 64 == 0 && DP <= 256, "padded head dim is 64, 128 or 256");
  static_assert(kBlockKV == 32, "four 8-key chunks per tile");
  static_assert(kPStride % 4 == 0 && kPStride >= kBlockKV, "P rows are read as float4");
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "whole warps, one block");
};

}  // namespace flashcheck::kernels
