// wgmma_f16's backward tiles (issue 23): FlashAttention-2's column loop with every product on
// Hopper's warpgroup MMA.
//
// A CTA of two warpgroups owns kBlockN = 128 keys of one KV head, 64 per warpgroup, and walks the
// query tiles (kBlockM rows) of every query head of its group that see them. Each warpgroup
// computes its keys' scores transposed, Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ (M = its 64 keys, N = the
// step's rows): the accumulators' rows are then keys, so Pᵀ and dSᵀ rounded in place are already
// the A fragments of dV += Pᵀ·dO and dK += dSᵀ·Q (register A, no trip through shared memory;
// FlashAttention-3's swapped S/dP). dQ = dS·K needs dS with rows first: each warpgroup writes its
// dSᵀ transposed into shared memory (stmatrix.trans), and the two then split dQ's 64-wide column
// blocks (D = 128) or its row halves (D = 64, kBlockM = 128) and add them into the fp32 dQ sum
// with atomics, as mma_f16's default mode does (its passes 0 and 3 are shared).
//
// Every operand tile lives in shared memory as 64-column blocks of 128-byte rows, swizzled as TMA's
// 128-byte mode writes them (wgmma.cuh), so one layout serves both of its uses: Q is B of Sᵀ = K·Qᵀ
// (K-major) and B of dK += dSᵀ·Q (N-major), K is A of Sᵀ and B of dQ = dS·K (N-major).
#pragma once
#include <cstddef>

namespace flashcheck::kernels {

template <int D>
struct WgmmaBwdTraits {
  static constexpr int kHeadDim = D;
  static constexpr int kWarpgroups = 2;
  static constexpr int kThreads = 128 * kWarpgroups;
  static constexpr int kBlockN = 64 * kWarpgroups;  // keys per CTA, 64 per warpgroup (wgmma's M)
  // Query rows per step (the N of Sᵀ and dPᵀ): 64 at D = 128, where dK and dV hold 128 registers a
  // thread; 128 at D = 64, where they hold 64 and a step twice as long halves the barriers.
  static constexpr int kBlockM = D == 64 ? 128 : 64;
  static constexpr int kBlocks = D / 64;                    // 64-column blocks of a Q, K, V, dO tile
  static constexpr size_t kKeyBlockBytes = size_t(kBlockN) * 128;
  static constexpr size_t kRowBlockBytes = size_t(kBlockM) * 128;
  static constexpr size_t kKeyTile = kBlocks * kKeyBlockBytes;
  static constexpr size_t kRowTile = kBlocks * kRowBlockBytes;
  static constexpr size_t kDsTile = size_t(kBlockN / 64) * kRowBlockBytes;  // dS: rows × keys, 64-key blocks
  // dQ's split: warpgroup w takes rows [w·kDqRows, +64) × columns [w·kDqCols, +64) of the step's dQ.
  static constexpr int kDqRows = kBlockM == 128 ? 64 : 0;
  static constexpr int kDqCols = kBlockM == 128 ? 0 : 64;
  static constexpr int kSRegs = kBlockM / 2;  // Sᵀ or dPᵀ: 64 keys × kBlockM rows over 128 threads
  static constexpr int kAccRegs = D / 2;      // dK or dV: 64 keys × D
  // K, V, two stages of Q and dO, dS, two stages of LSE and D; 1024 bytes to align the base.
  static constexpr size_t kSmem = 1024 + 2 * kKeyTile + 4 * kRowTile + kDsTile + 2 * 2 * kBlockM * sizeof(float);
  static_assert(D == 64 || D == 128, "head dims 64 and 128 (dK and dV stay in registers)");
  static_assert(kBlocks * (kBlockM / 64) == kWarpgroups, "dQ's 64 × 64 pieces: one per warpgroup");
  static_assert(kKeyBlockBytes % 1024 == 0 && kRowBlockBytes % 1024 == 0, "the swizzle pattern repeats every 1024 bytes");
  static_assert(kKeyBlockBytes / 16 < (1 << 14), "LBO fits its 14-bit field");
  static_assert(kSmem <= 227 * 1024, "fits Hopper's shared memory");
};

}  // namespace flashcheck::kernels
