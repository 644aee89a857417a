// The Vᵀ copy that wgmma_e4m3's P·V reads. fp8 wgmma takes both operands K-major, so B of
// O += P·V must hold V transposed (keys contiguous per head-dim row). FlashAttention 3 transposes
// tiles in shared memory inside the kernel; this first version writes Vᵀ once per launch instead
// ([B, Hkv, Dv, Skv16], Skv16 = Skv rounded up to 16: one pass over V, ~2% of a long sequence's time).
//
// The copy also permutes keys within each aligned group of 16 (vt_layout.h), so that P needs no
// shuffle between the two GEMMs: the sum over k does not care which key sits at which k position as
// long as P and Vᵀ agree. Keys past Skv are written as 0: P is 0 there (masked), and 0·NaN would
// otherwise poison O.
#pragma once
#include <cstdint>

#include "gpu/wgmma_e4m3/vt_layout.h"

namespace flashcheck::kernels {

// One block per 64 keys of one (batch, KV head): V's 64 rows staged in shared memory (coalesced
// 16-byte loads), then Vᵀ written as 32-bit words of four positions (64 contiguous bytes per row).
template <int D>
__global__ void __launch_bounds__(256) transpose_v_kernel(const uint8_t* __restrict__ v, uint8_t* __restrict__ vt,
                                                          int heads_kv, int skv, int skv16) {
  constexpr int kKeys = 64, kPitch = D + 16;  // + 16: rows stay 16-byte aligned, banks shift by 4
  __shared__ __align__(16) uint8_t tile[kKeys * kPitch];
  const int k0 = blockIdx.x * kKeys;
  const size_t bh = static_cast<size_t>(blockIdx.z) * heads_kv + blockIdx.y;
  const uint8_t* src = v + bh * static_cast<size_t>(skv) * D;
  for (int i = threadIdx.x; i < kKeys * (D / 16); i += blockDim.x) {
    const int r = i / (D / 16), ch = i % (D / 16), key = k0 + r;
    const uint4 x = key < skv ? *reinterpret_cast<const uint4*>(src + static_cast<size_t>(key) * D + 16 * ch)
                              : make_uint4(0, 0, 0, 0);
    *reinterpret_cast<uint4*>(tile + r * kPitch + 16 * ch) = x;
  }
  __syncthreads();
  uint8_t* dst = vt + bh * static_cast<size_t>(D) * skv16;
  for (int i = threadIdx.x; i < D * (kKeys / 4); i += blockDim.x) {
    const int d = i / (kKeys / 4), w = i % (kKeys / 4), p0 = 4 * w;  // positions p0 .. p0 + 3
    if (k0 + p0 >= skv16) continue;                                   // skv16 % 16 == 0: whole words
    uint32_t word = 0;
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const int q = (p0 + b) & 15, key = (p0 + b - q) + vt_key_of_position(q);
      word |= static_cast<uint32_t>(tile[key * kPitch + d]) << (8 * b);
    }
    *reinterpret_cast<uint32_t*>(dst + static_cast<size_t>(d) * skv16 + k0 + p0) = word;
  }
}

}  // namespace flashcheck::kernels
