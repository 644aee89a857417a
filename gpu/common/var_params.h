// What a variant launch (problem model 2) hands a kernel, mma_f16's and wgmma_f16's alike: the
// plain FwdParams plus every tensor's row strides, the varlen side tensors, the window, and the
// score modifiers' constants. Plain data, no project headers beyond gpu/common/params.h: the .cu
// files build as C++17. Filled on the host by var_params_host.cpp, from a Problem and its KernelArgs.
#pragma once
#include <cstdint>

#include "gpu/common/params.h"

namespace flashcheck::kernels {

// Element strides of one tensor's rows, as KernelArgs gives them (gpu/kernel.h): rows are
// addressed (outer = sequence b, seq = position, head); packed (thd) rows by token cu_seqlens[b] + i.
struct RowStrides3 {
  int64_t outer, seq, head;
};

struct VarParams {
  // Pointers, heads, dims, causal mode and scale as for a plain launch. seq_q / seq_kv are the
  // dense lengths (stored keys per sequence); for a packed batch the longest (unused by the kernel).
  FwdParams base;
  RowStrides3 q, k, v, o, lse;
  const int32_t* cu_seqlens_q;   // non-null: packed (thd) batch, B + 1 entries
  const int32_t* cu_seqlens_kv;  // with cu_seqlens_q
  const int32_t* seqused_kv;     // non-null: keys used per sequence (≤ those stored)
  // Sliding window, inclusive, in flashcheck's convention (the kernels declare `inclusive`):
  // left −1 is unbounded; right is already min(right, 0) under a causal mode and −1 is unbounded.
  // Both at most 2^30 (max_seq) after the host's clamp; the mask adds them to positions in 64 bits.
  int window_left, window_right;
  float sl2;          // raw score → log2 units: scale·log2(e), or c·log2(e) with a softcap
  float softcap_x;    // softcap c > 0: raw dot product → the tanh argument x = scale·s/c (score_mod.cuh)
  float softcap_exp;  // and → 2x·log2(e), the exponent of its 2^(2x·log2 e)
  const float* alibi_slopes;  // [Hq] or [B, Hq] (alibi_per_batch), natural units
  int alibi_per_batch;
  float alibi_unit;   // natural units per raw unit (scale, or c with a softcap): slopes are divided by it
  const float* sinks; // [Hq], natural units; null: no sink
};

// Host side, per variant translation unit: which compile-time policy a launch takes.
struct VariantKind {
  bool window = false;   // WindowMask (else PrefixMask: causal modes only)
  bool softcap = false;  // TanhSoftcap
  bool alibi = false;    // AlibiSymmetric
};

}  // namespace flashcheck::kernels
