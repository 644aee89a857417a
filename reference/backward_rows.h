// One query row of the fp64 backward oracle (reference/naive_backward.h), in place over the row's
// visible keys only: raw dot products → final scores → probabilities → score gradients dS.
// The scores are formed exactly as the forward oracle forms them (reference/naive.cpp): the same
// operations in the same order, so the backward differentiates the forward's very function.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>

#include "reference/score_mod.h"

namespace flashcheck::backward {

// What one (sequence, query head) adds to its scores: scale, softcap, ALiBi bias, sink logit.
struct RowMods {
  double scale = 1;
  Softcap<double> cap;
  AlibiBias<double> bias;
  double sink = -std::numeric_limits<double>::infinity();  // −inf: no sink
};

// A row's softmax, kept between the two passes: P_j = exp(t_j − m) · inv_l. A row whose softmax is
// undefined (a NaN or +inf score, every score −inf: the forward's NaN rows) has m = inv_l = NaN,
// so every probability recomputed from it is NaN too. A row that sees no key is never evaluated.
struct RowStats {
  double m = 0, inv_l = 0;
};

// x[0, n): the raw dots q_i·k_j of query `row` with keys lo .. lo + n − 1, turned in place into the
// final scores t = softcap(rd(dot · scale)) + bias, as the forward computes them. With a softcap,
// dcap[j] receives dt/ds, the cap's derivative at that score.
void final_scores(const RowMods& mods, double* x, int64_t n, int64_t row, int64_t lo, double* dcap);

// Scores t[0, n) (n ≥ 1) → probabilities, in place; the sink joins the max and the denominator.
RowStats softmax_in_place(double* t, int64_t n, double sink);

// Scores t[0, n) → probabilities from a row's saved statistics (the key-block pass).
void probs_from_stats(double* t, int64_t n, RowStats st);

// D = Σ_j P_j dP_j. This is rowsum(dO ∘ O) without O: O = Σ_j P_j v_j and dP_j = dO·v_j, so
// dO·O = Σ_j P_j (dO·v_j). The sink's value is 0, so it adds nothing here.
double row_delta(const double* p, const double* dp, int64_t n);

// dp[j] ← dS_j = P_j (dP_j − D) · dcap[j] (dcap null: no softcap, the factor is 1).
void score_grads(const double* p, double* dp, const double* dcap, int64_t n, double delta);

// The sink's share of the row's softmax.
inline double sink_prob(double sink, RowStats st) { return std::exp(sink - st.m) * st.inv_l; }

}  // namespace flashcheck::backward
