// mma_f16's backward tiles, per head dim, in one table (the kernels and the launch read it).
#pragma once
#include <cstddef>

namespace flashcheck::kernels {

// FlashAttention-2's backward split into two deterministic passes (no atomics):
//  - dK/dV: a CTA owns kBlockN keys of one KV head (16 per warp) and walks every query tile of
//    every query head of its group that sees them, so a KV head's gradients sum its group in
//    registers, in a fixed order;
//  - dQ: a CTA owns kBlockM query rows (16 per warp) and walks the KV tiles they see.
// The dQ pass recomputes S and dP (two more GEMMs than FA2's atomic dQ, 7 instead of 5): the price
// of gradients that are bitwise equal from run to run, which a training kernel's users ask for.
template <int D>
struct BwdTraits {
  static constexpr int kHeadDim = D;
  static constexpr int kWarps = 4;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kBlockN = 16 * kWarps;  // dK/dV pass: keys per CTA
  static constexpr int kBlockM = 64;           // dK/dV pass: query rows per step
  static constexpr int kBlockMq = 16 * kWarps; // dQ pass: query rows per CTA
  static constexpr int kBlockNq = 64;          // dQ pass: keys per step
  static constexpr int kDTiles = D / 8;
  static constexpr size_t kTile = size_t(64) * D * 2;  // one 64-row tile of 16-bit values
  // dK/dV: K, V, then two stages of Q and dO, then two stages of LSE·log2(e) and D.
  static constexpr size_t kSmemDkdv = 2 * kTile + 4 * kTile + 2 * 2 * kBlockM * sizeof(float);
  // dQ: Q, dO, then two stages of K and V.
  static constexpr size_t kSmemDq = 2 * kTile + 4 * kTile;
  static_assert(D == 64 || D == 128, "head dims 64 and 128 (256 would not keep dK and dV in registers)");
  static_assert(kBlockN == 64 && kBlockMq == 64, "64-row tiles: kTile sizes every shared buffer");
  static_assert(kBlockM % 16 == 0 && kBlockNq % 16 == 0, "k16 steps over queries and keys");
  static_assert(D / 8 % 8 == 0, "the XOR swizzle permutes 8 chunks");
  static_assert(kSmemDkdv <= 227 * 1024 && kSmemDq <= 227 * 1024, "fits Hopper's shared memory");
};

}  // namespace flashcheck::kernels
