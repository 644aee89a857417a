#include "reference/dtype.h"

#include "reference/dtype_bits.h"

#include <cmath>

#include <bit>
#include <cstring>
#include <stdexcept>

namespace flashcheck {

std::string_view to_string(DType d) {
  switch (d) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::e4m3: return "e4m3";
    case DType::e5m2: return "e5m2";
  }
  return "?";
}

DType parse_dtype(std::string_view s) {
  if (s == "f32" || s == "fp32" || s == "float32" || s == "F32") return DType::f32;
  if (s == "f16" || s == "fp16" || s == "float16" || s == "F16") return DType::f16;
  if (s == "bf16" || s == "bfloat16" || s == "BF16") return DType::bf16;
  if (s == "e4m3" || s == "float8_e4m3fn" || s == "fp8_e4m3" || s == "F8_E4M3") return DType::e4m3;
  if (s == "e5m2" || s == "float8_e5m2" || s == "fp8_e5m2" || s == "F8_E5M2") return DType::e5m2;
  throw std::invalid_argument("unknown dtype '" + std::string(s) + "' (expected f32, f16, bf16, e4m3 or e5m2)");
}

int dtype_bytes(DType d) { return d == DType::f32 ? 4 : is_fp8(d) ? 1 : 2; }

uint16_t f32_to_bf16_bits(float x) { return bits::f32_to_bf16_bits(x); }
float bf16_bits_to_f32(uint16_t h) { return bits::bf16_bits_to_f32(h); }
uint16_t f32_to_f16_bits(float x) { return bits::f32_to_f16_bits(x); }
float f16_bits_to_f32(uint16_t h) { return bits::f16_bits_to_f32(h); }

namespace {
// The two OCP fp8 formats as (exponent bits, mantissa bits); bias = 2^(E-1) - 1.
struct Fp8Format {
  int mant;        // mantissa bits M
  int bias;
  int emin;        // exponent of the smallest normal
  double max;      // largest finite value
  bool has_inf;    // e5m2: exponent field all ones with mantissa 0 is Inf; e4m3 has none
};
constexpr Fp8Format kE4m3{3, 7, -6, 448.0, false};
constexpr Fp8Format kE5m2{2, 15, -14, 57344.0, true};

// Round-to-nearest-even by scaling: |x| / quantum is exact in double (a power-of-two scale of a
// float), and nearbyint rounds it to the nearest integer, ties to even, in the default mode.
uint8_t f32_to_fp8_bits(float x, const Fp8Format& f) {
  const uint8_t sign = std::signbit(x) ? 0x80u : 0x00u;
  const uint8_t nan = static_cast<uint8_t>(sign | 0x7Fu);  // S.1111.111 (e4m3) or S.11111.11 (e5m2): both quiet NaNs
  if (std::isnan(x)) return nan;
  const double a = std::fabs(static_cast<double>(x));
  const uint8_t inf_or_nan = f.has_inf ? static_cast<uint8_t>(sign | 0x7Cu) : nan;
  if (std::isinf(x)) return inf_or_nan;
  if (a == 0.0) return sign;
  int e = 0;
  std::frexp(a, &e);  // a = m · 2^e with m in [0.5, 1): the binade's exponent is e - 1
  const int binade = std::max(e - 1, f.emin);
  const double quantum = std::ldexp(1.0, binade - f.mant);
  const double r = std::nearbyint(a / quantum) * quantum;
  if (r > f.max) return inf_or_nan;  // past the largest finite after rounding: IEEE overflow
  if (r == 0.0) return sign;
  if (r < std::ldexp(1.0, f.emin))  // subnormal: exponent field 0, value = mant · 2^(emin - M)
    return static_cast<uint8_t>(sign | static_cast<uint8_t>(r / std::ldexp(1.0, f.emin - f.mant)));
  int er = 0;
  std::frexp(r, &er);
  const int field = er - 1 + f.bias;
  const int mant = static_cast<int>(r / std::ldexp(1.0, er - 1 - f.mant)) - (1 << f.mant);
  return static_cast<uint8_t>(sign | (field << f.mant) | mant);
}

float fp8_bits_to_f32(uint8_t b, const Fp8Format& f) {
  const bool neg = (b & 0x80u) != 0;
  const int field = (b & 0x7Fu) >> f.mant, mant = b & ((1 << f.mant) - 1);
  const int all_ones = (1 << (7 - f.mant)) - 1;
  double v;
  if (f.has_inf && field == all_ones) {
    v = mant == 0 ? INFINITY : NAN;
  } else if (!f.has_inf && field == all_ones && mant == (1 << f.mant) - 1) {
    v = NAN;
  } else if (field == 0) {
    v = std::ldexp(static_cast<double>(mant), f.emin - f.mant);
  } else {
    v = std::ldexp(static_cast<double>((1 << f.mant) + mant), field - f.bias - f.mant);
  }
  return static_cast<float>(neg ? -v : v);
}
}  // namespace

