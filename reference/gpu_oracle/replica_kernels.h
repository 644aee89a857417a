// Launchers of the GPU replicas' kernels (replica_forward_kernels.cu, replica_backward_kernels.cu) and
// the work descriptors host_replica.cpp builds for them: FlashAttention 2's forward and backward
// replayed in fp32 on CUDA cores with reference/replica.cpp's and replica_backward.cpp's numerics.
//
// Layout contract (host_replica.cpp uploads, the kernels rely on it). Device rows are the logical
// rows (reference/sequences.h) of the piece's (sequence, KV head) units, which are contiguous:
//   q [q rows][dqk_pad], d_out [q rows][dv_pad]   fp32, columns past Dqk / Dv zero
//   k [kv rows][dqk_pad], v [kv rows][dv_pad]      fp32, columns past Dqk / Dv zero
//   o [q rows][dv], lse, delta [q rows]            the forward's results (or the given ones), D
//   dq [q rows][dqk], dk [kv rows][dqk], dv [kv rows][dv], colsum [kv rows]
//   vis_lo, vis_hi: per logical query row (Sequences::q0(b) + i), its visible keys [lo, hi)
//                   (reference/mask.h; lo == hi: none)
// Pads are multiples of 64. Rows of a tile past its sequence's end are never loaded (zeros stand in).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "reference/gpu_oracle/kernels.h"

namespace flashcheck::gpu_oracle {

inline constexpr int kReplicaRows = 64;     // query rows per tile, every kernel
inline constexpr int kReplicaBwdKeys = 64;  // keys per tile of the backward kernels

// 64 query rows of one (sequence, query head): rows [r0, r0 + 64) ∩ [0, sq).
struct RowTile {
  int64_t q0 = 0;    // device row of the head's row 0
  int64_t kv0 = 0;   // device row of its KV head's key 0
  int64_t vis0 = 0;  // vis_lo/vis_hi entry of the sequence's row 0
  int32_t r0 = 0, sq = 0, skv = 0;
  // Key tiles the tile visits, [t_begin, t_end): the forward's of block_kv keys (the CPU replica's
  // q-tile's range), the dQ kernel's of kReplicaBwdKeys keys (those its rows see).
  int32_t t_begin = 0, t_end = 0;
};

// kReplicaBwdKeys keys of one (sequence, KV head), for dK, dV and the column sums of P: keys
// [k0, k0 + 64) ∩ [0, skv), over the row tiles [rt_begin, rt_end) of each query head of the group.
struct KeyTile {
  int64_t q0 = 0;    // device row of the group's first head's row 0 (the next head's is sq rows on)
  int64_t kv0 = 0;   // device row of the KV head's key 0
  int64_t vis0 = 0;
  int32_t k0 = 0, sq = 0, skv = 0, group = 1;
  int32_t rt_begin = 0, rt_end = 0;
};

// What every tile of a call computes with (plain problems: the same numbers for every head).
struct ReplicaArgs {
  int64_t dqk = 0, dqk_pad = 0, dv = 0, dv_pad = 0;
  float sc = 1;         // raw score → exponent units (reference/replica_numerics.h HeadNumerics::sc)
  int negate = 0;       // raw scores are −Q·Kᵀ (a negative scale: replica.cpp's negative_scale)
  float grad_mul = 1;   // dQ and dK: times the signed softmax scale
  float log2e = 1, ln2 = 1;  // the CPU's fp32 constants (float(kLog2e), float(kLn2): conventions.h)
  Round rd_p = Round::f32;  // the compute dtype (P, dS): the input dtype
  Round rd_o = Round::f32;  // O's dtype
  Round rd_g = Round::f32;  // the gradients' dtype (gradient_dtype)
  int use_exp2 = 1, round_p = 1, round_ds = 1, round_o = 1, round_grads = 1, finite_neg_inf = 1;
  const int32_t* vis_lo = nullptr;  // device
  const int32_t* vis_hi = nullptr;
};

// The forward replica: o and lse of every row of the tiles; block_kv 64 or 128.
void launch_replica_forward(int block_kv, const float* q, const float* k, const float* v, float* o, float* lse,
                            const RowTile* tiles, int64_t ntiles, const ReplicaArgs& a, cudaStream_t st);
// D = rowsum(dO ∘ O) in column order, one thread per row.
void launch_replica_delta(const float* d_out, const float* o, float* delta, int64_t rows, const ReplicaArgs& a,
                          cudaStream_t st);
// dK, dV and the column sums of P, one block per key tile.
void launch_replica_dkdv(const float* q, const float* k, const float* v, const float* d_out, const float* lse,
                         const float* delta, float* dk, float* dv, float* colsum, const KeyTile* tiles, int64_t ntiles,
                         const ReplicaArgs& a, cudaStream_t st);
// dQ, one block per row tile.
void launch_replica_dq(const float* q, const float* k, const float* v, const float* d_out, const float* lse,
                       const float* delta, float* dq, const RowTile* tiles, int64_t ntiles, const ReplicaArgs& a,
                       cudaStream_t st);

}  // namespace flashcheck::gpu_oracle
