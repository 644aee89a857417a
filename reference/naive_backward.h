// The fp64 backward oracle: dQ, dK, dV (and the sinks' gradient) of the forward that
// naive_attention (reference/naive.h) computes, for a given output gradient dO.
//
// Per query row i of head h and its visible keys j (reference/mask.h), with the forward's own
// scores (reference/problem.h: scale → softcap → mask → ALiBi bias → softmax with the sink):
//   s_ij = scale · q_i·k_j,  c_ij = softcap(s_ij),  t_ij = c_ij + bias_ij,  P = softmax_j(t_i·, sink)
//   D_i   = dO_i · O_i                              (= Σ_j P_ij dP_ij, which is how it is computed)
//   dP_ij = dO_i · v_j,     dS_ij = P_ij (dP_ij − D_i) · c'(s_ij),   c'(s) = 1 − tanh²(s/c) (1 uncapped)
//   dQ_i  = scale Σ_j dS_ij k_j,   dK_j = scale Σ_i dS_ij q_i,   dV_j = Σ_i P_ij dO_i
//   dsink_h = −Σ_(b, i of head h) P_sink,i · D_i
// The sink's gradient: with Z_i = Σ_j e^(t_ij) + e^sink, P_ij = e^(t_ij)/Z_i and
// P_sink,i = e^sink/Z_i, so ∂P_ij/∂sink = −P_ij P_sink,i and ∂O_i/∂sink = −P_sink,i O_i; the loss
// Σ dO∘O then moves by −P_sink,i (dO_i · O_i) = −P_sink,i D_i per row. (The sink is a key whose
// value is 0: its dS is P_sink (0 − D).) ALiBi's bias depends on no input, so it adds no gradient
// of its own; it only shapes P. A sink of −inf takes no weight and has gradient 0, whatever the rows.
//
// Conventions, as the forward's:
//  - a row that sees no key (O = 0) contributes nothing anywhere, whatever its dO holds: its dQ
//    row is 0, and it adds nothing to dK, dV or the sink's gradient;
//  - NaN propagates as in the forward: a row that is NaN there (a NaN or +inf among its visible
//    scores, every visible score −inf) or whose dO is NaN gives NaN wherever it reaches — its dQ,
//    dK/dV of exactly the keys it sees, and its head's sink gradient (unless that sink is −inf). A pair (i, j) the mask
//    hides contributes nothing, whatever q_i, k_j, v_j or dO_i hold (no 0·Inf through a GEMM).
//  - fp8: gradients are with respect to the dequantized values x·descale, the numbers the forward
//    computes with (the gradient with respect to a stored fp8 value is this times its descale).
//
// Layouts. dO is in the logical layout of the forward's output over every row (reference/
// sequences.h: OracleResult::o, Problem::o_elems()), as floats — a kernel's dO from another
// storage layout is gathered with Storage::gather(Tensor::o, ...). dQ, dK and dV come in the
// logical layouts of Inputs::q, k and v: per sequence, [H, S, D] blocks of the queries and the keys
// it uses. For a paged cache that is each sequence's gathered keys, so a key stored once in a page
// two sequences share has a gradient row in each; gradient_in_storage (reference/
// gradient_storage.h) lays them into the cache [num_pages, page_size, Hkv, D], where rows that
// share a slot add (the slot's gradient is the sum over every sequence that reads it) and slots
// no sequence reads are 0. GQA: dK and dV of a KV head are summed over its group's query heads.
//
// Computation. Two passes per group of KV heads, both fp64 BLAS GEMMs over widened inputs, OpenMP
// over tasks that each own what they write (no reduction across tasks, no atomics):
//  1. rows: per block of query rows of one head, S = Q Kᵀ and dP = dO Vᵀ over the keys the block
//     sees, the softmax, D and dS, and dQ = scale · dS K. Keeps each row's (max, 1/sum, D).
//  2. keys: per block of keys of one KV head, over every query row (of every head of its group)
//     that sees them: S and dP again, P from the saved statistics, dS, and
//     dV = Pᵀ dO, dK = scale · dSᵀ Q accumulated in a fixed order (heads, then row blocks).
// Seven GEMMs where an atomics-based kernel needs five, for results that are bitwise the same
// whatever the number of threads or their timing: every block size depends on the problem alone.
// Cost follows the visible work, as the forward's: each row block reads only the keys it sees and
// each key block only the rows that see it (a window costs O(Sq·window)). Memory is 16 MiB of
// scratch per thread (24 with a softcap), the widened K/V of a few KV heads, three doubles per
// query row and the gradients themselves.
#pragma once
#include <span>
#include <vector>

#include "reference/big_vector.h"
#include "reference/inputs.h"
#include "reference/problem.h"

namespace flashcheck {

struct BackwardResult {
  UninitVector<double> dq;     // logical layout of Inputs::q (p.q_elems())
  UninitVector<double> dk;     // of Inputs::k (p.k_elems()): summed over each KV head's query group
  UninitVector<double> dv;     // of Inputs::v (p.v_elems())
  std::vector<double> dsinks;  // [Hq] when the problem has sinks, else empty
};

// Throws InvalidProblem for a problem or side inputs the forward refuses (naming the field), and
// std::invalid_argument naming q, k, v or dO when its size does not match the problem.
BackwardResult naive_attention_backward(const Problem& p, const Inputs& in, std::span<const float> d_out);

}  // namespace flashcheck
