#include "verify/metrics.h"

#include <bit>
#include <cmath>

namespace flashcheck {

uint32_t poison_bits(DType d) {
  switch (d) {
    case DType::f32: return 0xFFE5A5A5u;
    case DType::f16: return 0xFFA5u;
    case DType::bf16: return 0xFFE5u;
  }
  return 0;
}

float poison_value(DType d) {
  switch (d) {
    case DType::f32: return std::bit_cast<float>(poison_bits(d));
    case DType::f16: return f16_bits_to_f32(static_cast<uint16_t>(poison_bits(d)));
    case DType::bf16: return bf16_bits_to_f32(static_cast<uint16_t>(poison_bits(d)));
  }
  return 0;
}

bool is_poison(DType d, float widened) {
  // Called once per output element: the widened patterns are computed once.
  static const uint32_t widened_bits[3] = {std::bit_cast<uint32_t>(poison_value(DType::f32)),
                                           std::bit_cast<uint32_t>(poison_value(DType::f16)),
                                           std::bit_cast<uint32_t>(poison_value(DType::bf16))};
  const int i = d == DType::f32 ? 0 : d == DType::f16 ? 1 : 2;
  return std::bit_cast<uint32_t>(widened) == widened_bits[i];
}

int64_t ordered_bits(DType d, float x) {
  int64_t mag, neg;
  switch (d) {
    case DType::f32: {
      uint32_t u = std::bit_cast<uint32_t>(x);
      mag = u & 0x7fffffffu;
      neg = u >> 31;
      break;
    }
    case DType::f16: {
      uint16_t h = f32_to_f16_bits(x);
      mag = h & 0x7fff;
      neg = h >> 15;
      break;
    }
    default: {
      uint16_t h = f32_to_bf16_bits(x);
      mag = h & 0x7fff;
      neg = h >> 15;
      break;
    }
  }
  return neg ? -mag : mag;
}

uint64_t ulp_distance(DType d, float a, float b) {
  const bool na = std::isnan(a), nb = std::isnan(b);
  if (na || nb) return (na && nb) ? 0 : kNanUlp;
  const int64_t x = ordered_bits(d, a), y = ordered_bits(d, b);
  return static_cast<uint64_t>(x > y ? x - y : y - x);
}

double ulp_at(DType d, double x) {
  // mantissa bits after the point, and the smallest normal exponent, per dtype
  const int frac_bits = d == DType::f32 ? 23 : d == DType::f16 ? 10 : 7;
  const int min_exp = d == DType::f16 ? -14 : -126;
  int e = 0;
  std::frexp(std::fabs(x), &e);  // |x| = m·2^e, m in [0.5, 1): the leading bit is 2^(e-1)
  return std::ldexp(1.0, std::max(e - 1, min_exp) - frac_bits);
}

}  // namespace flashcheck
