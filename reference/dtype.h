// Element types and exact host conversions between fp32 and fp16/bf16/fp8.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace flashcheck {

// e4m3 and e5m2 are the OCP fp8 formats (e4m3 "fn": no infinities, max 448, NaN = S.1111.111;
// e5m2: IEEE-like, max 57344, with infinities). They are input types only: an fp8 problem's output
// is bf16 or f16 (Problem::out_dtype).
enum class DType { f32, f16, bf16, e4m3, e5m2 };
inline bool is_fp8(DType d) { return d == DType::e4m3 || d == DType::e5m2; }

std::string_view to_string(DType d);
// Parses "f32"/"fp32"/"float32", "f16"/"fp16"/"float16", "bf16"/"bfloat16", "e4m3"/"float8_e4m3fn",
// "e5m2"/"float8_e5m2"; throws on anything else.
DType parse_dtype(std::string_view s);
int dtype_bytes(DType d);

// fp32 -> 16-bit, round-to-nearest-even. NaN stays NaN (quiet, sign kept), overflow rounds to ±Inf
// exactly as IEEE 754 says (values at or past the midpoint between max-finite and 2^(emax+1)).
uint16_t f32_to_bf16_bits(float x);
uint16_t f32_to_f16_bits(float x);
// 16-bit -> fp32 is exact for every bit pattern (subnormal halves become normal floats).
float bf16_bits_to_f32(uint16_t h);
float f16_bits_to_f32(uint16_t h);
// fp32 -> fp8, round-to-nearest-even. NaN stays NaN. Past the largest finite value (at or beyond the
// midpoint to the next binade step) e5m2 rounds to ±Inf as IEEE says; e4m3 has no Inf and gives NaN
// (what a conversion without saturation does).
uint8_t f32_to_e4m3_bits(float x);
uint8_t f32_to_e5m2_bits(float x);
// fp8 -> fp32 is exact for every bit pattern.
float e4m3_bits_to_f32(uint8_t b);
float e5m2_bits_to_f32(uint8_t b);

// Packs fp32 values (rounded to nearest even) into a buffer of `d`, and widens one back exactly.
// The raw buffers are what kernels and files hold: 4 bytes per f32 element, 2 per f16/bf16, 1 per fp8.
void encode(DType d, const float* src, int64_t n, void* dst);
void decode(DType d, const void* src, int64_t n, float* dst);

// Round an fp32 value to the nearest value representable in `d` (identity for f32).
float round_to(DType d, float x);
// Round toward zero instead (what a truncating conversion does): the representable value of `d`
// nearest x that is not larger in magnitude. Identity for f32. A bug class, not a convention: the
// replica uses it to prove the checker catches kernels that truncate.
float round_toward_zero(DType d, float x);
// Unit roundoff of `d`: half the spacing of representable values at 1.0 (2^-24, 2^-11, 2^-8, and
// 2^-4, 2^-3 for e4m3, e5m2).
double unit_roundoff(DType d);

}  // namespace flashcheck
