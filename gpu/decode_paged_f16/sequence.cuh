// Where decode_paged_f16 finds one sequence's rows: its lengths, each query's visible keys (the
// causal alignments of reference/problem.h), and each key's row in the cache — through the block
// table (PagedKeys) or by position (DenseKeys). The key policy is a type, chosen on the host, so
// the main loop never branches on the layout.
#pragma once
#include <cstdint>

#include "gpu/decode_paged_f16/params.h"

namespace flashcheck::kernels {

__device__ __forceinline__ int decode_sq(const DecodeParams& p, int b) {
  return p.cu_seqlens_q ? p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b] : p.seq_q;
}
__device__ __forceinline__ int decode_skv(const DecodeParams& p, int b) {
  if (p.cache_seqlens) return p.cache_seqlens[b];
  if (p.seqused_kv) return p.seqused_kv[b];
  if (p.cu_seqlens_kv) return p.cu_seqlens_kv[b + 1] - p.cu_seqlens_kv[b];
  return p.seq_kv;
}

// Element offset of row i of head h of sequence b in q, o (or lse, width 1).
__device__ __forceinline__ int64_t query_row(const DecodeParams& p, const DecodeStrides& s, int b, int h, int i) {
  const int64_t pos = p.cu_seqlens_q ? int64_t(p.cu_seqlens_q[b]) + i : int64_t(i);
  return (p.cu_seqlens_q ? 0 : int64_t(b) * s.outer) + pos * s.seq + int64_t(h) * s.head;
}

// Keys query i sees: [0, visible_keys) — everything (none), j ≤ i (top-left) or j ≤ i + skv − sq
// (bottom-right, FlashAttention's decode alignment: the last query sees every key; rows of
// Sq > Skv past the first Sq − Skv see none).
__device__ __forceinline__ int visible_keys(int causal, int i, int sq, int skv) {
  long long n = skv;
  if (causal == 1) n = (long long)i + 1;
  else if (causal == 2) n = (long long)i + skv - sq + 1;
  return n < 0 ? 0 : (n > skv ? skv : static_cast<int>(n));
}

// Keys in a paged cache: key j of the sequence is slot j % P of page block_table[b][j / P]. Only
// entries of pages that hold keys of the range are read (entries past the last page may be
// anything; their pages are poison).
//
// kPow2: P is a power of two (16, 64, 256: the sizes caches use), and j / P, j % P are a shift and
// a mask. An integer division by a run-time P is a chain of ~20 dependent instructions per key row
// of every tile, on the copy warps' critical path: with 8 warps per SM there is too little else to
// issue while it runs, and the paged cache read 40% slower than the dense one (session 8).
template <bool kPow2>
struct PagedKeysT {
  const int32_t* table = nullptr;  // this sequence's row of the block table
  int page_size = 1, page_shift = 0;
  __device__ __forceinline__ void init(const DecodeParams& p, int b) {
    table = p.block_table + int64_t(b) * p.max_pages;
    page_size = p.page_size;
    page_shift = p.page_shift;
  }
  // (outer, seq) of key j: page and slot.
  __device__ __forceinline__ void locate(int j, int64_t& outer, int64_t& seq) const {
    if constexpr (kPow2) {
      outer = table[j >> page_shift];
      seq = j & (page_size - 1);
    } else {
      outer = table[j / page_size];
      seq = j % page_size;
    }
  }
};
using PagedKeys = PagedKeysT<false>;
using PagedKeysPow2 = PagedKeysT<true>;

// Keys of a dense cache: sequence b's rows (outer = b), or a packed one's at token cu_seqlens_kv[b] + j.
struct DenseKeys {
  int64_t outer0 = 0, seq0 = 0;
  __device__ __forceinline__ void init(const DecodeParams& p, int b) {
    outer0 = p.cu_seqlens_kv ? 0 : b;
    seq0 = p.cu_seqlens_kv ? p.cu_seqlens_kv[b] : 0;
  }
  __device__ __forceinline__ void locate(int j, int64_t& outer, int64_t& seq) const {
    outer = outer0;
    seq = seq0 + j;
  }
};

}  // namespace flashcheck::kernels
