// wgmma_e4m3's epilogue for one consumer warpgroup: O normalised and multiplied by V's descale,
// rounded to the 16-bit output type, staged in the warpgroup's rows of the O area and stored in
// whole 16-byte chunks (staged_store.cuh); LSE with the max offset taken back out.
#pragma once
#include <cmath>
#include <cstdint>

#include "gpu/common/params.h"
#include "gpu/common/row_end.cuh"
#include "gpu/wgmma_e4m3/mainloop.cuh"
#include "gpu/wgmma_e4m3/smem.cuh"
#include "gpu/wgmma_f16/barrier.cuh"
#include "gpu/wgmma_f16/place.cuh"
#include "gpu/wgmma_f16/softmax.cuh"
#include "gpu/wgmma_f16/staged_store.cuh"

namespace flashcheck::kernels {

template <class T, bool kOutBf16>
__device__ __forceinline__ void e4m3_epilogue(const E4m3Smem<T>& sm, const FwdParams& p, const CtaPlace& c,
                                              const E4m3RowState<T>& st, float sl2, float v_descale, int cw, int warp,
                                              int lane, int tid_wg) {
  constexpr int Dv = T::kHeadDimV;
  uint8_t* stage = sm.o() + cw * 64 * 128;
  const int row_wg = c.q0 + 64 * cw;
  const OutRows out = DensePlace<T::kBlockM>::template out<Dv>(p, c);
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    // ℓ and p carry 2^kE4m3PLog2 alike: O/ℓ is unchanged, and the LSE's max is taken 8 lower.
    const RowEnd end = end_row<false>(softmax::quad_sum(st.l[hf]), st.m[hf] * sl2 - kE4m3PLog2, -INFINITY);
    const float mul = end.inv * v_descale;
    const int r = 16 * warp + (lane >> 2) + 8 * hf;
#pragma unroll
    for (int j = 0; j < Dv / 8; ++j) {
      *staged_pair<T::kOBlockBytes>(stage, r, j, lane) =
          softmax::pack2<kOutBf16>(st.o[4 * j + 2 * hf] * mul, st.o[4 * j + 2 * hf + 1] * mul);
    }
    const int row = row_wg + r;
    if (out.lse && (lane & 3) == 0 && row < c.sq) out.lse[static_cast<size_t>(row) * out.ld_lse] = end.lse;
  }
  sync::named_sync(kBarEpilogue + cw, 128);
  store_staged_rows<Dv, T::kOBlockBytes>(stage, out, row_wg, c.sq, tid_wg);
}

}  // namespace flashcheck::kernels
