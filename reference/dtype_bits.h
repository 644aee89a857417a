// The 16-bit dtypes' conversions, bit by bit, for host and device alike: the judge's element pass
// runs on both (verify/element_pass.h) and must round and order values identically there, so both
// sides compile this one definition instead of the host's and CUDA's own intrinsics. C++17 (nvcc
// compiles .cu files as C++17): bits move by memcpy, not std::bit_cast. reference/dtype.h's
// f32_to_bf16_bits and the others are these (dtype.cpp forwards), so the host has one definition.
#pragma once
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)  // nvcc; the host emulation of CUDA (reference/gpu_oracle/emulation) needs nothing
#define FC_HD __host__ __device__
#else
#define FC_HD
#endif

namespace flashcheck::bits {

FC_HD inline uint32_t f32_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}
FC_HD inline float f32_from_bits(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}
FC_HD inline uint64_t f64_bits(double x) {
  uint64_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

// fp32 -> 16-bit, round-to-nearest-even. NaN stays NaN (quiet, sign kept), overflow rounds to ±Inf
// exactly as IEEE 754 says (values at or past the midpoint between max-finite and 2^(emax+1)).
FC_HD inline uint16_t f32_to_bf16_bits(float x) {
  uint32_t u = f32_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    // NaN: keep sign and the top payload bits, force the quiet bit so truncation cannot make Inf.
    return static_cast<uint16_t>((u >> 16) | 0x0040u);
  }
  // Round to nearest even on the 16 dropped bits: add 0x7fff plus the lowest kept bit. A carry
  // out of the mantissa correctly bumps the exponent, and past the largest finite gives Inf.
  const uint32_t lsb = (u >> 16) & 1u;
  u += 0x7fffu + lsb;
  return static_cast<uint16_t>(u >> 16);
}

// 16-bit -> fp32 is exact for every bit pattern (subnormal halves become normal floats).
FC_HD inline float bf16_bits_to_f32(uint16_t h) { return f32_from_bits(static_cast<uint32_t>(h) << 16); }

FC_HD inline uint16_t f32_to_f16_bits(float x) {
  const uint32_t u = f32_bits(x);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
  if (abs == 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u);
  const int32_t exp = static_cast<int32_t>(abs >> 23) - 127;  // unbiased fp32 exponent
  const uint32_t mant = abs & 0x7fffffu;
  if (exp > 15) return static_cast<uint16_t>(sign | 0x7c00u);  // certainly overflows
  if (exp >= -14) {
    // Normal half: keep 10 of 23 mantissa bits, round the 13 dropped ones to nearest even.
    uint32_t h = (static_cast<uint32_t>(exp + 15) << 10) | (mant >> 13);
    const uint32_t rem = mant & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // carry may reach Inf: correct
    return static_cast<uint16_t>(sign | h);
  }
  if (exp < -25) return sign;  // below half the smallest subnormal (2^-25): rounds to ±0
  // Subnormal half: value = m * 2^-24 with m = full significand >> shift, rounded to even.
  const uint32_t full = mant | 0x800000u;  // 24-bit significand, value full*2^(exp-23)
  const int shift = -exp - 1;              // 14..24 bits dropped
  uint32_t h = full >> shift;
  const uint32_t rem = full & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (h & 1u))) ++h;  // may round up into the smallest normal
  return static_cast<uint16_t>(sign | h);
}

FC_HD inline float f16_bits_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return f32_from_bits(sign | 0x7f800000u | (mant << 13));
  if (exp != 0) return f32_from_bits(sign | ((exp + 112u) << 23) | (mant << 13));
  // Subnormal or zero: m * 2^-24 is exact in fp32.
  const float v = static_cast<float>(mant) * 0x1p-24f;
  return sign ? -v : v;
}

}  // namespace flashcheck::bits
