// The one launch path of the forward kernels: a (q-tile, head, batch) grid, the dynamic shared
// memory limit raised to what the kernel needs, the launch checked and named, and the tile
// launched noted for the launched-tile test (block_kv 0: the caller does not say).
#pragma once
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "gpu/common/cuda_check.h"
#include "gpu/common/launched_tile.h"
#include "gpu/common/params.h"

namespace flashcheck::kernels {

inline void launch_fwd(void (*kernel)(FwdParams), const char* name, int block_q, int threads, size_t smem,
                       const FwdParams& p, void* stream, int block_kv = 0) {
  // Grid y and z stop at 65535: refuse rather than launch a grid that silently skips heads.
  if (p.heads_q > 65535 || p.batch > 65535)
    throw std::invalid_argument(std::string(name) + ": heads or batch beyond the grid's 65535");
  FC_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  const dim3 grid(static_cast<unsigned>((p.seq_q + block_q - 1) / block_q), static_cast<unsigned>(p.heads_q),
                  static_cast<unsigned>(p.batch));
  kernel<<<grid, threads, smem, static_cast<cudaStream_t>(stream)>>>(p);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) cuda_fail(e, name, __FILE__, __LINE__);
  note_launched_tile(name, block_q, block_kv);
}

}  // namespace flashcheck::kernels
