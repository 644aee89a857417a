// Which sequence a CTA of a packed (THD) batch computes. Such a grid has one CTA per q-tile of all
// sequences together, tiles of one sequence consecutive, none for the tiles a padded
// (max_seqlen_q, B) grid would add. Shared by the variant kernels (mma_f16, wgmma_f16).
#pragma once
#include <cstdint>

namespace flashcheck::kernels {

// Each warp finds the sequence itself: 32 sequences per step, their tile counts summed by a warp
// prefix sum, the first lane whose running total passes `target`. Reads B + 1 cached ints per warp;
// no shared memory, no barrier. Every lane of the warp calls it and gets the same answer: false
// when `target` is past the last tile (malformed lengths), else the sequence b and its q-tile.
template <int BM>
__device__ __forceinline__ bool find_packed_tile(const int32_t* cu_seqlens_q, int batch, int target, int lane, int& b,
                                                 int& q_tile) {
  int before = 0;
  for (int base = 0; base < batch; base += 32) {
    const int i = base + lane;
    const int n = i < batch ? (cu_seqlens_q[i + 1] - cu_seqlens_q[i] + BM - 1) / BM : 0;
    int incl = n;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, incl, o);
      if (lane >= o) incl += y;
    }
    const int total = __shfl_sync(0xffffffffu, incl, 31);
    if (target < before + total) {  // uniform: target, before and total are the same in every lane
      const int src = __ffs(__ballot_sync(0xffffffffu, before + incl > target)) - 1;
      b = base + src;
      q_tile = target - before - __shfl_sync(0xffffffffu, incl - n, src);
      return true;
    }
    before += total;
  }
  return false;
}

}  // namespace flashcheck::kernels
