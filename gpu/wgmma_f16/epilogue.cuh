// wgmma_f16's epilogue for one consumer warpgroup: normalise O, round it to the input type, stage
// it in shared memory so that global stores are whole 16-byte chunks of a row, and write LSE.
#pragma once
#include <cmath>
#include <cstdint>

#include "gpu/common/params.h"
#include "gpu/common/row_end.cuh"
#include "gpu/wgmma_f16/place.cuh"
#include "gpu/wgmma_f16/barrier.cuh"
#include "gpu/wgmma_f16/mainloop.cuh"
#include "gpu/wgmma_f16/smem.cuh"
#include "gpu/wgmma_f16/softmax.cuh"
#include "gpu/wgmma_f16/staged_store.cuh"

namespace flashcheck::kernels {

// The staging area (staged_store.cuh) is this warpgroup's own 64 rows of the Q tile (64·cw ..
// 64·cw + 63 of each column block): only this warpgroup's S GEMMs read them, and all of those have
// completed; it keeps Q's 128-byte swizzle. Rows past the sequence's queries are not stored; a sink
// joins each row's denominator here (gpu/common/row_end.cuh).
template <class T, bool kBf16, class Pol>
__device__ __forceinline__ void wgmma_epilogue(const WgmmaSmem<T>& sm, const typename Pol::Params& p, const CtaPlace& c,
                                               const RowState<T>& st, float sl2, int cw, int warp, int lane, int tid_wg) {
  constexpr int Dv = T::kHeadDimV;
  uint8_t* stage = sm.q() + cw * 64 * 128;
  const int row_wg = c.q0 + 64 * cw;
  const OutRows out = Pol::Place::template out<Dv>(p, c);
  // A sink logit (per query head, natural units) joins each row's denominator, in log2 units.
  float sink2 = -INFINITY;
  if constexpr (Pol::kVariant)
    if (p.sinks) sink2 = p.sinks[c.h] * 1.4426950408889634f;
#ifdef FLASHCHECK_PERTURB
  perturb::on_access(perturb::kResO);
#endif
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const RowEnd end = end_row<Pol::kVariant>(softmax::quad_sum(st.l[hf]), st.m[hf] * sl2, sink2);
    const int r = 16 * warp + (lane >> 2) + 8 * hf;  // row within the warpgroup
#pragma unroll
    for (int j = 0; j < Dv / 8; ++j) {  // columns 8j + 2·(lane % 4) + {0,1}: chunk j % 8 of block j / 8
      *staged_pair<T::kQBlockBytes>(stage, r, j, lane) =
          softmax::pack2<kBf16>(st.o[4 * j + 2 * hf] * end.inv, st.o[4 * j + 2 * hf + 1] * end.inv);
    }
    const int row = row_wg + r;
    if (out.lse && (lane & 3) == 0 && row < c.sq) out.lse[static_cast<size_t>(row) * out.ld_lse] = end.lse;
  }
  sync::named_sync(kBarEpilogue + cw, 128);
  store_staged_rows<Dv, T::kQBlockBytes>(stage, out, row_wg, c.sq, tid_wg);
}

}  // namespace flashcheck::kernels
