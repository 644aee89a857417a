// What a backward kernel's gradients are expected to be, for one problem and one dO: the fp64
// oracle's (reference/naive_backward.h) and the same-dtype baselines the error is scaled by — the
// FlashAttention-2 backward replica (reference/replica_backward.h) fed by the forward replica's O
// and LSE, as a kernel's backward is fed by its forward.
#pragma once
#include <span>
#include <vector>

#include "reference/inputs.h"
#include "reference/naive_backward.h"
#include "reference/problem.h"
#include "reference/replica.h"
#include "reference/replica_backward.h"
#include "verify/expected.h"

namespace flashcheck {

struct BackwardExpected {
  BackwardResult oracle;  // fp64 truth, logical layouts
  // The same-dtype baselines, logical layouts: the FlashAttention-2 backward replica twice, each fed
  // by a forward replica's O and LSE (backward_baseline_configs, reference/replica_backward.h):
  // (128, 128) tiles and exp2 throughout, and a (64, 64) forward with exp2 followed by a (16, 16)
  // backward with exp. The rule takes the worse of the two. The
  // second's backward sums its scores in another order than its forward did, as a kernel's backward
  // MMAs differ from its forward's, so P = exp(s − LSE) carries that difference: in f32, where
  // nothing else is rounded, a backward whose scores repeat its forward's bit for bit recomputes a
  // one-hot P exactly, and a correct kernel was then 240x its error; and its O is rounded apart,
  // which with fp8 inputs (O carries P's fp8 rounding) moves D and the sinks' gradient
  // (verify/TOLERANCE.md, Backward).
  std::vector<ReplicaGradients> baselines;
  // Rows whose scores fp32 cannot resolve, and the keys they reach. A backward kernel recomputes
  // P = exp(s − LSE) from an fp32 score and an fp32 LSE, each off by up to δ = score_rounding(Dqk)
  // · (the row's score bound, verify/expected.h); once δ reaches kUnresolvedDelta every P of the row
  // is uncertain by a factor e^(±2δ) ≥ e, on every key, not only near ties as in the forward (`large`
  // inputs: scores near 10^8, δ in the thousands, where any two correct kernels' gradients differ by
  // orders of magnitude). Their gradient elements — the row's dQ, the dK and dV of every key it sees,
  // its head's sink gradient — are judged for unwritten, NaN/Inf and exact zeros only.
  std::vector<char> unresolved_rows;  // per logical query row (Sequences::lse_at)
  std::vector<char> unresolved_keys;  // per logical key row (Sequences::k_row / Dqk)
  std::vector<char> unresolved_sinks; // per query head
  int64_t count_unresolved_rows = 0;
  // The size of the terms the sinks' gradient sums, per query head: Σ_rows P_sink · Σ_c |dO·O|
  // (from the first baseline's forward; a scale, not a value). The sinks' gradient −Σ P_sink·D is
  // one sum over a head's rows, and each D = dO·O carries O's rounding; where the sum cancels, its
  // error is that rounding's random walk, not a fraction of the result, and one scalar's error
  // against two baselines' is a ratio of noises (a correct fp8 kernel was 5x both). Its atol is
  // taken relative to this (verify/backward_criteria.cpp).
  std::vector<double> dsinks_terms;
  // fp32's noise floor for dQ and dK. dS = P·(dP − D) is formed in fp32 from dP and D, each bounded
  // by a_i = ‖dO_i‖·max‖v_j‖ over the row's keys, so it carries an absolute error of a few 2^-24·a_i
  // even where the truth cancels to 0 (one visible key: P = 1 and D = dP exactly), and two
  // baselines can both be exactly 0 there by luck while a correct kernel with other tiles is not.
  // dq_terms = max_i |scale|·a_i·max‖k_j‖ (P sums to at most 1 over a row's keys: the largest of
  // dq_row_terms); dk_terms (the largest of dk_row_terms) =
  // max over KV heads of |scale|·max_i(a_i·‖q_i‖)·max_j Σ_i P_ij (the attention a key receives,
  // from the first baseline). The baseline rule adds 2^-20 of them (verify/backward_criteria.cpp).
  double dq_terms = 0, dk_terms = 0;
  // The kernel's own fp32 LSE. A backward recomputes P = exp(s − LSE) from the LSE its forward saved
  // in fp32, off from the truth by an ulp or two of |LSE| for any correct forward: every P of row i
  // carries one relative error ε_i ≈ 2^-22·|LSE_i|, the same for all its keys, so no two baselines
  // sample it (both may round to the same LSE). At f32 with scores in the hundreds that is 1e-4 of P,
  // past the 2^-20 atol (a correct host kernel failed dV 4.6e-5 against 3.4e-6, |LSE| ~ 900).
  // lse_magnitude = max finite |LSE_i| (the first baseline's forward); dv_terms = max over keys of
  // Σ_i P_ij (the attention the key receives) · max|dO|, what ε scales in dV (backward_criteria.cpp).
  double lse_magnitude = 0, dv_terms = 0;
  // Per logical query row (Sequences::lse_at): |scale|·a_i·max‖k_j‖ over the row's visible keys, the
  // row's own dq_terms. dQ_i sums |dS_ij|·‖k_j‖·|scale| ≤ 2 of it, each dS rounded to the gradient
  // dtype first, so a correct dQ row is uncertain by 2u of it however small the row cancels to
  // (rows_baseline_relative's floor: equal scores cancel dQ to 0, and two baselines can land there
  // exactly while a kernel keeps the 16-bit rounding of dS; 11 of 2,000 correct 16-bit runs failed).
  std::vector<double> dq_row_terms;
  // Per logical key row (Sequences::k_row / Dqk): |scale|·max_i(a_i·‖q_i‖)·Σ_i P_ij, the key's own
  // dk_terms, the same floor for dK's keys (constant rows cancel a key's dK: a correct kernel with
  // 4-row tiles needed row_k 22 on one without it).
  std::vector<double> dk_row_terms;
};

// d_out: the logical layout of O over every row (p.o_elems()), values in the output dtype.
// Every row is evaluated (no row sampling yet: the backward oracle computes all rows). `oracle`
// picks where the fp64 gradients are computed, as make_expected's (verify/expected.h): the CPU, the
// GPU (reference/gpu_oracle.h naive_attention_backward_gpu; CannotTest when it is unavailable or
// cannot hold the problem), or the GPU from kGpuOracleWork on when one is usable. Where the fp64
// gradients are computed on the GPU, so are the baselines when the GPU replicas cover the problem
// and hold it (reference/gpu_oracle.h backward_baselines_gpu: same algorithm and roundings, GEMM
// sums in another order); otherwise they are the CPU's replicas. `timings`, when given, receives
// the phases' seconds, each labelled (GPU) or (CPU).
BackwardExpected make_backward_expected(const Problem& p, const Inputs& in, std::span<const float> d_out,
                                        OracleChoice oracle = OracleChoice::cpu,
                                        std::vector<std::pair<std::string, double>>* timings = nullptr);

}  // namespace flashcheck
