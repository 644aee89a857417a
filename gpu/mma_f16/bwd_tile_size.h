// mma_f16's backward tiles, per head dim, in one table (the kernels and the launch read it).
#pragma once
#include <cstddef>

namespace flashcheck::kernels {

// FlashAttention-2's backward. The dK/dV pass is FA2's column loop: a CTA of 8 warps owns kBlockN
// keys of one KV head and walks every query tile of every query head of its group that sees them,
// so a KV head's gradients sum its group in registers, in a fixed order. Each product is split
// over the 8 warps in 2-D (S and dP: 2 × 4 warps over rows × keys; dK and dV: 4 × 2 over keys ×
// dims; dQ: 2 × 4 over rows × dims) with P and dS passed through shared memory: the warps then
// read 1/2–1/4 of each operand tile instead of all of it, which is what bounded the first build
// (one warp per 16 keys: shared-memory pipe at 64%, tensor pipe at 37%; PERF.md session 10).
// dQ, two ways (BackwardArgs::deterministic):
//  - default: the dK/dV pass adds dS·K for its query tile into an fp32 dQ sum with atomics (5
//    GEMM-sized products per visible pair, FA2's), and a last pass scales and rounds it;
//  - deterministic: a separate dQ pass owns kBlockMq query rows (16 per warp) and walks the KV
//    tiles they see, recomputing S and dP (7 products): one writer per dQ element, in key order,
//    so dQ is bitwise the same from run to run.
template <int D>
struct BwdTraits {
  static constexpr int kHeadDim = D;
  // dK/dV pass.
  static constexpr int kWarps = 8;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kBlockN = 128;          // keys per CTA
  // Query rows per step: 128 at D = 64, where the step's S and dP fit beside the smaller dK and dV
  // (FA2's choice there too): half the steps, each key tile read against twice the rows.
  static constexpr int kBlockM = D == 64 ? 128 : 64;
  static constexpr int kMinBlocks = 1;  // CTAs per SM the registers are sized for (2 at D = 64 spilled ~300 bytes)
  static constexpr size_t kKeyTile = size_t(kBlockN) * D * 2;
  static constexpr size_t kRowTile = size_t(kBlockM) * D * 2;
  static constexpr size_t kPairTile = size_t(kBlockM) * kBlockN * 2;  // P or dS, 16-bit
  // K, V, two stages of Q and dO, P, dS, two stages of LSE·log2(e) and D.
  static constexpr size_t kSmemDkdv = 2 * kKeyTile + 4 * kRowTile + 2 * kPairTile + 2 * 2 * kBlockM * sizeof(float);
  // Deterministic dQ pass: 4 warps.
  static constexpr int kWarpsQ = 4;
  static constexpr int kThreadsQ = 32 * kWarpsQ;
  static constexpr int kBlockMq = 16 * kWarpsQ;  // query rows per CTA
  static constexpr int kBlockNq = 64;            // keys per step
  static constexpr size_t kTile = size_t(64) * D * 2;  // one 64-row tile of 16-bit values
  // Q, dO, then two stages of K and V.
  static constexpr size_t kSmemDq = 2 * kTile + 4 * kTile;
  static_assert(D == 64 || D == 128, "head dims 64 and 128 (256 would not keep dK and dV in registers)");
  static_assert(kWarps == 8 && kBlockN == 4 * 32 && kBlockM % 32 == 0,
                "the 2 × 4 and 4 × 2 warp grids: 32 keys per warp column, whole m16 tiles per warp row");
  static_assert(D % 64 == 0, "dK/dV: D/2 per warp in n16 pairs; dQ: D/4 per warp in n16 pairs");
  static_assert(kBlockMq == 64 && kBlockNq % 16 == 0, "the dQ pass's 64-row tiles, k16 steps over keys");
  static_assert(D / 8 % 8 == 0 && kBlockN / 8 % 8 == 0, "the XOR swizzle permutes 8 chunks of every tile row");
  static_assert(kSmemDkdv * kMinBlocks <= 227 * 1024 && kSmemDq <= 227 * 1024, "fits Hopper's shared memory");
};

}  // namespace flashcheck::kernels
