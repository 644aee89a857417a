// The fp64 oracle with its strips split into pieces (reference/strip_plan.h) against the same oracle
// computing each block's whole strip in one GEMM, over random problems of every variant.
//
// Not bitwise, and rightly: a row's P·V is the sum of its pieces' sums (the middle first), the same
// terms as the whole strip's GEMM taken in another order. Each score is one fp64 dot product either
// way, but BLAS kernels may round a dot product differently in GEMMs of another shape (edge tiles,
// OpenBLAS's small-matrix kernels), so the scores are held to two evaluations' bound too:
//   scores  |Δs| ≤ e = 2·(Dqk + 2)·u·max|s| + 2u·(max|s| + max|bias|)  (softcap and bias round the same)
//   LSE     |Δ| ≤ e + 4u·|LSE|                         (exp and log of scores within e)
//   O       |Δ| ≤ max|v|·(3e + 2·(n + 2)·u)            (weights within exp(±2e), n terms reordered)
// with u = 2⁻⁵³, n the sequence's keys. Which rows are NaN or empty is the same bit for bit. The
// plan depends on each block's rows alone, so the grouping of rows into blocks (which follows the
// thread count) changes nothing the split adds.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <random>

#include "reference/inputs.h"
#include "reference/naive.h"
#include "reference/random_variant_test_util.h"
#include "reference/strip_plan.h"
#include "testing/test_seed.h"

