#include "verify/metrics.h"

#include <gtest/gtest.h>

#include <cmath>

#include "reference/rng.h"
#include "testing/test_seed.h"

namespace flashcheck {
namespace {

TEST(Ulp, IsSymmetricAcrossSignedZeroAndCountsRepresentableSteps) {
  for (DType d : {DType::f32, DType::f16, DType::bf16}) {
    EXPECT_EQ(ulp_distance(d, 0.0f, -0.0f), 0u);
    const float tiny = d == DType::f32 ? std::numeric_limits<float>::denorm_min()
                                       : (d == DType::f16 ? 0x1p-24f : bf16_bits_to_f32(1));
    EXPECT_EQ(ulp_distance(d, tiny, -tiny), 2u) << to_string(d);  // one step each side of zero
    EXPECT_EQ(ulp_distance(d, -tiny, tiny), 2u);
    const float one = 1.0f, next = d == DType::f32 ? std::nextafter(1.0f, 2.0f) : (d == DType::f16 ? 1.0f + 0x1p-10f : 1.0f + 0x1p-7f);
    EXPECT_EQ(ulp_distance(d, one, next), 1u);
    EXPECT_EQ(ulp_distance(d, next, one), 1u);
  }
}

// Rounding a double once to a 16-bit dtype is not rounding it to fp32 and then to the dtype: just
// above a bf16 tie, fp32 rounds onto the tie, which then goes to even.
TEST(RoundNearestEven, RoundsOnceFromDouble) {
  const double above_tie = 1.0 + 0x1p-8 + 0x1p-30;
  EXPECT_EQ(round_to(DType::bf16, static_cast<float>(above_tie)), 1.0f);  // the double rounding
  EXPECT_EQ(round_nearest_even(DType::bf16, above_tie), 1.0f + 0x1p-7f);
  EXPECT_EQ(round_nearest_even(DType::bf16, -above_tie), -1.0f - 0x1p-7f);
  EXPECT_EQ(round_nearest_even(DType::bf16, 1.0 + 0x1p-8), 1.0f);               // a true tie: to even
  EXPECT_EQ(round_nearest_even(DType::bf16, 1.0 + 3 * 0x1p-8), 1.0f + 0x1p-6f);  // likewise, upward
  EXPECT_EQ(round_nearest_even(DType::f16, 1.0 + 0x1p-11 + 0x1p-40), 1.0f + 0x1p-10f);
  EXPECT_EQ(round_nearest_even(DType::f32, 1.0 + 0x1p-24 + 0x1p-40), 1.0f + 0x1p-23f);
  // Any double: the result is representable and no representable neighbour is nearer.
  CounterRng rng(flashcheck::testing::seed_for(77), 1);
  for (DType d : {DType::f16, DType::bf16})
    for (uint64_t i = 0; i < 20000; ++i) {
      const double x = rng.normal(i) * std::ldexp(1.0, static_cast<int>(rng.uniform(i, 2) * 20) - 10);
      const float r = round_nearest_even(d, x);
      ASSERT_EQ(round_to(d, r), r) << x;
      const double err = std::fabs(static_cast<double>(r) - x), ulp = ulp_at(d, r);
      ASSERT_LE(err, 0.5 * ulp_at(d, x) * (1 + 1e-12)) << to_string(d) << " x=" << x << " r=" << r << " ulp " << ulp;
    }
}

// Repeated pairs count once, and the kept set is the same however the pairs are split between
// sketches and merged: the report is the same bits on any thread count.
TEST(DistinctPairs, CountsRepeatsOnceAndMergesInAnyOrder) {
  CounterRng rng(flashcheck::testing::seed_for(78), 2);
  std::vector<std::pair<float, double>> pairs;
  for (uint64_t i = 0; i < 3000; ++i) {
    const double o = rng.normal(i);
    pairs.push_back({round_to(DType::bf16, static_cast<float>(o)), o});
  }
  DistinctPairs once, repeated;
  for (auto [k, o] : pairs) once.add(k, o);
  for (int copy = 0; copy < 7; ++copy)  // every pair 7 times, as 7 GQA heads or identical rows would give it
    for (auto [k, o] : pairs) repeated.add(k, o);
  EXPECT_TRUE(once.exact());
  EXPECT_EQ(once.distinct(), 3000.0);
  EXPECT_EQ(repeated.distinct(), 3000.0);
  // Split into three sketches, merged in two orders: the same pairs, in the same order.
  DistinctPairs a, b, c;
  for (size_t i = 0; i < pairs.size(); ++i) (i % 3 == 0 ? a : i % 3 == 1 ? b : c).add(pairs[i].first, pairs[i].second);
  DistinctPairs abc = a, cba = c;
  abc.merge(b);
  abc.merge(c);
  cba.merge(b);
  cba.merge(a);
  ASSERT_EQ(abc.pairs().size(), repeated.pairs().size());
  for (size_t i = 0; i < abc.pairs().size(); ++i) {
    EXPECT_EQ(abc.pairs()[i].hash, repeated.pairs()[i].hash);
    EXPECT_EQ(abc.pairs()[i].hash, cba.pairs()[i].hash);
  }
  // The same kernel value against different oracle values (or the reverse) is a different pair.
  DistinctPairs two;
  two.add(1.0f, 1.0);
  two.add(1.0f, 1.001);
  two.add(1.0f, 1.0);
  EXPECT_EQ(two.distinct(), 2.0);
}

// Past its capacity the sketch keeps a sample and estimates how many distinct pairs there are.
TEST(DistinctPairs, EstimatesTheCountPastItsCapacity) {
  CounterRng rng(flashcheck::testing::seed_for(79), 3);
  const uint64_t n = 5 * DistinctPairs::kCapacity;
  DistinctPairs s;
  for (uint64_t i = 0; i < n; ++i) s.add(static_cast<float>(i), rng.uniform(i));
  EXPECT_FALSE(s.exact());
  EXPECT_EQ(s.pairs().size(), DistinctPairs::kCapacity);
  // The K-minimum-values estimate's relative standard error is 1/sqrt(K - 2) (0.8% here): 6 of them.
  EXPECT_NEAR(s.distinct() / static_cast<double>(n), 1.0, 0.05);
}

// The rounding figures over the distinct pairs: a one-sided error shows at full size whatever its
// multiplicity, and alternating errors cancel.
TEST(RoundingEvidence, MeansOverDistinctPairs) {
  DistinctPairs up;
  for (int i = 0; i < 100; ++i) {
    const double o = 1.0 + (i + 0.25) * 0x1p-10;  // a quarter ULP (f16 at 1: 2^-10) above a representable value
    const float k = static_cast<float>(1.0 + (i + 1) * 0x1p-10);
    for (int copy = 0; copy < (i == 0 ? 1000 : 1); ++copy) up.add(k, o);
  }
  const RoundingEvidence ev = rounding_evidence(DType::f16, up, 1);
  EXPECT_EQ(ev.distinct, 100.0);
  EXPECT_NEAR(ev.bias, 0.75, 1e-9);  // every kernel value 3/4 ULP above: the 1000 copies of one weigh as one
  EXPECT_EQ(ev.frac_over_n, 0.0);    // 1 ULP from the rounded oracle at most
}

TEST(Ulp, NanIsNoWildcard) {
  const float nan = std::nanf("");
  EXPECT_EQ(ulp_distance(DType::bf16, nan, nan), 0u);
  EXPECT_EQ(ulp_distance(DType::bf16, nan, 1.0f), kNanUlp);
  EXPECT_EQ(ulp_distance(DType::f32, 1.0f, nan), kNanUlp);
}

TEST(Poison, IsAQuietNanNoArithmeticProducesAndSurvivesWidening) {
  for (DType d : {DType::f32, DType::f16, DType::bf16}) {
    float p = poison_value(d);
    EXPECT_TRUE(std::isnan(p));
    EXPECT_TRUE(is_poison(d, p));
    EXPECT_FALSE(is_poison(d, std::nanf("")));
    EXPECT_FALSE(is_poison(d, 0.0f / 0.0f * 1.0f));
    EXPECT_FALSE(is_poison(d, -std::nanf("")));
  }
}

TEST(Cosine, ZerosCannotPass) {
  CosineAccumulator c;
  for (int i = 0; i < 10; ++i) c.add(0.0, 1.0 + i);
  EXPECT_EQ(c.value(), 0.0);
  CosineAccumulator same;
  for (int i = 0; i < 10; ++i) same.add(i - 3.0, i - 3.0);
  EXPECT_EQ(same.value(), 1.0);
  CosineAccumulator scaled;  // plain cosine would call 2x a perfect match; this form does not
  for (int i = 0; i < 10; ++i) scaled.add(2.0 * (i + 1), i + 1);
  EXPECT_LT(scaled.value(), 0.81);
}

}  // namespace
}  // namespace flashcheck
