// The host side of decode_paged_f16 at one head dim: picks the instantiation (dtype × key policy),
// plans the splits from the machine's size, and runs split kernel → combine on the caller's stream
// with a workspace taken from the stream-ordered pool. Included once per head dim (decode_dD.cu),
// so the instantiations of a head dim build in their own translation unit.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>

#include "gpu/common/cuda_check.h"
#include "gpu/common/launched_tile.h"
#include "gpu/decode_paged_f16/combine_kernel.cuh"
#include "gpu/decode_paged_f16/launch_at.h"
#include "gpu/decode_paged_f16/split_kernel.cuh"
#include "gpu/decode_paged_f16/split_plan.h"
#include "gpu/decode_paged_f16/tile_size.h"

namespace flashcheck::kernels {

// The workspace comes from the device's default stream-ordered pool (cudaMallocAsync), freed on
// the stream after the combine: no allocation outlives a launch, no launch waits for another. By
// default the pool returns its memory to the driver at every synchronisation, and the next
// cudaMallocAsync maps it again; keeping up to 256 MiB in the pool makes repeated launches cheap.
inline void keep_pool_memory(int dev) {
  static std::mutex mu;
  static std::set<int> done;
  const std::lock_guard<std::mutex> lock(mu);
  if (done.count(dev)) return;
  cudaMemPool_t pool;
  FC_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, dev));
  uint64_t keep = uint64_t{256} << 20;
  FC_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  done.insert(dev);
}

template <int D, bool kBf16>
void launch_decode_typed(DecodeParams p, bool paged, int64_t max_keys, const DecodePlanOverride& force, void* stream) {
  using T = DecodeTraits<D>;
  const auto split = !paged             ? decode_split_kernel<D, kBf16, DenseKeys>
                     : p.page_shift >= 0 ? decode_split_kernel<D, kBf16, PagedKeysPow2>
                                         : decode_split_kernel<D, kBf16, PagedKeys>;
  const auto combine = decode_combine_kernel<D, kBf16>;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const int64_t rows_total = int64_t(p.batch) * p.heads_q * p.seq_q;
  if (rows_total == 0) return;  // no query at all (every sequence empty): nothing to write

  const int64_t chunks = (int64_t(p.seq_q) * p.group + T::kRows - 1) / T::kRows;
  if (chunks > 65535) throw std::invalid_argument("decode_paged_f16: more than 65535 query chunks of " +
                                                  std::to_string(T::kRows) + " rows per KV head");
  p.chunks = static_cast<int>(chunks);
  const int smem = static_cast<int>(T::kSmemBytes);
  FC_CUDA_CHECK(cudaFuncSetAttribute(split, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  int dev = 0, sms = 0, per_sm = 0;
  FC_CUDA_CHECK(cudaGetDevice(&dev));
  FC_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  FC_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, split, T::kThreads, smem));
  if (per_sm < 1) throw std::runtime_error("decode_paged_f16: the split kernel does not fit an SM of this device");
  const int64_t base = int64_t(p.batch) * p.heads_kv * chunks;
  const int64_t tiles = (max_keys + T::kBlockN - 1) / T::kBlockN;
  const int64_t splits = force.num_splits > 0 ? force.num_splits : choose_num_splits(base, tiles, int64_t(sms) * per_sm);
  if (splits < 1 || splits > 65535) throw std::invalid_argument("decode_paged_f16: split count out of [1, 65535]");
  p.num_splits = static_cast<int>(splits);
  if (base > 0x7fffffff) throw std::invalid_argument("decode_paged_f16: batch × KV heads past the grid's 2^31 − 1");

  // Workspace: partial O, then the partial maxima, then log2 ℓ; poisoned (0xFF bytes: fp32 NaN)
  // on every launch, so that a partial the split kernel failed to write reaches the output as NaN
  // instead of a stale value from an earlier launch.
  const size_t o_bytes = size_t(splits) * size_t(rows_total) * D * sizeof(float);
  const size_t m_bytes = size_t(splits) * size_t(rows_total) * sizeof(float);
  const size_t bytes = o_bytes + 2 * m_bytes;
  keep_pool_memory(dev);
  void* ws = nullptr;
  FC_CUDA_CHECK(cudaMallocAsync(&ws, bytes, s));
  p.ws_o = static_cast<float*>(ws);
  p.ws_max = reinterpret_cast<float*>(static_cast<char*>(ws) + o_bytes);
  p.ws_log2l = reinterpret_cast<float*>(static_cast<char*>(ws) + o_bytes + m_bytes);
  FC_CUDA_CHECK(cudaMemsetAsync(ws, 0xFF, bytes, s));

  const dim3 grid(static_cast<unsigned>(base / chunks), static_cast<unsigned>(chunks), static_cast<unsigned>(splits));
  split<<<grid, T::kThreads, smem, s>>>(p);
  FC_CHECK_LAUNCH("decode_split_kernel");
  const int64_t blocks = (rows_total + T::kCombineWarps - 1) / T::kCombineWarps;
  if (blocks > 0x7fffffff) throw std::invalid_argument("decode_paged_f16: more output rows than the combine's grid holds");
  combine<<<static_cast<unsigned>(blocks), T::kCombineWarps * 32, 0, s>>>(p);
  FC_CHECK_LAUNCH("decode_combine_kernel");
  FC_CUDA_CHECK(cudaFreeAsync(ws, s));
  note_launched_tile("decode_split_kernel", T::kRows, T::kBlockN);
}

template <int D>
void launch_decode_at(const DecodeParams& p, bool bf16, bool paged, int64_t max_keys, const DecodePlanOverride& force,
                      void* stream) {
  if (bf16) launch_decode_typed<D, true>(p, paged, max_keys, force, stream);
  else launch_decode_typed<D, false>(p, paged, max_keys, force, stream);
}

}  // namespace flashcheck::kernels
