#include "reference/dtype.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>

#include "testing/test_seed.h"

namespace flashcheck {
namespace {

// The value a 16-bit pattern stands for, computed from the IEEE formula in double (independent of
// the bit tricks under test).
double f16_value(uint16_t h) {
  int sign = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double v = e == 0 ? std::ldexp(m, -24) : (e == 31 ? (m ? NAN : INFINITY) : std::ldexp(1024 + m, e - 25));
  return sign ? -v : v;
}
double bf16_value(uint16_t h) {
  int sign = h >> 15, e = (h >> 7) & 255, m = h & 127;
  double v = e == 0 ? std::ldexp(m, -133) : (e == 255 ? (m ? NAN : INFINITY) : std::ldexp(128 + m, e - 134));
  return sign ? -v : v;
}

TEST(DType, F16ToF32ExactForAll65536Patterns) {
  for (uint32_t h = 0; h < 65536; ++h) {
    double want = f16_value(static_cast<uint16_t>(h));
    float got = f16_bits_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << std::hex << h;
    } else {
      ASSERT_EQ(static_cast<double>(got), want) << std::hex << h;
      ASSERT_EQ(std::signbit(got), (h & 0x8000) != 0) << std::hex << h;  // ±0 keep their sign
    }
  }
}

TEST(DType, Bf16ToF32ExactForAll65536Patterns) {
  for (uint32_t h = 0; h < 65536; ++h) {
    double want = bf16_value(static_cast<uint16_t>(h));
    float got = bf16_bits_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << std::hex << h;
    } else {
      ASSERT_EQ(static_cast<double>(got), want) << std::hex << h;
    }
  }
}

TEST(DType, RoundTripIsIdentityForAll65536Patterns) {
  for (uint32_t h = 0; h < 65536; ++h) {
    auto b = static_cast<uint16_t>(h);
    if (std::isnan(f16_value(b))) {
      EXPECT_TRUE(std::isnan(f16_bits_to_f32(f32_to_f16_bits(f16_bits_to_f32(b)))));
    } else {
      ASSERT_EQ(f32_to_f16_bits(f16_bits_to_f32(b)), b) << std::hex << h;
    }
    if (std::isnan(bf16_value(b))) {
      // A NaN must stay NaN: truncating the payload must never produce the Inf pattern.
      EXPECT_TRUE(std::isnan(bf16_bits_to_f32(f32_to_bf16_bits(bf16_bits_to_f32(b)))));
    } else {
      ASSERT_EQ(f32_to_bf16_bits(bf16_bits_to_f32(b)), b) << std::hex << h;
    }
  }
}

// For every pair of adjacent finite 16-bit values, the exact midpoint rounds to the even one and
// the floats just either side of it round to the nearer one. This covers every rounding boundary,
// subnormals, the overflow boundary to Inf and the ±0 crossing.
template <class ToBits, class Value>
void check_all_midpoints(ToBits to_bits, Value value, uint16_t max_finite) {
  for (int sign = 0; sign < 2; ++sign) {
    for (uint32_t m = 0; m <= max_finite; ++m) {
      uint16_t lo = static_cast<uint16_t>(m | (sign << 15));
      double a = value(lo);
      // The next magnitude; past max finite the "next value" is 2^(emax+1), the overflow threshold.
      double b = m < max_finite ? value(static_cast<uint16_t>(lo + 1)) : 2 * a - value(static_cast<uint16_t>(lo - 1));
      double mid = (a + b) / 2;
      float fmid = static_cast<float>(mid);
      if (static_cast<double>(fmid) != mid) continue;  // midpoint not a float (never for these formats)
      uint16_t even = (m & 1) ? static_cast<uint16_t>(lo + 1) : lo;
      if (m == max_finite) even = static_cast<uint16_t>((sign << 15) | (max_finite + 1));  // ties to Inf
      ASSERT_EQ(to_bits(fmid), even) << "midpoint above " << std::hex << lo;
      float below = std::nextafter(fmid, static_cast<float>(a));
      float above = std::nextafter(fmid, static_cast<float>(m < max_finite ? b : (sign ? -INFINITY : INFINITY)));
      ASSERT_EQ(to_bits(below), lo) << "just inside " << std::hex << lo;
      uint16_t up = static_cast<uint16_t>((sign << 15) | (m + 1));
      ASSERT_EQ(to_bits(above), up) << "just past the midpoint above " << std::hex << lo;
    }
  }
}

TEST(DType, F32ToF16RoundsToNearestEvenAtEveryBoundary) {
  check_all_midpoints(f32_to_f16_bits, f16_value, 0x7bff);
}

TEST(DType, F32ToBf16RoundsToNearestEvenAtEveryBoundary) {
  check_all_midpoints(f32_to_bf16_bits, bf16_value, 0x7f7f);
}

TEST(DType, SpecialValues) {
  EXPECT_EQ(f32_to_f16_bits(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16_bits(65520.0f), 0x7c00);  // the midpoint to 2^16 rounds to Inf
  EXPECT_EQ(f32_to_f16_bits(-INFINITY), 0xfc00);
  EXPECT_EQ(f32_to_f16_bits(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_f16_bits(0x1p-25f), 0x0000);               // exactly half the smallest subnormal: to even
  EXPECT_EQ(f32_to_f16_bits(std::nextafter(0x1p-25f, 1.0f)), 0x0001);
  EXPECT_EQ(f32_to_bf16_bits(std::numeric_limits<float>::max()), 0x7f80);  // rounds past max-finite bf16
  EXPECT_EQ(f32_to_bf16_bits(std::numeric_limits<float>::denorm_min()), 0x0000);
  // A signalling-looking NaN whose payload lives only in the low 16 bits must not become Inf.
  EXPECT_TRUE(std::isnan(bf16_bits_to_f32(f32_to_bf16_bits(std::bit_cast<float>(0x7f800001u)))));
  EXPECT_TRUE(std::isnan(f16_bits_to_f32(f32_to_f16_bits(std::bit_cast<float>(0x7f800001u)))));
}

TEST(DType, RandomFloatsRoundToTheNearerNeighbour) {
  std::mt19937_64 gen(flashcheck::testing::seed_for(11));
  for (int i = 0; i < 200000; ++i) {
    float x = std::bit_cast<float>(static_cast<uint32_t>(gen()));
    if (!std::isfinite(x)) continue;
    for (auto [bits, value, maxf] : {std::tuple{f32_to_f16_bits(x), &f16_value, 65504.0},
                                     std::tuple{f32_to_bf16_bits(x), &bf16_value, 3.3895313892515355e38}}) {
      double r = value(bits);
      if (std::isinf(r)) {
        ASSERT_GE(std::fabs(x), maxf) << x;
        continue;
      }
      // No representable neighbour of r is strictly closer to x.
      for (int d : {-1, 1}) {
        uint16_t nb = static_cast<uint16_t>(bits + d);
        double rn = value(nb);
        if (std::isnan(rn) || std::isinf(rn) || (nb & 0x7fff) == 0x7fff || ((bits ^ nb) & 0x8000)) continue;
        ASSERT_LE(std::fabs(r - x), std::fabs(rn - x)) << x;
      }
    }
  }
}

}  // namespace
}  // namespace flashcheck
