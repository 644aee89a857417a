// Host emulation (see emu.h): bf16 storage type and the conversions the kernels use.
#pragma once
#include "reference/dtype.h"
#include "emu.h"

struct __nv_bfloat16 {
  unsigned short x;
};
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return {flashcheck::f32_to_bf16_bits(f)}; }
inline float __bfloat162float(__nv_bfloat16 h) { return flashcheck::bf16_bits_to_f32(h.x); }
