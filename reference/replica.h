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
  float m;               // running max of raw (unscaled) scores
  float l;               // running sum of exp(scaled score - scaled max), or of exp2 of the same in
                         // log2 units when the replica runs with use_exp2 (the scale then carries log2 e)
  std::vector<float> o;  // unnormalised O row
};

struct ReplicaResult {
  std::vector<float> o;    // [B, Hq, Sq, Dv], rounded to the problem's dtype
  std::vector<float> lse;  // [B, Hq, Sq], natural log; -inf for rows that see no key
  std::vector<TraceEntry> trace;
};

// fp32 everywhere, as a kernel's accumulators. `trace_rows` (query rows, every (b, h)) asks for the
// state after each KV tile. Rows that see no key give O = 0, LSE = -inf (the declared convention).
ReplicaResult replica_attention(const Problem& p, const Inputs& in, const ReplicaConfig& cfg = {},
                                std::span<const int64_t> trace_rows = {});

}  // namespace flashcheck
