// Where one wgmma_f16 CTA's rows live: its sequence, head and q-tile, the sequence's lengths, and
// the TMA coordinates of the sequence's first query and key rows. Two policies, as mma_f16's
// block_rows.cuh:
//   DensePlace  plain problems: BHSD on a (q-tile, head, batch) grid, maps of shape (D, S, H, B);
//   VarPlace    problem model 2: maps over any row strides (BHSD, BSHD: (D, S, H, B); packed THD:
//               (D, tokens, H, 1), a sequence's rows from its first token on), keys used per
//               sequence (seqused_kv), and packed batches scheduled over their q-tiles alone.
// Every thread computes its CTA's place itself (a few cached loads; the packed search is per warp).
#pragma once
#include <cstdint>

#include "gpu/common/packed_tiles.cuh"
#include "gpu/common/params.h"
#include "gpu/common/var_params.h"

namespace flashcheck::kernels {

// Where a CTA's output rows go: row r of the sequence at o + r·ld_o and lse + r·ld_lse.
struct OutRows {
  uint16_t* o;
  size_t ld_o;
  float* lse;  // null: no LSE asked for
  size_t ld_lse;
};

struct CtaPlace {
  int b, h, hk;     // sequence, query head, its KV head
  int q0, sq, skv;  // first query row of the CTA, the sequence's queries and keys used
  int q_row, k_row; // TMA row coordinate of the sequence's query 0 and key 0
  int tma_b;        // TMA batch coordinate
};

template <int BM>
struct DensePlace {
  using Params = FwdParams;
  __device__ __forceinline__ static bool locate(const FwdParams& p, int /*lane*/, CtaPlace& c) {
    // Causal blocks near the bottom of the sequence do the most work: launch them first.
    const int q_tile = p.causal ? static_cast<int>(gridDim.x) - 1 - static_cast<int>(blockIdx.x) : static_cast<int>(blockIdx.x);
    c.b = blockIdx.z, c.h = blockIdx.y, c.hk = c.h / (p.heads_q / p.heads_kv);
    c.q0 = q_tile * BM, c.sq = p.seq_q, c.skv = p.seq_kv;
    c.q_row = 0, c.k_row = 0, c.tma_b = c.b;
    return true;
  }
  template <int Dv>
  __device__ __forceinline__ static OutRows out(const FwdParams& p, const CtaPlace& c) {
    const size_t bh = static_cast<size_t>(c.b) * p.heads_q + c.h;
    return {static_cast<uint16_t*>(p.o) + bh * p.seq_q * Dv, Dv, p.lse ? p.lse + bh * p.seq_q : nullptr, 1};
  }
};

template <int BM>
struct VarPlace {
  using Params = VarParams;
  // false: this CTA has no q-tile (a packed batch's grid is exact, so only for malformed lengths).
  __device__ __forceinline__ static bool locate(const VarParams& p, int lane, CtaPlace& c) {
    const FwdParams& f = p.base;
    const int target = f.causal ? static_cast<int>(gridDim.x) - 1 - static_cast<int>(blockIdx.x) : static_cast<int>(blockIdx.x);
    c.h = blockIdx.y, c.hk = c.h / (f.heads_q / f.heads_kv);
    int q_tile = target;
    if (p.cu_seqlens_q) {
      if (!find_packed_tile<BM>(p.cu_seqlens_q, f.batch, target, lane, c.b, q_tile)) return false;
      c.q_row = p.cu_seqlens_q[c.b], c.k_row = p.cu_seqlens_kv[c.b], c.tma_b = 0;
      c.sq = p.cu_seqlens_q[c.b + 1] - c.q_row;
      c.skv = p.cu_seqlens_kv[c.b + 1] - c.k_row;
    } else {
      c.b = blockIdx.z, c.q_row = 0, c.k_row = 0, c.tma_b = c.b;
      c.sq = f.seq_q, c.skv = f.seq_kv;
    }
    if (p.seqused_kv) c.skv = p.seqused_kv[c.b];  // keys past it (NaN in the harness) are zeroed, never used
    c.q0 = q_tile * BM;
    return true;
  }
  // The sequence's first row: token q_row of a packed tensor (outer unused), else outer index b.
  __device__ __forceinline__ static size_t row0(const RowStrides3& s, bool packed, const CtaPlace& c) {
    return packed ? static_cast<size_t>(c.q_row) * static_cast<size_t>(s.seq) : static_cast<size_t>(c.b) * static_cast<size_t>(s.outer);
  }
  template <int Dv>
  __device__ __forceinline__ static OutRows out(const VarParams& p, const CtaPlace& c) {
    const bool packed = p.cu_seqlens_q != nullptr;
    uint16_t* o = static_cast<uint16_t*>(p.base.o) + row0(p.o, packed, c) + static_cast<size_t>(c.h) * p.o.head;
    float* lse = p.base.lse ? p.base.lse + row0(p.lse, packed, c) + static_cast<size_t>(c.h) * p.lse.head : nullptr;
    return {o, static_cast<size_t>(p.o.seq), lse, static_cast<size_t>(p.lse.seq)};
  }
};

}  // namespace flashcheck::kernels
