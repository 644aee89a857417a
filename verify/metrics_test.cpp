#include "verify/metrics.h"

#include <gtest/gtest.h>

#include <cmath>

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
