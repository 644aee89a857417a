// The score modifiers on one wgmma S tile, for a consumer thread's two rows (accumulator layout in
// wgmma.cuh: half hf ∈ {0,1} of the thread in s[4j + 2hf + {0,1}], keys 8j + 2·(lane % 4) + {0,1}),
// in FlashAttention's order: softcap on every score, the mask on edge tiles only, ALiBi on every
// score (a masked −inf stays −inf). Scores stay raw (the dot product, or with a softcap its tanh)
// until the online softmax's exponent multiplies them by sl2. The policy's types (policy.h) pick
// what runs: a plain problem compiles only the prefix mask it always had.
#pragma once
#include <cmath>

#include "gpu/common/score_mod.cuh"
#include "gpu/common/variant_mask.cuh"
#include "gpu/wgmma_f16/place.cuh"

namespace flashcheck::kernels {

template <class Pol, int BN>
struct TileScores {
  using Mask = typename Pol::Mask;
  typename Mask::Row vis[2];  // the keys of the thread's rows row0 and row0 + 8
  int all_lo, all_hi;         // keys every valid row of the warpgroup sees: tiles inside need no mask
  int skv;
  typename Pol::Softcap cap;
  typename Pol::Bias bias;
  int i_plus_d;               // ALiBi: row0 + d, d the alignment offset (0 top_left, else skv − sq)
  float sl2;                  // raw score → log2 units

  // row_wg: the warpgroup's first row (64 rows), row0: the thread's first row.
  __device__ __forceinline__ TileScores(const typename Pol::Params& p, const CtaPlace& c, int row_wg, int row0) {
    const Mask mask = make_mask<Mask>(p, c.sq, c.skv);
    vis[0] = mask.row(row0);
    vis[1] = mask.row(row0 + 8);
    // Visibility bounds are monotone in the row, so the warpgroup's rows share [lo(last), hi(first)).
    // Rows past sq compute on rows nobody stores and only need to stay finite: no row valid, every
    // tile is an edge tile and every key hidden.
    const TileRange r = row_wg < c.sq ? mask.template trip<BN>(row_wg, min(row_wg + 63, c.sq - 1)) : TileRange{0, 0, 0, 0};
    all_lo = r.all_lo, all_hi = r.all_hi;
    skv = c.skv;
    const FwdParams& f = fwd_of(p);
    if constexpr (Pol::kVariant) {
      sl2 = p.sl2;
      if constexpr (Pol::Softcap::kOn) cap = {p.softcap_x, p.softcap_exp};
      if constexpr (Pol::Bias::kOn) {
        bias.neg_slope = -p.alibi_slopes[p.alibi_per_batch ? c.b * f.heads_q + c.h : c.h] / p.alibi_unit;
        i_plus_d = row0 + (f.causal == 1 ? 0 : c.skv - c.sq);
      }
    } else {
      sl2 = f.scale * 1.4426950408889634f;  // scale · log2(e)
    }
  }

  // Tile whose first key is k0, its scores in s.
  template <int kRegs>
  __device__ __forceinline__ void apply(float (&s)[kRegs], int k0, int lane) const {
    if constexpr (Pol::Softcap::kOn) {
#pragma unroll
      for (int i = 0; i < kRegs; ++i) s[i] = cap(s[i]);
    }
    if (Mask::template edge<BN>(k0, skv, all_lo, all_hi)) {
      // Keys this row may not see become −inf (exp2(−inf) = 0: no weight in ℓ or P·V).
      const int key0 = k0 + 2 * (lane & 3);
#pragma unroll
      for (int j = 0; j < kRegs / 4; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (Mask::hidden(vis[e >> 1], key0 + 8 * j + (e & 1))) s[4 * j + e] = -INFINITY;
    }
    if constexpr (Pol::Bias::kOn) {
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const float base = Pol::Bias::row_base(i_plus_d + 8 * hf, k0, lane);
#pragma unroll
        for (int j = 0; j < kRegs / 4; ++j)
#pragma unroll
          for (int c = 0; c < 2; ++c) s[4 * j + 2 * hf + c] = bias.add(s[4 * j + 2 * hf + c], base, 8 * j + c);
      }
    }
  }
};

}  // namespace flashcheck::kernels
