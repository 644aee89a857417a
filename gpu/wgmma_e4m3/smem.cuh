// Where each tile and barrier of wgmma_e4m3 lives in shared memory (offsets from tile_size.h): the
// ring and barriers of wgmma_f16's layout (gpu/wgmma_f16/smem.cuh; V's slots hold Vᵀ tiles, its tail
// barrier is unused) plus the O staging area.
#pragma once
#include <cstdint>

#include "gpu/wgmma_e4m3/tile_size.h"
#include "gpu/wgmma_f16/smem.cuh"

namespace flashcheck::kernels {

template <class T>
struct E4m3Smem : WgmmaSmem<T> {
  __device__ __forceinline__ uint8_t* o() const { return this->base + T::kOffO; }
};

}  // namespace flashcheck::kernels
