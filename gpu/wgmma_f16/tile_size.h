// wgmma_f16's tiles per (Dqk, Dv), in one table shared by the kernel and its variant declaration.
// Plain C++ (no CUDA headers): the host-side variant includes it.
#pragma once
#include <cstddef>

namespace flashcheck::kernels {

// One CTA = one producer warpgroup (a single thread issues every TMA copy; the warpgroup gives
// its registers away) + kConsumerWGs consumer warpgroups of 64 query rows each (wgmma's M), which
// share every K/V tile. kBlockN keys per tile; kStages K/V tiles in flight.
//
// Registers per consumer thread: S (kBlockN/2 fp32) + P (kBlockN/4 packed pairs) + O (Dv/2) +
// bookkeeping must fit in kConsumerRegs (no spills); shared memory holds Q (kBlockM × Dqk) plus
// kStages × (K + V) tiles.
//   Dqk=Dv=64:   N=128: 64 + 32 + 32 registers;  16 KB + 2 × 32 KB
//   Dqk=Dv=128:  N=128: 64 + 32 + 64;            32 KB + 2 × 64 KB
//   Dqk=192/128: N=128: 64 + 32 + 64;            48 KB + 2 × (48 + 32) KB
//   Dqk=Dv=256:  N=64:  32 + 16 + 128;           64 KB + 2 × 64 KB
template <int Dqk, int Dv>
struct WgmmaF16Traits {
  static constexpr int kHeadDimQK = Dqk;
  static constexpr int kHeadDimV = Dv;
  static constexpr int kConsumerWGs = 2;
  static constexpr int kRowsPerWG = 64;  // wgmma.m64nNk16
  static constexpr int kBlockM = kConsumerWGs * kRowsPerWG;
  static constexpr int kBlockN = Dqk == 256 ? 64 : 128;
  static constexpr int kStages = 2;
  static constexpr int kThreads = (1 + kConsumerWGs) * 128;
  // setmaxnreg budgets: 128·(kProducerRegs + kConsumerWGs·kConsumerRegs) ≤ 65536.
  static constexpr int kProducerRegs = 24;
  static constexpr int kConsumerRegs = 240;

  // Shared memory: every tile is stored as Dim/64 column blocks of [rows][64] 16-bit elements,
  // rows of 128 bytes, TMA's 128-byte swizzle; each block starts 1024-byte aligned.
  static constexpr int kQBlocks = Dqk / 64, kVBlocks = Dv / 64;
  static constexpr size_t kQBlockBytes = size_t(kBlockM) * 128;
  static constexpr size_t kKVBlockBytes = size_t(kBlockN) * 128;
  static constexpr size_t kQBytes = kQBlocks * kQBlockBytes;
  static constexpr size_t kKBytes = kQBlocks * kKVBlockBytes;
  static constexpr size_t kVBytes = kVBlocks * kKVBlockBytes;
  static constexpr size_t kOffQ = 0;
  static constexpr size_t kOffK = kOffQ + kQBytes;
  static constexpr size_t kOffV = kOffK + kStages * kKBytes;
  static constexpr size_t kOffBar = kOffV + kStages * kVBytes;
  static constexpr int kBarriers = 1 + 4 * kStages;  // Q full; K full/empty, V full/empty per stage
  // + 1024: the dynamic shared-memory base is only 16-byte aligned; the kernel rounds it up.
  static constexpr size_t kSmemBytes = kOffBar + kBarriers * 8 + 1024;

  static constexpr int kSRegs = kBlockN / 2, kPRegs = kBlockN / 4, kORegs = Dv / 2;

  static_assert((Dqk == 64 || Dqk == 128 || Dqk == 256) ? Dv == Dqk : (Dqk == 192 && Dv == 128),
                "compiled head dims: Dqk = Dv in {64, 128, 256}, and Dqk = 192 with Dv = 128");
  static_assert(kBlockN % 16 == 0 && kBlockN >= 64 && kBlockN <= 256, "wgmma N: multiple of 16 (P·V k-steps), at most 256");
  static_assert(kBlockM <= 256 && kBlockN <= 256, "a TMA box has at most 256 rows");
  static_assert(kQBlockBytes % 1024 == 0 && kKVBlockBytes % 1024 == 0, "swizzle pattern anchored at 1024 bytes");
  static_assert(kSRegs + kPRegs + kORegs <= 180, "S, P and O must leave room for the rest in 240 registers");
  static_assert(128 * (kProducerRegs + kConsumerWGs * kConsumerRegs) <= 65536, "register file");
  static_assert(kSmemBytes <= 227 * 1024, "fits Hopper's 227 KB of shared memory per block");
  static_assert(kKVBlockBytes / 16 < (1 << 14), "LBO of V's descriptor fits its 14-bit field");
};

}  // namespace flashcheck::kernels
