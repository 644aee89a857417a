#include "reference/naive.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cmath>
#include <limits>

#include "testing/test_seed.h"

namespace flashcheck {
namespace {

// A second, deliberately dumb statement of attention: long double, one row at a time, the mask
// written out from its definition (not from mask.h).
void textbook(const Problem& p, const Inputs& in, int64_t b, int64_t h, int64_t i, std::vector<long double>& o,
              long double& lse) {
  const int64_t hk = h / (p.heads_q / p.heads_kv);
  const float* q = &in.q[((b * p.heads_q + h) * p.seq_q + i) * p.head_dim_qk];
  std::vector<long double> s;
  for (int64_t j = 0; j < p.seq_kv; ++j) {
    bool vis = p.causal == Causal::none || (p.causal == Causal::top_left && j <= i) ||
               (p.causal == Causal::bottom_right && j <= i + p.seq_kv - p.seq_q);
    if (!vis) continue;
    const float* k = &in.k[((b * p.heads_kv + hk) * p.seq_kv + j) * p.head_dim_qk];
    long double dot = 0;
    for (int64_t d = 0; d < p.head_dim_qk; ++d) dot += static_cast<long double>(q[d]) * k[d];
    s.push_back(dot * static_cast<long double>(p.softmax_scale()));
  }
  o.assign(static_cast<size_t>(p.head_dim_v), 0.0L);
  if (s.empty()) {
    lse = -INFINITY;
    return;
  }
  long double m = *std::max_element(s.begin(), s.end()), l = 0;
  for (auto x : s) l += std::exp(x - m);
  lse = m + std::log(l);
  for (size_t j = 0; j < s.size(); ++j) {
    const float* v = &in.v[((b * p.heads_kv + hk) * p.seq_kv + static_cast<int64_t>(j)) * p.head_dim_v];
    for (int64_t d = 0; d < p.head_dim_v; ++d) o[static_cast<size_t>(d)] += std::exp(s[j] - m) / l * v[d];
  }
}

void expect_matches_textbook(const Problem& p, const Inputs& in) {
  OracleResult r = naive_attention(p, in);
  std::vector<long double> o;
  long double lse;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_q; ++h)
      for (int64_t i = 0; i < p.seq_q; ++i) {
        textbook(p, in, b, h, i, o, lse);
        const size_t row = static_cast<size_t>((b * p.heads_q + h) * p.seq_q + i);
        if (std::isinf(lse)) {
          ASSERT_EQ(r.lse[row], -INFINITY);
        } else {
          ASSERT_NEAR(r.lse[row], static_cast<double>(lse), 1e-12 * (1 + std::fabs(static_cast<double>(lse)))) << p;
        }
        for (int64_t d = 0; d < p.head_dim_v; ++d)
          ASSERT_NEAR(r.o[row * p.head_dim_v + d], static_cast<double>(o[d]), 1e-12) << p << " row " << i;
      }
}

TEST(Naive, MatchesTextbookOnSmallProblems) {
  uint64_t seed = flashcheck::testing::seed_for(21);
  for (Causal c : {Causal::none, Causal::top_left, Causal::bottom_right})
    for (auto [sq, skv] : {std::pair{7, 7}, {5, 13}, {13, 5}, {1, 1}, {70, 67}}) {
      Problem p{2, 4, 2, sq, skv, 24, 16, c, {}, DType::f32};
      expect_matches_textbook(p, make_inputs(p, seed++, Dist::normal));
    }
}

// Tall row blocks, several per head, so the schedule's last round is halved (reference/naive.cpp)
// whenever more than one thread runs: a split must not change which keys a row sees.
TEST(Naive, MatchesTextbookWithTallBlocksSplitAtTheEnd) {
  uint64_t seed = flashcheck::testing::seed_for(28);
  for (Causal c : {Causal::none, Causal::top_left, Causal::bottom_right}) {
    Problem p{1, 3, 1, 300, 260, 16, 16, c, {}, DType::f32};
    expect_matches_textbook(p, make_inputs(p, seed++, Dist::normal));
  }
}

TEST(Naive, EmptyRowsAreZeroWithMinusInfLse) {
  Problem p{1, 1, 1, 9, 4, 8, 8, Causal::bottom_right, {}, DType::bf16};
  OracleResult r = naive_attention(p, make_inputs(p, flashcheck::testing::seed_for(22)));
  for (int i = 0; i < 9; ++i) {
    bool empty = i < 5;  // seq_q - seq_kv rows see nothing
    EXPECT_EQ(std::isinf(r.lse[i]) && r.lse[i] < 0, empty) << i;
    if (empty) {
      for (int d = 0; d < 8; ++d) EXPECT_EQ(r.o[i * 8 + d], 0.0);
    }
  }
}

// The output is sized without a zero pass (big_vector.h), so every element must be written: rows
// that see no key (alignment, windows, seqused, empty sequences, whole blocks of them) are 0 even
// when the buffer starts as NaN.
TEST(Naive, EveryOutputElementIsWrittenEmptyRowsZero) {
  poison_uninit_for_tests() = true;
  const char* lines[] = {
      "b=1 hq=2 hkv=1 sq=700 skv=40 d=16 causal=bottom_right dtype=bf16",  // 660 leading empty rows: whole blocks
      "b=2 hq=2 hkv=2 sq=300 skv=300 d=16 causal=none dtype=f16 window=0,0 used=0,7",
      "b=3 hq=2 hkv=1 sq=5,0,9 skv=0,6,12 d=16 causal=top_left dtype=bf16 layout=thd",
      "b=1 hq=1 hkv=1 sq=600 skv=500 d=8 causal=none dtype=f32 window=-1,2",  // bottom-right: rows < 98
  };
  for (const char* line : lines) {
    const Problem p = parse_problem(line);
    const Inputs in = make_inputs(p, flashcheck::testing::seed_for(25));
    std::vector<RowSet> sets{RowSet::all(p)};
    if (p.layout != Layout::thd) sets.push_back(RowSet::same(p, std::vector<int64_t>{0, 1, p.seq_q - 1}));
    for (const RowSet& rows : sets) {
      const OracleResult r = naive_attention(p, in, rows);
      int64_t unwritten = 0, empty = 0;
      for (size_t i = 0; i < r.lse.size(); ++i) {
        const bool none = std::isinf(r.lse[i]) && r.lse[i] < 0;
        empty += none;
        for (int64_t d = 0; d < p.head_dim_v; ++d) {
          const double x = r.o[i * static_cast<size_t>(p.head_dim_v) + static_cast<size_t>(d)];
          unwritten += none ? x != 0.0 : std::isnan(x);
        }
      }
      EXPECT_EQ(unwritten, 0) << line;
      EXPECT_GT(empty, 0) << line << ": the case is meant to have rows that see nothing";
    }
  }
  poison_uninit_for_tests() = false;
}

TEST(Naive, RowSubsetEqualsTheSameRowsOfTheFullResult) {
  Problem p{2, 2, 1, 150, 90, 32, 32, Causal::top_left, {}, DType::f16};
  Inputs in = make_inputs(p, flashcheck::testing::seed_for(23));
  OracleResult full = naive_attention(p, in);
  std::vector<int64_t> rows{0, 3, 89, 90, 149};
  OracleResult part = naive_attention(p, in, rows);
  for (int64_t bh = 0; bh < 4; ++bh)
    for (size_t r = 0; r < rows.size(); ++r) {
      // Equal up to fp64 rounding: Eigen picks different GEMM kernels for different block heights.
      EXPECT_NEAR(part.lse[bh * rows.size() + r], full.lse[bh * 150 + rows[r]], 1e-14);
      for (int d = 0; d < 32; ++d)
        EXPECT_NEAR(part.o[(bh * rows.size() + r) * 32 + d], full.o[(bh * 150 + rows[r]) * 32 + d], 1e-14);
    }
}

TEST(Naive, NanPropagatesOnlyToRowsThatSeeIt) {
  Problem p{1, 1, 1, 6, 6, 8, 8, Causal::top_left, {}, DType::f32};
  Inputs in = make_inputs(p, flashcheck::testing::seed_for(24));
  in.v[4 * 8 + 2] = std::numeric_limits<float>::quiet_NaN();  // key 4: rows 4, 5 see it
  in.k[5 * 8 + 0] = std::numeric_limits<float>::infinity();   // key 5: only row 5 sees it
  OracleResult r = naive_attention(p, in);
  for (int i = 0; i < 6; ++i) {
    bool nan_row = false;
    for (int d = 0; d < 8; ++d) nan_row |= std::isnan(r.o[i * 8 + d]);
    EXPECT_EQ(nan_row, i >= 4) << "row " << i;
  }
}

TEST(Naive, HandlesSeq131072WithSampledRowsUnder1GiB) {
  Problem p{1, 1, 1, 131072, 131072, 128, 128, Causal::bottom_right, {}, DType::bf16};
  Inputs in = make_inputs(p, flashcheck::testing::seed_for(25));
  rusage before{};
  getrusage(RUSAGE_SELF, &before);
  std::vector<int64_t> rows{0, 1, 4097, 65535, 131071};
  OracleResult r = naive_attention(p, in, rows);
  rusage after{};
  getrusage(RUSAGE_SELF, &after);
  // ru_maxrss is in KiB; the inputs themselves (~200 MB) are already counted in `before`.
  EXPECT_LT(after.ru_maxrss, 1024 * 1024) << "peak RSS " << after.ru_maxrss / 1024 << " MiB";
  EXPECT_EQ(r.lse[0], r.lse[0]);
  EXPECT_NEAR(r.o[0], in.v[0], 1e-6);  // row 0 sees key 0 only
  for (double x : r.o) ASSERT_TRUE(std::isfinite(x));
}

}  // namespace
}  // namespace flashcheck
