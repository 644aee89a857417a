// Oracle 2: the FlashAttention forward algorithm replayed on the CPU with a kernel's own tiles and
// numerics, so a kernel can be judged against its algorithm as well as against the truth. It
// computes every variant of problem model 2 (reference/problem.h) the way FlashAttention 2 and 3
// do; where kernels differ, the choice is a ReplicaConfig field or stated at its place in replica.cpp.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "reference/inputs.h"
#include "reference/problem.h"
#include "reference/rows.h"
#include "reference/score_mod.h"

namespace flashcheck {

// Set fields by name (designated initialisers), never by position: fields get inserted, and a
// positional list then shifts silently (truncate and round_o did so twice, turning tests' configs
// into truncating ones nobody asked for).
struct ReplicaConfig {
  int64_t block_q = 128;   // Br: query rows per tile (q-tiles start at each sequence's first row)
  int64_t block_kv = 128;  // Bc: keys per tile (KV tiles start at each sequence's first used key)
  // exp2 with log2(e) folded into the scale (one FFMA + EX2 per score on GPUs) instead of exp.
  bool use_exp2 = true;
  // Round P to the input dtype before P·V, as kernels cast the fp32 scores to bf16/fp16 (fp8 for
  // fp8 inputs) to feed the tensor cores. The row sum ℓ is still accumulated from the unrounded
  // fp32 P, as they do.
  bool round_p = true;
  // Round O to the output dtype at the end, as every kernel does. Off, O stays the fp32 value it
  // would be rounded from: for comparing two implementations of this replica below the output's
  // rounding (reference/gpu_replica_test.cpp), never a kernel's configuration.
  bool round_o = true;
  // Round P and O toward zero instead of to nearest: a kernel bug class (a truncating cvt) that the
  // checker's rounding-bias criterion must catch; never a correct configuration.
  bool truncate = false;
  // Initialise the running max with the finite -2^30 some kernels use instead of -inf.
  bool finite_neg_inf = true;
  // Skip KV tiles that no row of the q-tile sees, on both sides (causal diagonal, and a sliding
  // window's left edge); only tiles some row sees are loaded, and only edge tiles are masked
  // element-wise. Kernels do; results must not change.
  bool skip_masked_tiles = true;
  // P is computed as 2^k·exp(s − m) before it is rounded (FlashAttention 3's "max offset" for fp8:
  // P then spans [0, 2^k] and uses more of the fp8 range instead of underflowing), and ℓ carries the
  // same factor, so O = P·V/ℓ is unchanged and LSE takes log(ℓ·2^−k). Empty: 8 for fp8 inputs, 0
  // otherwise. 2^k must stay below the P dtype's largest value (e4m3: 448), or P overflows as a
  // kernel's would.
  std::optional<int> p_scale_log2;
  // How the kernel adds ALiBi under a causal mask: exact (the problem's bias), or key_offset
  // (FlashAttention 2's causal kernel: slope·j, so the LSE differs by alibi_lse_shift(), O not).
  AlibiLse alibi_lse = AlibiLse::exact;

  int p_offset(const Problem& p) const { return p_scale_log2 ? *p_scale_log2 : (is_fp8(p.dtype) ? 8 : 0); }
};

// Running state of one row after one KV tile, for finding the first tile where a kernel diverges.
struct TraceEntry {
  int64_t batch, head, row, kv_tile;  // row: query row of sequence `batch`; kv_tile: tile index in it
  float m;               // running max of raw scores (Q·Kᵀ taken with the scale's sign; with a softcap
                         // the tanh values; ALiBi added in the same units), before any sink
  float l;               // running sum of exp(scaled score - scaled max), or of exp2 of the same in
                         // log2 units when the replica runs with use_exp2 (the scale then carries
                         // log2 e); times 2^p_offset
  std::vector<float> o;  // unnormalised O row (raw V: before the fp8 v descale)
};

struct ReplicaResult {
  RowSet rows;             // the query rows evaluated, per sequence (reference/rows.h)
  std::vector<float> o;    // [rows.index(b, h, r, Hq)][Dv], rounded to the problem's output dtype
  std::vector<float> lse;  // [rows.index(b, h, r, Hq)], natural log; -inf for rows that see no key
  std::vector<TraceEntry> trace;

  // Problem model 1's view, for dense problems evaluated on the same rows in every sequence:
  // results are [B, Hq, num_rows()], row r of every (b, h) being row_at(r).
  int64_t num_rows() const { return rows.batch() ? rows.count(0) : 0; }
  int64_t row_at(int64_t r) const { return rows.row(0, r); }
};

// fp32 everywhere, as a kernel's accumulators. `trace_rows` (query rows of each sequence, every
// (b, h); a row past a sequence's length is not traced there) asks for the state after each KV tile;
// only trace rows that are also evaluated are traced. Rows that see no key give O = 0, LSE = -inf
// (the declared convention), sink or not. `rows` restricts evaluation to those query rows, for
// sampled checks of large problems; each row's result is the one a full run gives it, up to the
// GEMM summation order (the comment at the tile loop; bounded in replica_test.cpp).
ReplicaResult replica_attention(const Problem& p, const Inputs& in, const ReplicaConfig& cfg,
                                std::span<const int64_t> trace_rows, const RowSet& rows);
// Every row, or the same rows (ascending, unique, each in [0, seq_q)) in every sequence (empty:
// every row; a row past a shorter sequence's length is left out there, as RowSet::same does).
ReplicaResult replica_attention(const Problem& p, const Inputs& in, const ReplicaConfig& cfg = {},
                                std::span<const int64_t> trace_rows = {}, std::span<const int64_t> rows = {});

}  // namespace flashcheck
