// Where one CTA's rows live: which sequence, head and q-tile it computes, that sequence's lengths,
// and the first row and row stride of its q, k, v, o and lse. Two policies:
//   DenseRows    plain problems: contiguous BHSD on a (q-tile, head, batch) grid, every stride a
//                compile-time constant (the addressing mma_f16 always had, instruction for instruction);
//   StridedRows  problem model 2: any row strides (BHSD, BSHD, THD views), keys used per sequence
//                (seqused_kv), and packed batches scheduled over their q-tiles alone.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "gpu/common/packed_tiles.cuh"
#include "gpu/common/params.h"
#include "gpu/common/var_params.h"

namespace flashcheck::kernels {

// A row stride known only at run time (elements; the host checked it fits an int), as its own type
// so that load_tile (mainloop.cuh) picks its stepping copy loop at compile time.
struct RowStride {
  int elems;
};

// What the main loop and the epilogue read of a CTA's place, after the prologue. The plain policy
// keeps it in registers: every field is a kernel parameter (the constant bank) or derived from the
// block index, which the compiler rematerialises for free. A variant CTA's lengths come from
// global memory (cu_seqlens, seqused_kv) and its window bounds from them; kept in registers they
// would cost the main loop registers it does not have (the plain kernel uses 255 of 255, and the
// variant kernels spilled up to 136 bytes), so thread 0 parks them in shared memory past the tiles
// and every use after the first barrier reads them there: a few shared loads per KV tile.
struct CtaScalars {
  int b, q0, sq, skv;       // sequence, first query row, its queries and keys used
  int kv_begin;             // first KV tile visited
  int all_lo, all_hi;       // keys every row of the q-tile sees (variant_mask.cuh: edge tiles)
  int d;                    // alignment offset (ALiBi)
};
inline constexpr int kCtaScalarBytes = static_cast<int>(sizeof(CtaScalars));
static_assert(kCtaScalarBytes % 16 == 0, "the scalars keep whatever follows them 16-byte aligned");

template <int D, int BM>
struct DenseRows {
  using Params = FwdParams;
  int q0, h, b, hk, sq, skv;
  size_t head_rows;  // rows of q, o and lse before this (batch, head): (b·Hq + h)·Sq
  const uint16_t* q;
  const uint16_t* k;
  const uint16_t* v;
  // Row strides: the constant D, folded into every offset.
  static constexpr int ld_q(const FwdParams&) { return D; }
  static constexpr int ld_k(const FwdParams&) { return D; }
  static constexpr int ld_v(const FwdParams&) { return D; }
  static constexpr int ld_o(const FwdParams&) { return D; }

  // Causal blocks near the bottom of the sequence do the most work: launch them first.
  __device__ __forceinline__ bool init(const FwdParams& p, int /*lane*/) {
    const int q_tile = p.causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
    q0 = q_tile * BM, h = blockIdx.y, b = blockIdx.z;
    hk = h / (p.heads_q / p.heads_kv);
    sq = p.seq_q, skv = p.seq_kv;
    head_rows = (static_cast<size_t>(b) * p.heads_q + h) * p.seq_q;
    q = static_cast<const uint16_t*>(p.q) + head_rows * D;
    k = static_cast<const uint16_t*>(p.k) + (static_cast<size_t>(b) * p.heads_kv + hk) * p.seq_kv * D;
    v = static_cast<const uint16_t*>(p.v) + (static_cast<size_t>(b) * p.heads_kv + hk) * p.seq_kv * D;
    return true;
  }
  __device__ __forceinline__ uint16_t* o(const FwdParams& p, int /*b: this->b*/) const {
    return static_cast<uint16_t*>(p.o) + (static_cast<size_t>(b) * p.heads_q + h) * p.seq_q * D;
  }
  __device__ __forceinline__ float* lse(const FwdParams& p, int /*b: this->b*/) const {
    return p.lse ? p.lse + head_rows : nullptr;
  }
  __device__ __forceinline__ static float* lse_row(const FwdParams&, float* lse, int row) { return lse + row; }
};

template <int D, int BM>
struct StridedRows {
  using Params = VarParams;
  int q0, h, b, hk, sq, skv;
  const uint16_t* q;
  const uint16_t* k;
  const uint16_t* v;
  // Row (position) strides in elements, read from the kernel parameters where they are used:
  // parameters live in the constant bank, so the strides take no register in the main loop, where
  // the plain kernel already uses all 255 (the host checked they fit an int).
  __device__ __forceinline__ static RowStride ld_q(const VarParams& p) { return {static_cast<int>(p.q.seq)}; }
  __device__ __forceinline__ static RowStride ld_k(const VarParams& p) { return {static_cast<int>(p.k.seq)}; }
  __device__ __forceinline__ static RowStride ld_v(const VarParams& p) { return {static_cast<int>(p.v.seq)}; }
  __device__ __forceinline__ static int ld_o(const VarParams& p) { return static_cast<int>(p.o.seq); }

