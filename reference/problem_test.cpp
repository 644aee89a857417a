#include "reference/problem.h"

#include <gtest/gtest.h>

#include <limits>

#include "reference/mask.h"

namespace flashcheck {
namespace {

void expect_invalid(const Problem& p, const std::string& field) {
  try {
    validate(p);
    FAIL() << "accepted " << p;
  } catch (const InvalidProblem& e) {
    EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
  }
}

TEST(Problem, RejectsEachBadFieldByName) {
  Problem p;
  p.batch = 0;
  expect_invalid(p, "batch");
  p = {};
  p.seq_kv = -3;
  expect_invalid(p, "seq_kv");
  p = {};
  p.head_dim_v = 0;
  expect_invalid(p, "head_dim_v");
  p = {};
  p.heads_q = 6;
  p.heads_kv = 4;
  expect_invalid(p, "heads_q");
  p = {};
  p.scale = std::numeric_limits<double>::quiet_NaN();
  expect_invalid(p, "scale");
}

TEST(Problem, RejectsSizesWhoseElementCountsOverflow) {
  Problem p;
  p.batch = int64_t{1} << 20;
  p.heads_q = p.heads_kv = int64_t{1} << 20;
  p.seq_q = int64_t{1} << 20;
  expect_invalid(p, "overflow");
  p = {};
  p.seq_q = p.seq_kv = int64_t{1} << 33;  // each fits, their product does not
  p.head_dim_qk = p.head_dim_v = 1;
  expect_invalid(p, "overflow");
}

TEST(Problem, ParsesItsOwnPrintedForm) {
  Problem p{2, 8, 2, 97, 113, 192, 128, Causal::bottom_right, 0.125, DType::f16};
  EXPECT_EQ(parse_problem(to_string(p)), p);
  EXPECT_THROW(parse_problem("b=1 sq=x"), InvalidProblem);
  EXPECT_THROW(parse_problem("b=1 wat=3"), InvalidProblem);
  EXPECT_THROW(parse_problem("hq=3 hkv=2"), InvalidProblem);
}

TEST(Mask, AlignmentsFollowTheirDefinitions) {
  for (auto [sq, skv] : {std::pair{5, 5}, {3, 7}, {7, 3}, {1, 1}}) {
    for (Causal c : {Causal::none, Causal::top_left, Causal::bottom_right}) {
      Problem p;
      p.seq_q = sq;
      p.seq_kv = skv;
      p.causal = c;
      for (int i = 0; i < sq; ++i)
        for (int j = 0; j < skv; ++j) {
          bool want = c == Causal::none ? true : c == Causal::top_left ? j <= i : j <= i + skv - sq;
          ASSERT_EQ(key_visible(p, i, j), want) << p << " i=" << i << " j=" << j;
        }
    }
  }
}

}  // namespace
}  // namespace flashcheck
