// Where each tile and barrier of wgmma_e4m3 lives in shared memory (offsets from tile_size.h).
#pragma once
#include <cstdint>

#include "gpu/wgmma_e4m3/tile_size.h"

namespace flashcheck::kernels {

template <class T>
struct E4m3Smem {
  uint8_t* base;  // 1024-byte aligned: the 128-byte swizzle pattern is anchored there

  __device__ __forceinline__ uint8_t* q() const { return base + T::kOffQ; }
  __device__ __forceinline__ uint8_t* k(int stage) const { return base + T::kOffK + stage * T::kKBytes; }
  __device__ __forceinline__ uint8_t* v(int stage) const { return base + T::kOffV + stage * T::kVtBytes; }
  __device__ __forceinline__ uint8_t* o() const { return base + T::kOffO; }
  __device__ __forceinline__ uint64_t* bars() const { return reinterpret_cast<uint64_t*>(base + T::kOffBar); }
  // Q landed (one use, parity 0); K / Vᵀ of `stage` landed (expect_tx + bytes) / released by every
  // consumer thread (kConsumerWGs·128 arrivals).
  __device__ __forceinline__ uint64_t* q_full() const { return bars(); }
  __device__ __forceinline__ uint64_t* k_full(int stage) const { return bars() + 1 + stage; }
  __device__ __forceinline__ uint64_t* k_empty(int stage) const { return bars() + 1 + T::kStages + stage; }
  __device__ __forceinline__ uint64_t* v_full(int stage) const { return bars() + 1 + 2 * T::kStages + stage; }
  __device__ __forceinline__ uint64_t* v_empty(int stage) const { return bars() + 1 + 3 * T::kStages + stage; }
};

}  // namespace flashcheck::kernels