  // false: this CTA has no q-tile (a packed batch's grid is exact, so only for malformed lengths).
  __device__ __forceinline__ bool init(const VarParams& p, int lane) {
    const FwdParams& f = p.base;
    const int target = f.causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
    h = blockIdx.y;
    hk = h / (f.heads_q / f.heads_kv);
    int q_tile = target;
    size_t q_tok = 0, k_tok = 0;  // first token of the sequence (packed), else 0
    if (p.cu_seqlens_q) {
      // A packed batch: the CTA's sequence and q-tile from cu_seqlens_q (packed_tiles.cuh).
      if (!find_packed_tile<BM>(p.cu_seqlens_q, f.batch, target, lane, b, q_tile)) return false;
      q_tok = static_cast<size_t>(p.cu_seqlens_q[b]);
      k_tok = static_cast<size_t>(p.cu_seqlens_kv[b]);
      sq = p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b];
      skv = p.cu_seqlens_kv[b + 1] - p.cu_seqlens_kv[b];
    } else {
      b = blockIdx.z;
      sq = f.seq_q;
      skv = f.seq_kv;
    }
    if (p.seqused_kv) skv = p.seqused_kv[b];  // keys past it (NaN in the harness) are never read
    q0 = q_tile * BM;
    const bool packed = p.cu_seqlens_q != nullptr;
    q = static_cast<const uint16_t*>(f.q) + row0(p.q, packed, q_tok, b) + static_cast<size_t>(h) * p.q.head;
    k = static_cast<const uint16_t*>(f.k) + row0(p.k, packed, k_tok, b) + static_cast<size_t>(hk) * p.k.head;
    v = static_cast<const uint16_t*>(f.v) + row0(p.v, packed, k_tok, b) + static_cast<size_t>(hk) * p.v.head;
    return true;
  }
  // The first row of sequence b: token tok of a packed tensor (outer unused), else outer index b.
  __device__ __forceinline__ static size_t row0(const RowStrides3& s, bool packed, size_t tok, int b) {
    return packed ? tok * static_cast<size_t>(s.seq) : static_cast<size_t>(b) * static_cast<size_t>(s.outer);
  }
  // Outputs are addressed in the epilogue alone, from the sequence b parked in shared memory
  // (cu_seqlens_q[b] read again there, from cache): nothing about them stays live in the main loop.
  __device__ __forceinline__ static size_t out_row0(const VarParams& p, const RowStrides3& s, int b) {
    const bool packed = p.cu_seqlens_q != nullptr;
    return row0(s, packed, packed ? static_cast<size_t>(p.cu_seqlens_q[b]) : 0, b);
  }
  __device__ __forceinline__ uint16_t* o(const VarParams& p, int b) const {
    return static_cast<uint16_t*>(p.base.o) + out_row0(p, p.o, b) + static_cast<size_t>(h) * p.o.head;
  }
  __device__ __forceinline__ float* lse(const VarParams& p, int b) const {
    return p.base.lse ? p.base.lse + out_row0(p, p.lse, b) + static_cast<size_t>(h) * p.lse.head : nullptr;
  }
  __device__ __forceinline__ static float* lse_row(const VarParams& p, float* lse, int row) {
    return lse + static_cast<size_t>(row) * static_cast<size_t>(p.lse.seq);
  }
};

}  // namespace flashcheck::kernels
