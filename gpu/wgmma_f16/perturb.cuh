// wgmma_f16's part of the perturbed build (gpu/common/perturb.h): which barrier releases which ring
// slot, the producer's poisoning of a released slot, and the S GEMM's stretch. Empty unless
// compiled with -DFLASHCHECK_PERTURB (and, being inside that #ifdef, never mutated by
// tools/mutate: it is instrumentation, not the kernel).
#pragma once
#ifdef FLASHCHECK_PERTURB
#include <cstdint>

#include "gpu/common/perturb.cuh"
#include "gpu/wgmma_f16/smem.cuh"
#include "gpu/wgmma_f16/wgmma.cuh"

namespace flashcheck::kernels::perturb {

// Thread 0, in the kernel's initialisation (before __syncthreads).
template <class T>
__device__ __forceinline__ void init_wgmma(const WgmmaSmem<T>& sm, const Config& c) {
  static_assert(T::kStages <= kMaxStages, "the tracker follows at most kMaxStages stages");
  init(c);
  for (int s = 0; s < T::kStages; ++s) {
    guard(2 * s, sm.k_empty(s), sm.k(s), slot_resource(s, false));
    guard(2 * s + 1, sm.v_empty(s), sm.v(s), slot_resource(s, true));
  }
}

// The producer thread, right after the empty barrier of a slot completed (every consumer released
// it) and before it issues the refill: NaN over the whole slot, then the async-proxy fence that
// orders these generic writes before the TMA writes that follow (a correct kernel then reads only
// the refill). Written in the order the GEMMs read last-first, so that a wgmma still reading
// (a release before its wait) meets NaN as early as possible:
//  * K (B of S = Q·Kᵀ, K-major): k-slice ks reads 32 bytes of every row of column block ks / 4,
//    so the last column block, its last 32-byte slice first;
//  * V (B of P·V, MN-major): 16-key slice kk reads rows 16kk.. of every column block, so the last
//    rows first.
// A swizzled row keeps its 16-byte chunk c at c ^ (row % 8); every byte is written either way.
template <class T>
__device__ __forceinline__ void poison_k(const WgmmaSmem<T>& sm, int stage) {
  if (!on(kPoison)) return;
  uint8_t* slot = sm.k(stage);
  for (int blk = T::kQBlocks - 1; blk >= 0; --blk)
    for (int sl = 3; sl >= 0; --sl)
      for (int r = 0; r < T::kBlockN; ++r) {
        uint8_t* row = slot + blk * T::kKVBlockBytes + r * 128;
        poison16(row + (((2 * sl) ^ (r & 7)) << 4));
        poison16(row + (((2 * sl + 1) ^ (r & 7)) << 4));
      }
  fence_async_shared();
}
template <class T>
__device__ __forceinline__ void poison_v(const WgmmaSmem<T>& sm, int stage) {
  if (!on(kPoison)) return;
  uint8_t* slot = sm.v(stage);
  for (int r = T::kBlockN - 1; r >= 0; --r)
    for (int blk = 0; blk < T::kVBlocks; ++blk)
      for (int c = 0; c < 8; ++c) poison16(slot + blk * T::kKVBlockBytes + r * 128 + c * 16);
  fence_async_shared();
}

// Ahead of S = Q·Kᵀ's own wgmmas (in the same group): up to 32 copies of its first one. Each
// overwrites s (scale_d = 0) and the GEMM's first wgmma overwrites it again, so S is bit-identical;
// meanwhile the GEMM's reads of the K slot happen later after its issue — the window in which a
// slot released too early is refilled (or poisoned) under it. Every thread of the warpgroup draws
// the same count (draw_warp with the warpgroup as group), as wgmma is warpgroup-collective.
template <class T, bool kBf16>
__device__ __forceinline__ void stretch_qk(float (&s)[T::kSRegs], uint64_t desc_q, uint64_t desc_k) {
  const uint32_t x = draw_warp(kSiteStretch, threadIdx.x / 128);
  const int n = on(kStretch) && (x & 1) == 0 ? 1 + static_cast<int>((x >> 1) & 31) : 0;
  for (int i = 0; i < n; ++i) wgmma::WgmmaOp<T::kBlockN, kBf16>::ss(s, desc_q, desc_k, 0);
}

// The start address a shared-memory matrix descriptor points at (wgmma.cuh's make_desc, bits 0-13).
__device__ __forceinline__ uint32_t desc_addr(uint64_t desc) { return static_cast<uint32_t>(desc & 0x3FFFu) << 4; }

}  // namespace flashcheck::kernels::perturb
#endif
