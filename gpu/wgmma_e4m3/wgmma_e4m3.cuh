// The e4m3 wgmma wrappers (generated, wgmma_e4m3_ops.inc) beside wgmma_f16's descriptor, fence,
// commit and wait (gpu/wgmma_f16/wgmma.cuh): the descriptors of a K-major 128-byte-swizzled operand
// are the same for one-byte elements, since they count bytes.
#pragma once
#include <cstdint>

#include "gpu/wgmma_f16/wgmma.cuh"

namespace flashcheck::kernels::wgmma {

#include "gpu/wgmma_e4m3/wgmma_e4m3_ops.inc"

// A K-major operand's descriptor in rows of `row_bytes` (128: 128-byte swizzle, as make_desc;
// 64: the 64-byte swizzle, whose 8-row atoms are 512 bytes apart, SBO). Layout field, bits 62-63:
// 1 = 128-byte, 2 = 64-byte swizzle.
__device__ __forceinline__ uint64_t make_kmajor_desc(uint32_t smem_addr, int row_bytes) {
  const uint32_t sbo = 8u * static_cast<uint32_t>(row_bytes);
  const uint64_t lo = ((smem_addr & 0x3FFFFu) >> 4) | (uint64_t{1} << 16);  // LBO unused (1)
  const uint64_t hi = (sbo >> 4) | ((row_bytes == 128 ? 1u : 2u) << 30);
  return lo | (hi << 32);
}

}  // namespace flashcheck::kernels::wgmma
