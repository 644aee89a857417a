// Oracle 2: the FlashAttention forward algorithm replayed on the CPU with a kernel's own tiles and
// numerics, so a kernel can be judged against its algorithm as well as against the truth.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "reference/inputs.h"
#include "reference/problem.h"

namespace flashcheck {

struct ReplicaConfig {
  int64_t block_q = 128;   // Br: query rows per tile
  int64_t block_kv = 128;  // Bc: keys per tile
  // exp2 with log2(e) folded into the scale (one FFMA + EX2 per score on GPUs) instead of exp.
  bool use_exp2 = true;
  // Round P to the input dtype before P·V, as kernels cast the fp32 scores to bf16/fp16 to feed the
  // tensor cores. The row sum ℓ is still accumulated from the unrounded fp32 P, as they do.
  bool round_p = true;
  // Round P and O toward zero instead of to nearest: a kernel bug class (a truncating cvt) that the
  // checker's rounding-bias criterion must catch; never a correct configuration.
  bool truncate = false;
  // Initialise the running max with the finite -2^30 some kernels use instead of -inf.
  bool finite_neg_inf = true;
  // Skip KV tiles that lie wholly above the causal diagonal (kernels do; results must not change).
  bool skip_masked_tiles = true;
};

// Running state of one row after one KV tile, for finding the first tile where a kernel diverges.
struct TraceEntry {
  int64_t batch, head, row, kv_tile;
  float m;               // running max of raw (unscaled) scores, taken with the scale's sign
  float l;               // running sum of exp(scaled score - scaled max), or of exp2 of the same in
                         // log2 units when the replica runs with use_exp2 (the scale then carries log2 e)
  std::vector<float> o;  // unnormalised O row
};

struct ReplicaResult {
  // Query rows evaluated (ascending, the same for every (batch, head)); empty means all seq_q rows.
  // The same compact layout as OracleResult (reference/naive.h).
  std::vector<int64_t> rows;
  int64_t num_rows = 0;    // rows.size(), or seq_q when rows is empty
  std::vector<float> o;    // [B, Hq, num_rows, Dv], rounded to the problem's dtype
  std::vector<float> lse;  // [B, Hq, num_rows], natural log; -inf for rows that see no key
  std::vector<TraceEntry> trace;

  int64_t row_at(int64_t r) const { return rows.empty() ? r : rows[static_cast<size_t>(r)]; }
};

// fp32 everywhere, as a kernel's accumulators. `trace_rows` (query rows, every (b, h)) asks for the
// state after each KV tile; with `rows` given, only trace rows that are also evaluated are traced.
// Rows that see no key give O = 0, LSE = -inf (the declared convention). `rows` (optional,
// ascending, unique, each in [0, seq_q)) restricts evaluation to those query rows of every
// (batch, head), for sampled checks of large problems; each row's result is the one a full run
// gives it, up to the GEMM summation order (the comment at the tile loop; bounded in replica_test.cpp).
ReplicaResult replica_attention(const Problem& p, const Inputs& in, const ReplicaConfig& cfg = {},
                                std::span<const int64_t> trace_rows = {}, std::span<const int64_t> rows = {});

}  // namespace flashcheck
