#include "reference/replica.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <set>
#include <stdexcept>

#include "testing/test_seed.h"
#include "reference/naive.h"
#include "reference/rng.h"

namespace flashcheck {
namespace {

TEST(Replica, OneTileWithoutRoundingIsTheNaiveResultToFp32) {
  Problem p{1, 2, 2, 37, 45, 32, 32, Causal::none, {}, DType::f32};
  Inputs in = make_inputs(p, flashcheck::testing::seed_for(31));
  ReplicaConfig cfg{.block_q = 64, .block_kv = 64, .use_exp2 = false, .round_p = false, .finite_neg_inf = false};
  ReplicaResult r = replica_attention(p, in, cfg);
  OracleResult n = naive_attention(p, in);
  for (size_t i = 0; i < r.o.size(); ++i) ASSERT_NEAR(r.o[i], n.o[i], 2e-6);
  for (size_t i = 0; i < r.lse.size(); ++i) ASSERT_NEAR(r.lse[i], n.lse[i], 2e-6 * (1 + std::fabs(n.lse[i])));
}

TEST(Replica, TraceHasOneEntryPerVisitedTileAndEndsAtTheResult) {
  Problem p{1, 1, 1, 40, 100, 16, 16, Causal::bottom_right, {}, DType::f32};
  Inputs in = make_inputs(p, flashcheck::testing::seed_for(32));
  ReplicaConfig cfg{.block_q = 16, .block_kv = 32, .round_p = false};
  std::vector<int64_t> rows{0, 39};
  ReplicaResult r = replica_attention(p, in, cfg, rows);
  // Row 0 lives in q-tile 0 whose last row (15) sees keys [0, 76): 3 tiles. Row 39: q-tile 2, 4 tiles.
  int n0 = 0, n39 = 0;
  for (auto& t : r.trace) (t.row == 0 ? n0 : n39)++;
  EXPECT_EQ(n0, 3);
  EXPECT_EQ(n39, 4);
  const TraceEntry& last = r.trace.back();
  ASSERT_EQ(last.row, 39);
  for (int d = 0; d < 16; ++d) EXPECT_NEAR(last.o[d] / last.l, r.o[39 * 16 + d], 1e-6);
}

TEST(Replica, SkippingMaskedTilesChangesNothing) {
  Problem p{1, 1, 1, 70, 50, 16, 16, Causal::top_left, {}, DType::bf16};
  Inputs in = make_inputs(p, flashcheck::testing::seed_for(33));
  ReplicaConfig a{.block_q = 16, .block_kv = 16, .finite_neg_inf = false}, b = a;
  b.skip_masked_tiles = false;
  ReplicaResult ra = replica_attention(p, in, a), rb = replica_attention(p, in, b);
  EXPECT_EQ(ra.o, rb.o);
  EXPECT_EQ(ra.lse, rb.lse);
}

// The finite -2^30 "minus infinity" some kernels use is only a stand-in while raw scores stay above
// it. A row whose every score is below -2^30 never raises the running max, every p underflows to 0
// and the row comes out empty: the replica reproduces that kernel bug instead of hiding it.
TEST(Replica, FiniteNegInfFillLosesRowsWhoseScoresAreAllBelowIt) {
  Problem p{1, 1, 1, 1, 2, 1, 1, Causal::none, 1.0, DType::f32};
  Inputs in{{1.0f}, {-2e9f, -3e9f}, {5.0f, 7.0f}};
  ReplicaConfig finite{.block_q = 16, .block_kv = 16, .round_p = false, .finite_neg_inf = true}, true_inf = finite;
  true_inf.finite_neg_inf = false;
  EXPECT_EQ(replica_attention(p, in, finite).o[0], 0.0f);  // lost
  EXPECT_EQ(replica_attention(p, in, true_inf).o[0], 5.0f);  // the truth: key 0 dominates by 1e9
}

// Rows to evaluate: the first and last row, both edges of every q-tile of `br` (where a chunk of the
// subset mixes rows of different tiles) and a random fifth of the rest.
std::vector<int64_t> edge_and_random_rows(int64_t sq, int64_t br, const CounterRng& rng) {
  std::set<int64_t> s{0, sq - 1};
  for (int64_t t = 0; t < sq; t += br) s.insert({t, std::min(sq, t + br) - 1});
  for (int64_t i = 0; i < sq; ++i)
    if (rng.uniform(static_cast<uint64_t>(i)) < 0.2) s.insert(i);
  return {s.begin(), s.end()};
}

// Sampled checks of large problems (verify/expected.cpp) evaluate the replica on a subset of rows;
// each row must get what the full run gives it. It is not bit-exact: the online softmax never mixes
// rows, but Eigen's GEMM sums a row's products in an order that depends on the row's place in the
// block and the block's row count (its micro-kernels treat full register blocks and remainder rows
// differently), so a score moves by an ulp or so, and exp turns an ulp of a score s into |s·scale|
// ulps of p. The unit is therefore eps·(max|o| + |s·scale|max·max|v|) per row (eps·(1 + |LSE| +
// |s·scale|max) for LSE), with |s·scale|max bounded by Cauchy–Schwarz; 16-bit outputs may also flip
// their final rounding, one output ulp, and a P rounded to 16 bits may flip to its neighbour when
// its score moved: each flip moves O by at most 2·u_p·P_j·|v_j|/ℓ, so all of them together by at
// most 2·u_p·max|v| (a row that cancels can make that larger than an output ulp). Measured (2026-11-22, 400 seeds of these five cases): 80% of
// draws bit-exact, the worst 0.61 units (in the row-max scale alone it was 5.9 fp32 ulps, too close
// to a 4-8 ulp bound to be stable). The bound is 4 units; a grouping defect (another row's q, mask or
// tile range) is off by O(max|o|), ~10^4 units.
TEST(Replica, ARowSubsetGetsWhatTheFullRunGivesThoseRows) {
  struct Case {
    Problem p;
    ReplicaConfig cfg;
  };
  const ReplicaConfig fp32{.block_q = 64, .block_kv = 64, .round_p = false, .finite_neg_inf = false};  // the f32 flash baseline's config
  const ReplicaConfig kernel{.block_q = 16, .block_kv = 32, .round_p = true, .finite_neg_inf = true};  // P rounded, finite fill
  const Case cases[] = {
      {{1, 2, 2, 200, 150, 32, 32, Causal::none, {}, DType::f32}, fp32},
      {{2, 4, 2, 150, 97, 64, 48, Causal::bottom_right, {}, DType::f32}, fp32},  // GQA, Sq > Skv: empty rows
      {{1, 6, 2, 97, 211, 16, 16, Causal::top_left, {}, DType::f32}, fp32},
      {{1, 2, 1, 130, 70, 32, 32, Causal::top_left, {}, DType::bf16}, kernel},
      {{2, 2, 2, 75, 180, 24, 40, Causal::bottom_right, {}, DType::f16}, kernel},
  };
  uint64_t salt = 35;
  for (const Case& c : cases) {
    SCOPED_TRACE(to_string(c.p));
    const Problem& p = c.p;
    const Inputs in = make_inputs(p, flashcheck::testing::seed_for(salt++));
    const std::vector<int64_t> rows = edge_and_random_rows(p.seq_q, c.cfg.block_q, CounterRng(flashcheck::testing::seed_for(34), salt));
    const ReplicaResult full = replica_attention(p, in, c.cfg);
    const ReplicaResult sub = replica_attention(p, in, c.cfg, {}, rows);
    const int64_t nr = static_cast<int64_t>(rows.size()), dv = p.head_dim_v;
    ASSERT_EQ(sub.num_rows(), nr);
    ASSERT_EQ(sub.rows, RowSet::same(p, rows));
    ASSERT_EQ(sub.o.size(), static_cast<size_t>(p.batch * p.heads_q * nr * dv));
    ASSERT_EQ(sub.lse.size(), static_cast<size_t>(p.batch * p.heads_q * nr));
    int64_t inexact = 0;
    double worst = 0;  // largest difference in the units the bound is written in (f32 o, and LSE)
    constexpr double eps = std::numeric_limits<float>::epsilon();
    auto norm = [](const float* x, int64_t n) {
      double s2 = 0;
      for (int64_t i = 0; i < n; ++i) s2 += static_cast<double>(x[i]) * x[i];
      return std::sqrt(s2);
    };
    for (int64_t bh = 0; bh < p.batch * p.heads_q; ++bh) {
      const int64_t bhk = bh / p.heads_q * p.heads_kv + p.kv_head(bh % p.heads_q);
      double kmax = 0, vmax = 0;  // the head's largest ‖k_j‖ and |v|
      for (int64_t j = 0; j < p.seq_kv; ++j) kmax = std::max(kmax, norm(&in.k[static_cast<size_t>((bhk * p.seq_kv + j) * p.head_dim_qk)], p.head_dim_qk));
      for (int64_t e = 0; e < p.seq_kv * dv; ++e) vmax = std::max<double>(vmax, std::fabs(in.v[static_cast<size_t>(bhk * p.seq_kv * dv + e)]));
      for (int64_t ri = 0; ri < nr; ++ri) {
        const int64_t r = rows[static_cast<size_t>(ri)];
        const float* a = &sub.o[static_cast<size_t>((bh * nr + ri) * dv)];
        const float* e = &full.o[static_cast<size_t>((bh * p.seq_q + r) * dv)];
        double row_max = 0;
        for (int64_t d = 0; d < dv; ++d) row_max = std::max<double>(row_max, std::fabs(e[d]));
        // Cauchy–Schwarz bound on the row's |score·scale|: an ulp of a score moves p by that many ulps.
        const double sbound = p.softmax_scale() * norm(&in.q[static_cast<size_t>((bh * p.seq_q + r) * p.head_dim_qk)], p.head_dim_qk) * kmax;
        const double unit = eps * (row_max + sbound * vmax);
        const int mantissa = p.dtype == DType::f16 ? 10 : p.dtype == DType::bf16 ? 7 : 23;
        const double u_p = c.cfg.round_p && p.dtype != DType::f32 ? unit_roundoff(p.dtype) : 0.0;
        const double tol = 4 * unit + (p.dtype == DType::f32 ? 0.0 : std::ldexp(row_max, -mantissa)) + 2 * u_p * vmax;
        for (int64_t d = 0; d < dv; ++d) {
          ASSERT_NEAR(a[d], e[d], tol) << "bh " << bh << " row " << r << " d " << d;
          inexact += a[d] != e[d];
          if (p.dtype == DType::f32 && unit > 0) worst = std::max(worst, std::fabs(a[d] - e[d]) / unit);
        }
        const float la = sub.lse[static_cast<size_t>(bh * nr + ri)], le = full.lse[static_cast<size_t>(bh * p.seq_q + r)];
        if (std::isinf(le)) {
          ASSERT_EQ(la, le) << "bh " << bh << " row " << r;
        } else {
          const double lunit = eps * (1 + std::fabs(le) + sbound);
          ASSERT_NEAR(la, le, 4 * lunit) << "bh " << bh << " row " << r;
          inexact += la != le;
          worst = std::max(worst, std::fabs(la - le) / lunit);
        }
      }
    }
    std::printf("%s: %zu rows, %lld values not bit-exact, worst %.3f units\n", to_string(p).c_str(), rows.size(),
                static_cast<long long>(inexact), worst);
  }
}

TEST(Replica, TraceRowsOfASubsetNameRealRowsAndEndAtTheirResult) {
  Problem p{1, 2, 1, 90, 120, 16, 16, Causal::bottom_right, {}, DType::f32};
  const Inputs in = make_inputs(p, flashcheck::testing::seed_for(40));
  const ReplicaConfig cfg{.block_q = 16, .block_kv = 32, .round_p = false, .finite_neg_inf = false};
  const std::vector<int64_t> rows{3, 17, 40, 89}, trace{17, 50, 89};  // 50 is traced but not evaluated
  const ReplicaResult r = replica_attention(p, in, cfg, trace, rows);
  std::set<int64_t> traced;
  for (const TraceEntry& t : r.trace) traced.insert(t.row);
  EXPECT_EQ(traced, (std::set<int64_t>{17, 89}));
  for (int64_t h = 0; h < p.heads_q; ++h)
    for (int64_t ri : {1, 3}) {  // rows 17 and 89
      const TraceEntry* last = nullptr;
      for (const TraceEntry& t : r.trace)
        if (t.head == h && t.row == rows[static_cast<size_t>(ri)]) last = &t;
      ASSERT_NE(last, nullptr);
      for (int64_t d = 0; d < p.head_dim_v; ++d)
        EXPECT_NEAR(last->o[static_cast<size_t>(d)] / last->l, r.o[static_cast<size_t>((h * 4 + ri) * p.head_dim_v + d)], 1e-6);
    }
}

TEST(Replica, RowsOutOfRangeOrNotAscendingAreRejected) {
  Problem p{1, 1, 1, 20, 20, 8, 8, Causal::none, {}, DType::f32};
  const Inputs in = make_inputs(p, flashcheck::testing::seed_for(41));
  for (std::vector<int64_t> bad : {std::vector<int64_t>{0, 20}, std::vector<int64_t>{-1, 3}})
    EXPECT_THROW(replica_attention(p, in, {}, {}, bad), std::out_of_range);
  for (std::vector<int64_t> bad : {std::vector<int64_t>{5, 3}, std::vector<int64_t>{2, 7, 7}})
    EXPECT_THROW(replica_attention(p, in, {}, {}, bad), std::invalid_argument);
  EXPECT_NO_THROW(replica_attention(p, in, {}, {}, std::vector<int64_t>{0, 19}));
}

}  // namespace
}  // namespace flashcheck
