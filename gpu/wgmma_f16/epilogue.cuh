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

namespace flashcheck::kernels {

// The staging area is this warpgroup's own 64 rows of the Q tile (64·cw .. 64·cw + 63 of each
// column block): only this warpgroup's S GEMMs read them, and all of those have completed. It keeps
// Q's 128-byte swizzle (chunk c of row r at c ^ (r % 8)), so the quad of lanes writing one row
// and the 8 rows of a warp's store land in 8 different bank groups. Rows past the sequence's
// queries are not stored; a sink joins each row's denominator here (gpu/common/row_end.cuh).
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
      const uint32_t v = softmax::pack2<kBf16>(st.o[4 * j + 2 * hf] * end.inv, st.o[4 * j + 2 * hf + 1] * end.inv);
      *reinterpret_cast<uint32_t*>(stage + (j / 8) * T::kQBlockBytes + r * 128 + (((j % 8) ^ (r & 7)) << 4) +
                                   (lane & 3) * 4) = v;
    }
    const int row = row_wg + r;
    if (out.lse && (lane & 3) == 0 && row < c.sq) out.lse[static_cast<size_t>(row) * out.ld_lse] = end.lse;
  }
  sync::named_sync(kBarEpilogue + cw, 128);
  constexpr int kChunks = Dv / 8;  // 16-byte chunks per output row
  static_assert(64 * kChunks % 128 == 0, "whole passes of the warpgroup");
#pragma unroll
  for (int k = 0; k < 64 * kChunks / 128; ++k) {
    const int i = tid_wg + 128 * k, r = i / kChunks, ch = i % kChunks;
    const int row = row_wg + r;
    if (row < c.sq)
      *reinterpret_cast<uint4*>(out.o + static_cast<size_t>(row) * out.ld_o + ch * 8) = *reinterpret_cast<const uint4*>(
          stage + (ch / 8) * T::kQBlockBytes + r * 128 + (((ch % 8) ^ (r & 7)) << 4));
  }
}

}  // namespace flashcheck::kernels
