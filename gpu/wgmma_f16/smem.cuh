// Where each tile and barrier of wgmma_f16 lives in shared memory (offsets from tile_size.h).
#pragma once
#include <cstdint>

#include "gpu/wgmma_f16/tile_size.h"

namespace flashcheck::kernels {

template <class T>
struct WgmmaSmem {
  uint8_t* base;  // 1024-byte aligned: the 128-byte swizzle pattern is anchored there

  __device__ __forceinline__ uint8_t* q() const { return base + T::kOffQ; }
  __device__ __forceinline__ uint8_t* k(int stage) const { return base + T::kOffK + stage * T::kKBytes; }
  __device__ __forceinline__ uint8_t* v(int stage) const { return base + T::kOffV + stage * T::kVBytes; }
  __device__ __forceinline__ uint64_t* bars() const { return reinterpret_cast<uint64_t*>(base + T::kOffBar); }
  // Q landed (one use, parity 0).
  __device__ __forceinline__ uint64_t* q_full() const { return bars(); }
  // K / V tile of `stage` landed (producer's expect_tx + TMA bytes) / was consumed by every
  // consumer thread (kConsumerWGs·128 arrivals), so the producer may overwrite it.
  __device__ __forceinline__ uint64_t* k_full(int stage) const { return bars() + 1 + stage; }
  __device__ __forceinline__ uint64_t* k_empty(int stage) const { return bars() + 1 + T::kStages + stage; }
  __device__ __forceinline__ uint64_t* v_full(int stage) const { return bars() + 1 + 2 * T::kStages + stage; }
  __device__ __forceinline__ uint64_t* v_empty(int stage) const { return bars() + 1 + 3 * T::kStages + stage; }
  // The last V tile landed where its rows past the sequence must be zeroed first (one use, parity
  // 0; wgmma_produce says why); v_full of its stage completes after the zeroing.
  __device__ __forceinline__ uint64_t* tail_full() const { return bars() + 1 + 4 * T::kStages; }
};

}  // namespace flashcheck::kernels
