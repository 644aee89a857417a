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
template <int Dqk, int Dv, int BN, int WGs = 2>
struct WgmmaF16Traits {
  static constexpr int kHeadDimQK = Dqk;
  static constexpr int kHeadDimV = Dv;
  static constexpr int kConsumerWGs = WGs;
  static constexpr int kRowsPerWG = 64;  // wgmma.m64nNk16
  static constexpr int kBlockM = kConsumerWGs * kRowsPerWG;
  static constexpr int kBlockN = BN;
  static constexpr int kStages = 2;
  static constexpr int kThreads = (1 + kConsumerWGs) * 128;
  // setmaxnreg budgets: 128·(kProducerRegs + kConsumerWGs·kConsumerRegs) ≤ 65536.
  static constexpr int kProducerRegs = 24;
  static constexpr int kConsumerRegs = kConsumerWGs == 2 ? 240 : 160;

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
  static constexpr int kBarriers = 2 + 4 * kStages;  // Q full; K full/empty, V full/empty per stage; tail V
  // + 1024: the dynamic shared-memory base is only 16-byte aligned; the kernel rounds it up.
  static constexpr size_t kSmemBytes = kOffBar + kBarriers * 8 + 1024;

  static constexpr int kSRegs = kBlockN / 2, kPRegs = kBlockN / 4, kORegs = Dv / 2;
  // The softmax's exponent as one FFMA where the row maxima allow it (softmax.cuh, online): 1.4–2.6%
  // faster on five of six Dqk >= 128 shapes on an H100 (the sixth within its rounds' spread), 3%
  // slower at 64, whose three warpgroups of 160 registers take the second code path badly (PERF.md,
  // session 16).
  static constexpr bool kOneFfmaExp = Dqk >= 128;
  // O's rescale skipped for a tile where no row of the warp raised its max (corr is then exactly 1,
  // so the output is bitwise the same): +1% at (4,64,8192,128), +0.6% at (4,16,4096,256), 3.5%
  // slower at 64 (three warpgroups of 160 registers), on an H100 (PERF.md, session 20); 192 untimed.
  static constexpr bool kSkipUnchangedRescale = Dqk == 128 || Dqk == 256;

  static_assert((Dqk == 64 || Dqk == 128 || Dqk == 256) ? Dv == Dqk : (Dqk == 192 && Dv == 128),
                "compiled head dims: Dqk = Dv in {64, 128, 256}, and Dqk = 192 with Dv = 128");
  static_assert(kBlockN % 16 == 0 && kBlockN >= 64 && kBlockN <= 256, "wgmma N: multiple of 16 (P·V k-steps), at most 256");
  static_assert(kBlockM <= 256 && kBlockN <= 256, "a TMA box has at most 256 rows");
  static_assert(kQBlockBytes % 1024 == 0 && kKVBlockBytes % 1024 == 0, "swizzle pattern anchored at 1024 bytes");
  static_assert(kSRegs + kPRegs + kORegs <= kConsumerRegs - 32, "S, P and O must leave room for the rest");
  static_assert(kConsumerWGs == 2 || kConsumerWGs == 3, "register budgets for 2 or 3 consumer warpgroups");
  static_assert(128 * (kProducerRegs + kConsumerWGs * kConsumerRegs) <= 65536, "register file");
  static_assert(kSmemBytes <= 227 * 1024, "fits Hopper's 227 KB of shared memory per block");
  static_assert(kKVBlockBytes / 16 < (1 << 14), "LBO of V's descriptor fits its 14-bit field");
};

// How a consumer warpgroup orders its work on each KV tile (mainloop.cuh).
enum WgmmaSchedule : int {
  kSerial = 0,    // S_t, wait, softmax_t, P_t·V_t, wait: the tensor cores idle during softmax
  kOverlap = 1,   // issue S_{t+1} and P_t·V_t together, softmax S_{t+1} while P_t·V_t runs
  kPingPong = 2,  // kOverlap, and the warpgroups take turns (round robin) issuing GEMMs, so one's
                  // softmax runs while another's GEMMs occupy the tensor cores
};

// The tile table: tiles and schedule per (Dqk, Dv, causal), each the fastest measured on an H100
// (PERF.md, "wgmma_f16"), bf16, against the alternatives named:
//   64/64:    192-row blocks of 3 consumer warpgroups (160 registers each), N = 128, ping-pong:
//             482 TFLOPS vs 424 with 2 warpgroups and 441 with N = 192 (4,32,4096,64).
//             S 64 + P 32 + O 32 registers; 24 KB + 2 × 32 KB shared.
//   128/128:  non-causal N = 176, ping-pong: 628 vs 612 at N = 128 (4,64,8192,128);
//             causal N = 128, overlap without ping-pong: 653 vs 597 ping-pong and 629 at N = 176
//             (2,16,16384,128). S 88 + P 44 + O 64; 32 KB + 2 × 88 KB (N = 176).
//   192/128:  N = 128, ping-pong (696 vs 689 overlap). S 64 + P 32 + O 64; 48 KB + 2 × 80 KB.
//   256/256:  N = 80, ping-pong: 725 vs 677 at N = 64. S 40 + P 20 + O 128; 64 KB + 2 × 80 KB.
template <int Dqk, int Dv, bool kCausal>
struct WgmmaF16Config;
template <bool kCausal>
struct WgmmaF16Config<64, 64, kCausal> {
  using Traits = WgmmaF16Traits<64, 64, 128, 3>;
  static constexpr int kSchedule = kPingPong;
};
template <>
struct WgmmaF16Config<128, 128, false> {
  using Traits = WgmmaF16Traits<128, 128, 176>;
  static constexpr int kSchedule = kPingPong;
};
template <>
struct WgmmaF16Config<128, 128, true> {
  using Traits = WgmmaF16Traits<128, 128, 128>;
  static constexpr int kSchedule = kOverlap;
};
template <bool kCausal>
struct WgmmaF16Config<192, 128, kCausal> {
  using Traits = WgmmaF16Traits<192, 128, 128>;
  static constexpr int kSchedule = kPingPong;
};
template <bool kCausal>
struct WgmmaF16Config<256, 256, kCausal> {
  using Traits = WgmmaF16Traits<256, 256, 80>;
  static constexpr int kSchedule = kPingPong;
};

}  // namespace flashcheck::kernels
