// Host emulation (see emu.h): f16 storage type and the conversions the kernels use.
#pragma once
#include "reference/dtype.h"
#include "emu.h"

struct __half {
  unsigned short x;
};
inline __half __float2half_rn(float f) { return {flashcheck::f32_to_f16_bits(f)}; }
inline float __half2float(__half h) { return flashcheck::f16_bits_to_f32(h.x); }
inline __half __ushort_as_half(unsigned short bits) { return {bits}; }