uint8_t f32_to_e4m3_bits(float x) { return f32_to_fp8_bits(x, kE4m3); }
uint8_t f32_to_e5m2_bits(float x) { return f32_to_fp8_bits(x, kE5m2); }
float e4m3_bits_to_f32(uint8_t b) { return fp8_bits_to_f32(b, kE4m3); }
float e5m2_bits_to_f32(uint8_t b) { return fp8_bits_to_f32(b, kE5m2); }

void encode(DType d, const float* src, int64_t n, void* dst) {
  if (is_fp8(d)) {
    auto* out = static_cast<uint8_t*>(dst);
    const Fp8Format& f = d == DType::e4m3 ? kE4m3 : kE5m2;
#pragma omp parallel for schedule(static) if (n > (int64_t{1} << 20))
    for (int64_t i = 0; i < n; ++i) out[i] = f32_to_fp8_bits(src[i], f);
    return;
  }
  if (d == DType::f32) {
    std::memcpy(dst, src, static_cast<size_t>(n) * 4);
    return;
  }
  auto* out = static_cast<uint16_t*>(dst);
  // Staging a big campaign case encodes ~10^9 elements per tensor: all threads, one loop per dtype.
  if (d == DType::f16) {
#pragma omp parallel for schedule(static) if (n > (int64_t{1} << 20))
    for (int64_t i = 0; i < n; ++i) out[i] = f32_to_f16_bits(src[i]);
  } else {
#pragma omp parallel for schedule(static) if (n > (int64_t{1} << 20))
    for (int64_t i = 0; i < n; ++i) out[i] = f32_to_bf16_bits(src[i]);
  }
}

void decode(DType d, const void* src, int64_t n, float* dst) {
  if (is_fp8(d)) {
    const auto* in = static_cast<const uint8_t*>(src);
    const Fp8Format& f = d == DType::e4m3 ? kE4m3 : kE5m2;
#pragma omp parallel for schedule(static) if (n > (int64_t{1} << 20))
    for (int64_t i = 0; i < n; ++i) dst[i] = fp8_bits_to_f32(in[i], f);
    return;
  }
  if (d == DType::f32) {
    std::memcpy(dst, src, static_cast<size_t>(n) * 4);
    return;
  }
  const auto* in = static_cast<const uint16_t*>(src);
  // Production outputs hold 10^8..10^9 elements: one loop per dtype (bf16 is a shift the compiler
  // vectorises) over all threads.
  if (d == DType::f16) {
#pragma omp parallel for schedule(static) if (n > (int64_t{1} << 20))
    for (int64_t i = 0; i < n; ++i) dst[i] = f16_bits_to_f32(in[i]);
  } else {
#pragma omp parallel for schedule(static) if (n > (int64_t{1} << 20))
    for (int64_t i = 0; i < n; ++i) dst[i] = bf16_bits_to_f32(in[i]);
  }
}

float round_to(DType d, float x) {
  switch (d) {
    case DType::f32: return x;
    case DType::f16: return f16_bits_to_f32(f32_to_f16_bits(x));
    case DType::bf16: return bf16_bits_to_f32(f32_to_bf16_bits(x));
    case DType::e4m3: return e4m3_bits_to_f32(f32_to_e4m3_bits(x));
    case DType::e5m2: return e5m2_bits_to_f32(f32_to_e5m2_bits(x));
  }
  return x;
}

double unit_roundoff(DType d) {
  switch (d) {
    case DType::f32: return 0x1p-24;
    case DType::f16: return 0x1p-11;
    case DType::bf16: return 0x1p-8;
    case DType::e4m3: return 0x1p-4;
    case DType::e5m2: return 0x1p-3;
  }
  return 0;
}

float round_toward_zero(DType d, float x) {
  const float r = round_to(d, x);
  if (d == DType::f32 || !(std::fabs(r) > std::fabs(x))) return r;  // already toward zero (or NaN)
  // Rounded up in magnitude: step one representable value back toward zero. Sign-magnitude bits,
  // so the magnitude's predecessor is the pattern minus one (|r| > |x| ≥ 0 means r is not ±0).
  if (is_fp8(d)) {
    const uint8_t bits = d == DType::e4m3 ? f32_to_e4m3_bits(r) : f32_to_e5m2_bits(r);
    const uint8_t down = static_cast<uint8_t>(bits - 1);
    return d == DType::e4m3 ? e4m3_bits_to_f32(down) : e5m2_bits_to_f32(down);
  }
  const uint16_t bits = d == DType::bf16 ? f32_to_bf16_bits(r) : f32_to_f16_bits(r);
  const uint16_t down = static_cast<uint16_t>(bits - 1);
  return d == DType::bf16 ? bf16_bits_to_f32(down) : f16_bits_to_f32(down);
}

}  // namespace flashcheck