namespace flashcheck {
namespace {

int64_t pick(std::mt19937_64& g, int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(g); }

double max_row_norm(const std::vector<float>& x, int64_t d) {
  double m = 0;
  for (size_t r = 0; r * size_t(d) < x.size(); ++r) {
    double n = 0;
    for (int64_t e = 0; e < d; ++e) n += double(x[r * size_t(d) + size_t(e)]) * x[r * size_t(d) + size_t(e)];
    m = std::max(m, std::sqrt(n));
  }
  return m;
}

void expect_close(const Problem& p, const Inputs& in, const OracleResult& a, const OracleResult& b, const std::string& what) {
  const double u = 0x1p-53;
  // |s| ≤ |scale|·max‖q‖·max‖k‖ (Cauchy–Schwarz; descales and the finite values only matter here).
  double smax = std::fabs(p.softmax_scale()) * max_row_norm(in.q, p.head_dim_qk) * max_row_norm(in.k, p.head_dim_qk);
  for (const auto* d : {&in.descale_q, &in.descale_k})
    if (!d->empty()) smax *= *std::max_element(d->begin(), d->end());
  double bmax = 0, vmax = 0;
  for (float x : in.alibi_slopes) bmax = std::max(bmax, std::fabs(double(x)) * double(p.seq_q + p.seq_kv));
  for (float x : in.v)
    if (std::isfinite(x)) vmax = std::max(vmax, std::fabs(double(x)));
  if (!in.descale_v.empty()) vmax *= *std::max_element(in.descale_v.begin(), in.descale_v.end());
  const double e = 2 * double(p.head_dim_qk + 2) * u * smax + 2 * u * (smax + bmax);
  const double obound = vmax * (3 * e + 2 * double(p.seq_kv + 2) * u);
  ASSERT_EQ(a.lse.size(), b.lse.size());
  ASSERT_EQ(a.o.size(), b.o.size());
  for (size_t i = 0; i < a.lse.size(); ++i) {
    if (!std::isfinite(b.lse[i]) || !std::isfinite(a.lse[i])) {
      ASSERT_TRUE(std::isnan(a.lse[i]) == std::isnan(b.lse[i]) && (std::isnan(b.lse[i]) || a.lse[i] == b.lse[i]))
          << what << ": LSE " << i << " split " << a.lse[i] << " whole " << b.lse[i];
    } else {
      ASSERT_LE(std::fabs(a.lse[i] - b.lse[i]), e + 4 * u * std::fabs(b.lse[i])) << what << ": LSE " << i;
    }
  }
  for (size_t i = 0; i < a.o.size(); ++i) {
    if (!std::isfinite(b.o[i]) || !std::isfinite(a.o[i])) {  // an infinite value a row sees: the same Inf or NaN
      ASSERT_TRUE((std::isnan(a.o[i]) && std::isnan(b.o[i])) || a.o[i] == b.o[i])
          << what << ": O " << i << " split " << a.o[i] << " whole " << b.o[i];
    } else {
      ASSERT_LE(std::fabs(a.o[i] - b.o[i]), obound) << what << ": O " << i << " split " << a.o[i] << " whole " << b.o[i];
    }
  }
}

// Random problems of every variant (windows both sides, causal alignments, varlen, paged, used
// keys, sinks, softcap, ALiBi, fp8), stretched so blocks are taller than pieces; every row or
// sampled ones; now and then a NaN key and an infinite value at keys some rows mask.
TEST(NaiveSplit, SplitStripsAgreeWithWholeStripsOnRandomProblems) {
  const uint64_t seed = testing::seed_for(0x5714);
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 g(seed);
  int split_cases = 0;
  for (int c = 0; c < 60; ++c) {
    Problem p = random_variant_problem(g);
    const int64_t f = pick(g, 1, 25), fw = pick(g, 1, 25);
    p.seq_q *= f;
    p.seq_kv *= f;
    for (auto* v : {&p.seqlens_q, &p.seqlens_kv, &p.seqused_kv})
      for (int64_t& x : *v) x *= f;
    if (p.window.left > 0) p.window.left *= fw;
    if (p.window.right > 0) p.window.right *= fw;
    if (pick(g, 0, 1) && p.window.none()) p.causal = Causal::bottom_right;
    normalize(p);
    validate(p);
    const uint64_t input_seed = g();
    Inputs in = make_inputs(p, input_seed, pick(g, 0, 3) ? Dist::normal : Dist::outlier_keys);
    const bool poisoned = pick(g, 0, 3) == 0 && !in.k.empty() && !in.v.empty();
    if (poisoned) {
      in.k[static_cast<size_t>(pick(g, 0, int64_t(in.k.size()) / p.head_dim_qk - 1) * p.head_dim_qk)] = NAN;
      in.v[static_cast<size_t>(pick(g, 0, int64_t(in.v.size()) / p.head_dim_v - 1) * p.head_dim_v)] = INFINITY;
    }
    RowSet rows = RowSet::all(p);
    if (pick(g, 0, 2) == 0) {
      std::vector<std::vector<int64_t>> some(static_cast<size_t>(p.batch));
      for (int64_t b = 0; b < p.batch; ++b)
        for (int64_t i = 0; i < p.sq(b); ++i)
          if (pick(g, 0, 2)) some[static_cast<size_t>(b)].push_back(i);
      rows = RowSet::per_sequence(p, some);
    }
    StripSplit split;
    if (pick(g, 0, 1)) split.min_rows = pick(g, 1, 16);  // small problems split too
    const std::string what = "case " + std::to_string(c) + ": " + to_string(p) + " input seed " + std::to_string(input_seed) +
                             (poisoned ? " (NaN key, Inf value)" : "") + (rows.is_all() ? "" : " (sampled rows)") +
                             " min_rows " + std::to_string(split.min_rows);
    SCOPED_TRACE(what);
    const OracleResult whole = naive_attention(p, in, rows, StripSplit::none());
    const OracleResult parts = naive_attention(p, in, rows, split);
    split_cases += p.seq_q > split.min_rows && !p.window.none();
    expect_close(p, in, parts, whole, what);
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(split_cases, 10);
}

// Where every dot product is exact (small integers, a power-of-two scale) no GEMM shape can round
// a score differently, so split into pieces as small as 4 rows the LSE must be the same bits as
// the whole strips': a piece computing the wrong keys or rows could not hide in the bound.
TEST(NaiveSplit, ExactScoresGiveTheSameLseBitsSplitOrNot) {
  const Problem p = parse_problem("b=1 hq=2 hkv=1 sq=700 skv=650 d=16 causal=bottom_right window=300,0 dtype=f32");
  Inputs in = make_inputs(p, testing::seed_for(0x5715));
  for (float& x : in.q) x = std::round(x * 4);
  for (float& x : in.k) x = std::round(x * 4);
  const RowSet rows = RowSet::all(p);
  StripSplit fine;
  fine.min_rows = 4;
  const OracleResult a = naive_attention(p, in, rows, StripSplit::none()), b = naive_attention(p, in, rows, fine);
  // Scores exact, so the LSE is the same bits; O sums the same terms in another order.
  for (size_t i = 0; i < a.lse.size(); ++i) ASSERT_EQ(a.lse[i], b.lse[i]) << "row " << i;
  double vmax = 0;
  for (float x : in.v) vmax = std::max(vmax, std::fabs(double(x)));
  for (size_t i = 0; i < a.o.size(); ++i) ASSERT_NEAR(a.o[i], b.o[i], vmax * 2 * (650 + 2) * 0x1p-53) << "element " << i;
}

}  // namespace
}  // namespace flashcheck
