#include "reference/rng.h"

#include <gtest/gtest.h>

#include <cmath>

#include "reference/inputs.h"

namespace flashcheck {
namespace {

// Known-answer vectors published with Random123's Philox4x32-10.
TEST(Rng, PhiloxKnownAnswers) {
  using A4 = std::array<uint32_t, 4>;
  EXPECT_EQ(philox4x32({0, 0, 0, 0}, {0, 0}), (A4{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
            (A4{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox4x32({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (A4{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(Rng, PortableLogMatchesLibm) {
  for (double x : {1e-300, 1e-10, 0.1, 0.5, 0.7071, 1.0, 1.5, 2.0, 10.0, 1e10, 1e300})
    EXPECT_NEAR(portable_log(x), std::log(x), 4e-16 * std::max(1.0, std::fabs(std::log(x)))) << x;
}

TEST(Rng, NormalsHaveTheRightMoments) {
  CounterRng rng(12345, 9);
  double s = 0, s2 = 0, s4 = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    double x = rng.normal(i);
    s += x;
    s2 += x * x;
    s4 += x * x * x * x;
  }
  EXPECT_NEAR(s / n, 0.0, 0.01);
  EXPECT_NEAR(s2 / n, 1.0, 0.02);
  EXPECT_NEAR(s4 / n, 3.0, 0.1);  // kurtosis of a Gaussian
}

// Pins the exact bits of the first normals: if this changes, every golden's inputs change.
TEST(Rng, NormalStreamIsPinned) {
  CounterRng rng(42, 1);
  double x0 = rng.normal(0), x1 = rng.normal(1);
  EXPECT_EQ(CounterRng(42, 1).normal(0), x0);
  EXPECT_NE(x0, x1);
  EXPECT_NE(CounterRng(43, 1).normal(0), x0);
  EXPECT_NE(CounterRng(42, 2).normal(0), x0);
}

TEST(Inputs, ValuesAreRepresentableInTheDtypeAndDistributionsDiffer) {
  for (DType d : {DType::f32, DType::f16, DType::bf16}) {
    Problem p{1, 2, 1, 33, 40, 16, 8, Causal::none, {}, d};
    for (Dist dist : kAllDists) {
      Inputs in = make_inputs(p, 7, dist);
      ASSERT_EQ(in.q.size(), static_cast<size_t>(p.q_elems()));
      for (float x : in.k) ASSERT_EQ(round_to(d, x), x);
      for (float x : in.q) ASSERT_TRUE(std::isfinite(x)) << to_string(dist);
      if (dist == Dist::equal_scores) {
        for (int64_t j = 1; j < p.seq_kv; ++j)
          for (int64_t c = 0; c < p.head_dim_qk; ++c) ASSERT_EQ(in.k[j * 16 + c], in.k[c]);
      }
      if (dist == Dist::constant_rows) {
        for (int64_t c = 1; c < p.head_dim_v; ++c) ASSERT_EQ(in.v[c], in.v[0]);
      }
    }
  }
}

}  // namespace
}  // namespace flashcheck
