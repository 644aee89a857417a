// What decode_paged_f16's two kernels read: every tensor by its row strides (reference/storage.h's
// (outer, seq, head) addressing), the sequences' lengths as device arrays, the split count and the
// workspace of partial results. Plain data, filled on the host by launch.cpp.
#pragma once
#include <cstdint>

namespace flashcheck::kernels {

struct DecodeStrides {
  int64_t outer = 0, seq = 0, head = 0;
};

struct DecodeParams {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  float* lse = nullptr;  // may be null: no LSE asked for
  DecodeStrides sq, sk, sv, so, slse;

  // Lengths. Queries: cu_seqlens_q (packed q/o, rows at token cu_seqlens_q[b] + i) or seq_q each.
  // Keys: cache_seqlens (paged), else seqused_kv, else cu_seqlens_kv differences (packed), else seq_kv.
  const int32_t* cu_seqlens_q = nullptr;
  const int32_t* cu_seqlens_kv = nullptr;
  const int32_t* seqused_kv = nullptr;
  const int32_t* block_table = nullptr;  // [batch, max_pages] (paged)
  const int32_t* cache_seqlens = nullptr;
  int64_t max_pages = 0;
  int page_size = 0;  // > 0: K/V in a paged cache (outer = page, seq = slot)
  int page_shift = -1; // log2(page_size) when it is a power of two, else −1

  int batch = 0, heads_q = 0, heads_kv = 0, group = 1;
  int seq_q = 0;   // the largest Sq: rows of the workspace per (b, h)
  int seq_kv = 0;  // dense: keys stored per sequence
  int causal = 0;  // 0 none, 1 top-left, 2 bottom-right (reference/problem.h)
  float sl2 = 0;   // softmax scale · log2(e)

  int num_splits = 1;
  int chunks = 1;  // query chunks of DecodeTraits::kRows rows per (b, KV head)
  // Partial results, split-major over rows (b·heads_q + h)·seq_q + i: o [num_splits][rows][D]
  // normalised by the split's own sum ℓ; the split's raw score max m [num_splits][rows] and log2 ℓ
  // [num_splits][rows] kept apart (a split that saw no key of the row: m = −inf, log2 ℓ = −inf), so
  // that the combine subtracts maxima of raw scores, exact where they are close, instead of two
  // large LSEs whose fp32 rounding alone can be a whole unit of log2 weight.
  float* ws_o = nullptr;
  float* ws_max = nullptr;
  float* ws_log2l = nullptr;
};

}  // namespace flashcheck::kernels
