// wgmma_e4m3's tiles per head dim, in one table shared by the kernel and its declaration. Plain
// C++ (no CUDA headers): register.cpp includes it.
#pragma once
#include <cstddef>

namespace flashcheck::kernels {

// One CTA = one producer warpgroup (one thread issues every TMA copy) + kConsumerWGs consumer
// warpgroups of 64 query rows each, as wgmma_f16 (gpu/wgmma_f16/tile_size.h); the operands are
// e4m3 bytes, so a 128-byte swizzled row holds 128 elements and a k-step (k32) is still 32 bytes.
//  * Q tile [kBlockM][D] and K tiles [kBlockN][D]: D/128 column blocks of 128-byte rows (K-major),
//    or one block of 64-byte rows for D = 64.
//  * Vᵀ tiles [Dv][kBlockN]: fp8 wgmma has no transposed B, so P·V reads V transposed, keys
//    contiguous, from a copy the launch makes (transpose_v.cuh): column blocks of 128 keys (128-byte
//    swizzle) where kBlockN is a multiple of 128, else of 64 keys (64-byte swizzle), so that
//    kBlockN = 192 — FlashAttention-3's tile for a pre-transposed V at D = 128 — is 3 whole blocks.
//  * O is staged for the global stores in an area of its own (16-bit, [kBlockM][Dv] as Dv/64
//    swizzled blocks): the Q tile, which wgmma_f16 reuses, is half the size in fp8.
template <int D, int BN, int WGs = 2, int Stages = 2>
struct WgmmaE4m3Traits {
  static constexpr int kHeadDimQK = D;
  static constexpr int kHeadDimV = D;
  static constexpr int kConsumerWGs = WGs;
  static constexpr int kRowsPerWG = 64;
  static constexpr int kBlockM = kConsumerWGs * kRowsPerWG;
  static constexpr int kBlockN = BN;
  static constexpr int kStages = Stages;
  static constexpr int kThreads = (1 + kConsumerWGs) * 128;
  static constexpr int kProducerRegs = 24;
  static constexpr int kConsumerRegs = kConsumerWGs == 2 ? 240 : 160;

  // Q/K rows: 128-byte swizzled column blocks, or for D = 64 one block of 64-byte rows (TMA's and
  // wgmma's 64-byte swizzle: 8-row atoms of 512 bytes).
  static constexpr int kRowBytes = D < 128 ? D : 128;
  static constexpr int kQBlocks = D / kRowBytes;
  static constexpr size_t kQBlockBytes = size_t(kBlockM) * kRowBytes;
  static constexpr size_t kKBlockBytes = size_t(kBlockN) * kRowBytes;
  static constexpr size_t kQBytes = kQBlocks * kQBlockBytes;
  static constexpr size_t kKBytes = kQBlocks * kKBlockBytes;
  // Vᵀ: kVtBlocks column blocks of Dv rows × kVtRowBytes keys; a k32 step never crosses a block.
  static constexpr int kVtRowBytes = BN % 128 == 0 ? 128 : 64;
  static constexpr int kVtBlocks = BN / kVtRowBytes;
  static constexpr size_t kVtBlockBytes = size_t(D) * kVtRowBytes;
  static constexpr size_t kVtBytes = kVtBlocks * kVtBlockBytes;
  static constexpr size_t kVBytes = kVtBytes;  // a V slot of the ring (gpu/wgmma_f16/smem.cuh)
  static constexpr int kOBlocks = D / 64;               // 16-bit output: 64 columns per 128-byte row
  static constexpr size_t kOBlockBytes = size_t(kBlockM) * 128;
  static constexpr size_t kOffQ = 0;
  static constexpr size_t kOffK = kOffQ + kQBytes;
  static constexpr size_t kOffV = kOffK + kStages * kKBytes;
  static constexpr size_t kOffO = kOffV + kStages * kVtBytes;
  static constexpr size_t kOffBar = kOffO + kOBlocks * kOBlockBytes;
  // Q full; K full/empty, Vᵀ full/empty per stage; wgmma_f16's tail barrier (unused here).
  static constexpr int kBarriers = 2 + 4 * kStages;
  static constexpr size_t kSmemBytes = kOffBar + kBarriers * 8 + 1024;  // + 1024: alignment of the base

  // S (fp32, kBlockN/2), P (e4m3, 4 per register: kBlockN/8), O (fp32, Dv/2) per consumer thread.
  static constexpr int kSRegs = kBlockN / 2, kPRegs = kBlockN / 8, kORegs = D / 2;
  // O's rescale skipped for a tile where no row of the warp raised its max (corr exactly 1: the
  // same bits): +2.7% at D = 64, none at 128, within the spread at 256 (H100, PERF.md session 20).
  static constexpr bool kSkipUnchangedRescale = D == 64;

  static_assert(D == 64 || D == 128 || D == 256, "compiled head dims: 64, 128 and 256");
  static_assert(kBlockN % 64 == 0 && kBlockN <= 256, "Vᵀ rows of whole 64- or 128-byte blocks; wgmma N ≤ 256");
  static_assert(kQBlockBytes % 1024 == 0 && kKBlockBytes % 1024 == 0 && kVtBlockBytes % 1024 == 0,
                "swizzle pattern anchored at 1024 bytes");
  static_assert(kConsumerWGs == 2 || kConsumerWGs == 3, "register budgets for 2 or 3 consumer warpgroups");
  static_assert(kSRegs + kPRegs + kORegs <= kConsumerRegs - 32, "S, P and O must leave room for the rest");
  static_assert(128 * (kProducerRegs + kConsumerWGs * kConsumerRegs) <= 65536, "register file");
  static_assert(kSmemBytes <= 227 * 1024, "fits Hopper's 227 KB of shared memory per block");
};

// The tile table, each entry the fastest measured on an H100 (PERF.md, "wgmma_e4m3", sessions 15
// and 20, (4,16,8192,D) e4m3, TFLOPS median of 30; runs of one configuration differ by up to 5%):
//   D = 64:   three consumer warpgroups (192 rows, 160 registers each: S 64 + P 16 + O 32), no
//             ping-pong: 585 against 485 with two warpgroups and 561 with ping-pong; 128 keys.
//   D = 128:  two warpgroups, 192 keys (S 96 + P 24 + O 64), three stages, no ping-pong: 824-853
//             against 778-798 at 128 keys (+7%), causal 760 against 685-712 (+8%); ping-pong at 192
//             keys 795-835. Shared memory 16 KB Q + 3 × 48 KB K/Vᵀ + 32 KB O.
//   D = 256:  two warpgroups, ping-pong (non-causal): 1144-1178 against 1144 without; 128 keys.
template <int D, bool kCausal>
struct WgmmaE4m3Config {
  using Traits = WgmmaE4m3Traits<D, D == 128 ? 192 : 128, D == 64 ? 3 : 2, D == 128 ? 3 : 2>;
  static constexpr bool kPingPong = D == 256 && !kCausal;
};

}  // namespace flashcheck::kernels
