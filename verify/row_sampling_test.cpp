// Row sampling may not hide a bad row (issue #21 item 7): every query tile of the kernel has a
// sampled row, and a row whose output gives itself away without an oracle (all zeros where the row
// sees a key, poison left, NaN or Inf) is judged wherever it lies; today an all-zero row 7000 of
// Sq = 8192 passed the default 4096-row sample.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "reference/replica.h"
#include "reference/rng.h"
#include "testing/test_seed.h"
#include "verify/expected.h"
#include "verify/judge.h"
#include "verify/metrics.h"

namespace flashcheck {
namespace {

// Every tile [t·tile, (t+1)·tile) holds a sampled row, however many tiles the budget has room for.
TEST(SampleRows, EveryQueryTileHasARowWhateverTheBudget) {
  for (int64_t sq : {4097, 8192, 10000, 100000, 131072})
    for (int64_t tile : {16, 64, 128, 176})
      for (int64_t count : {64, 500, 4096}) {
        const std::vector<int64_t> rows = sample_rows(sq, count, 64, tile);
        if (sq <= count) continue;  // every row
        ASSERT_TRUE(std::is_sorted(rows.begin(), rows.end()));
        for (int64_t t = 0; t * tile < sq; ++t) {
          const auto it = std::lower_bound(rows.begin(), rows.end(), t * tile);
          ASSERT_TRUE(it != rows.end() && *it < std::min(sq, (t + 1) * tile))
              << "sq " << sq << " tile " << tile << " count " << count << ": no sampled row in tile " << t;
        }
      }
}

// A long single-head problem the replica computes correctly, judged with the default sample.
struct LongRow {
  Problem p{1, 1, 1, 8192, 48, 32, 32, Causal::none, {}, DType::f16};
  Inputs in;
  std::vector<float> o, lse;
  LongRow() {
    in = make_inputs(p, testing::seed_for(0x7000), Dist::normal);
    ReplicaResult r = replica_attention(p, in, ReplicaConfig{});
    o = std::move(r.o);
    lse = std::move(r.lse);
  }
  Report judge(const std::vector<float>& out) const {
    return flashcheck::judge(p, in, KernelOutput{out, lse}, Declared{}, JudgeOptions{});
  }
};

std::string failed_text(const Report& r) {
  std::string s;
  for (const std::string& f : r.failed()) s += f + " ";
  return s;
}

TEST(JudgedRows, OneBadRowAnywhereInALongSequenceFails) {
  const LongRow f;
  ASSERT_GT(f.p.seq_q, kDefaultMaxRows) << "the point is a sampled problem";
  ASSERT_TRUE(f.judge(f.o).pass()) << to_text(f.judge(f.o));
  const CounterRng rng(testing::seed_for(0x7001), 1);
  std::vector<int64_t> rows{7000};
  for (uint64_t i = 0; i < 4; ++i) rows.push_back(static_cast<int64_t>(rng.uniform(i) * static_cast<double>(f.p.seq_q)));
  const int64_t dv = f.p.head_dim_v;
  for (int64_t r : rows) {
    SCOPED_TRACE("row " + std::to_string(r));
    auto bad = [&](float x) {
      std::vector<float> o = f.o;
      std::fill(o.begin() + r * dv, o.begin() + (r + 1) * dv, x);
      return f.judge(o);
    };
    const Report zero = bad(0.0f);
    EXPECT_FALSE(zero.pass()) << "an all-zero row passed";
    const Report nan = bad(std::nanf(""));
    EXPECT_FALSE(nan.pass()) << "a NaN row passed";
    const Report unwritten = bad(poison_value(DType::f16));
    EXPECT_FALSE(unwritten.pass()) << "an unwritten row passed";
    EXPECT_NE(failed_text(unwritten).find("unwritten"), std::string::npos) << failed_text(unwritten);
  }
}

// Rows that only look suspicious are judged like any other: a row that sees no key is all zeros
// by convention, and a correct output with many of them (causal, Sq > Skv) still passes.
TEST(JudgedRows, RowsThatSeeNoKeyAreNoSuspects) {
  LongRow f;
  f.p.causal = Causal::bottom_right;  // Sq − Skv rows see no key
  f.in = make_inputs(f.p, testing::seed_for(0x7002), Dist::normal);
  ReplicaResult r = replica_attention(f.p, f.in, ReplicaConfig{});
  f.o = r.o;
  f.lse = r.lse;
  const Report rep = f.judge(f.o);
  EXPECT_TRUE(rep.pass()) << to_text(rep);
}

}  // namespace
}  // namespace flashcheck
