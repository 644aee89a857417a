// wgmma_f16's epilogue for one consumer warpgroup: normalise O, round it to the input type, stage
// it in shared memory so that global stores are whole 16-byte chunks of a row, and write LSE.
#pragma once
#include <cmath>
#include <cstdint>

#include "gpu/common/params.h"
#include "gpu/wgmma_f16/barrier.cuh"
#include "gpu/wgmma_f16/mainloop.cuh"
#include "gpu/wgmma_f16/smem.cuh"
#include "gpu/wgmma_f16/softmax.cuh"

namespace flashcheck::kernels {

// The staging area is this warpgroup's own 64 rows of the Q tile (64·cw .. 64·cw + 63 of each
// column block): only this warpgroup's S GEMMs read them, and all of those have completed. It keeps
// Q's 128-byte swizzle (chunk c of row r at c ^ (r % 8)), so the quad of lanes writing one row
// and the 8 rows of a warp's store land in 8 different bank groups. Rows past seq_q are not stored.
template <class T, bool kBf16>
__device__ __forceinline__ void wgmma_epilogue(const WgmmaSmem<T>& sm, const FwdParams& p, const RowState<T>& st, int cw,
                                               int q0, int h, int b, int warp, int lane, int tid_wg) {
  constexpr int Dv = T::kHeadDimV;
  uint8_t* stage = sm.q() + cw * 64 * 128;
  const int row_wg = q0 + 64 * cw;
  const size_t bh = static_cast<size_t>(b) * p.heads_q + h;
  float* lse = p.lse ? p.lse + bh * p.seq_q : nullptr;
#ifdef FLASHCHECK_PERTURB
  perturb::on_access(perturb::kResO);
#endif
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const float lt = softmax::quad_sum(st.l[hf]);
    const float inv = lt > 0.0f ? 1.0f / lt : 0.0f;  // a row with no visible key: O = 0, never 0/0
    const int r = 16 * warp + (lane >> 2) + 8 * hf;  // row within the warpgroup
#pragma unroll
    for (int j = 0; j < Dv / 8; ++j) {  // columns 8j + 2·(lane % 4) + {0,1}: chunk j % 8 of block j / 8
      const uint32_t v = softmax::pack2<kBf16>(st.o[4 * j + 2 * hf] * inv, st.o[4 * j + 2 * hf + 1] * inv);
      *reinterpret_cast<uint32_t*>(stage + (j / 8) * T::kQBlockBytes + r * 128 + (((j % 8) ^ (r & 7)) << 4) +
                                   (lane & 3) * 4) = v;
    }
    const int row = row_wg + r;
    if (lse && (lane & 3) == 0 && row < p.seq_q)
      // -inf only for a row that saw no key (lt = 0): a NaN sum (NaN or +Inf inputs) stays NaN.
      lse[row] = lt == 0.0f ? -INFINITY : (st.m[hf] * p.scale * 1.4426950408889634f + log2f(lt)) * 0.6931471805599453f;
  }
  sync::named_sync(kBarEpilogue + cw, 128);
  uint16_t* O = static_cast<uint16_t*>(p.o) + bh * p.seq_q * Dv;
  constexpr int kChunks = Dv / 8;  // 16-byte chunks per output row
  static_assert(64 * kChunks % 128 == 0, "whole passes of the warpgroup");
#pragma unroll
  for (int k = 0; k < 64 * kChunks / 128; ++k) {
    const int i = tid_wg + 128 * k, r = i / kChunks, c = i % kChunks;
    const int row = row_wg + r;
    if (row < p.seq_q)
      *reinterpret_cast<uint4*>(O + static_cast<size_t>(row) * Dv + c * 8) = *reinterpret_cast<const uint4*>(
          stage + (c / 8) * T::kQBlockBytes + r * 128 + (((c % 8) ^ (r & 7)) << 4));
  }
}

}  // namespace flashcheck::kernels
