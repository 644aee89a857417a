#include "reference/replica.h"

#include <gtest/gtest.h>

#include <cmath>

#include "testing/test_seed.h"
#include "reference/naive.h"

namespace flashcheck {
namespace {

TEST(Replica, OneTileWithoutRoundingIsTheNaiveResultToFp32) {
  Problem p{1, 2, 2, 37, 45, 32, 32, Causal::none, {}, DType::f32};
  Inputs in = make_inputs(p, flashcheck::testing::seed_for(31));
  ReplicaConfig cfg{64, 64, false, false, false, true};
  ReplicaResult r = replica_attention(p, in, cfg);
  OracleResult n = naive_attention(p, in);
  for (size_t i = 0; i < r.o.size(); ++i) ASSERT_NEAR(r.o[i], n.o[i], 2e-6);
  for (size_t i = 0; i < r.lse.size(); ++i) ASSERT_NEAR(r.lse[i], n.lse[i], 2e-6 * (1 + std::fabs(n.lse[i])));
}

TEST(Replica, TraceHasOneEntryPerVisitedTileAndEndsAtTheResult) {
  Problem p{1, 1, 1, 40, 100, 16, 16, Causal::bottom_right, {}, DType::f32};
  Inputs in = make_inputs(p, flashcheck::testing::seed_for(32));
  ReplicaConfig cfg{16, 32, true, false, true, true};
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
  ReplicaConfig a{16, 16, true, true, false, true}, b = a;
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
  ReplicaConfig finite{16, 16, true, false, true, true}, true_inf = finite;
  true_inf.finite_neg_inf = false;
  EXPECT_EQ(replica_attention(p, in, finite).o[0], 0.0f);  // lost
  EXPECT_EQ(replica_attention(p, in, true_inf).o[0], 5.0f);  // the truth: key 0 dominates by 1e9
}

}  // namespace
}  // namespace flashcheck
