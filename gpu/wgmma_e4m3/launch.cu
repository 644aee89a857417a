// wgmma_e4m3's launch: the Vᵀ copy (transpose_v.cuh), three tensor maps over e4m3 bytes, and the
// kernel of the head dim's tile (tile_size.h).
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "gpu/common/cuda_check.h"
#include "gpu/common/launched_tile.h"
#include "gpu/wgmma_e4m3/kernel.cuh"
#include "gpu/wgmma_e4m3/launch.h"
#include "gpu/wgmma_e4m3/tile_size.h"
#include "gpu/wgmma_e4m3/transpose_v.cuh"
#include "gpu/wgmma_f16/tma.cuh"

namespace flashcheck::kernels {
namespace {

// Stream-ordered scratch, returned to the pool after everything queued before the destructor
// (the kernel that reads it) whether the launch succeeded or threw.
struct Scratch {
  void* ptr = nullptr;
  cudaStream_t stream;
  Scratch(size_t bytes, cudaStream_t s) : stream(s) { FC_CUDA_CHECK(cudaMallocAsync(&ptr, bytes, s)); }
  ~Scratch() {
    if (ptr) (void)cudaFreeAsync(ptr, stream);  // a destructor cannot throw; a failed free leaks
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
};

// Boxes of box_bytes × box_rows: Q and K rows are 128 bytes per box, or the whole row when shorter
// (D = 64, the 64-byte swizzle the tile layout declares); Vᵀ a column block of 128 or 64 keys,
// however few there are (the box reaches past the tensor's end, zero-filled, and still counts its
// bytes).
CUtensorMap map_e4m3(const void* base, int64_t outer, int64_t heads, int64_t rows, int dim, int box_rows, int box_bytes) {
  return tma::make_map_typed(base, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, outer, heads, rows, dim, dim, rows * dim,
                             rows * dim * heads, box_rows, box_bytes);
}

template <class T, bool kTurns, bool kOutBf16>
void launch_kernel(const CUtensorMap& mq, const CUtensorMap& mk, const CUtensorMap& mvt, const E4m3Params& p, dim3 grid,
                   cudaStream_t s) {
  auto* kernel = wgmma_e4m3_kernel<T, kTurns, kOutBf16>;
  FC_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(T::kSmemBytes)));
  kernel<<<grid, T::kThreads, T::kSmemBytes, s>>>(mq, mk, mvt, p);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) cuda_fail(e, "wgmma_e4m3_kernel", __FILE__, __LINE__);
  note_launched_tile("wgmma_e4m3", T::kBlockM, T::kBlockN);
}

// The maps and grid of configuration C (tile_size.h): K's boxes are its kBlockN rows, Vᵀ's its
// column blocks of kVtRowBytes keys × Dv rows.
template <class C>
void launch_config(const E4m3Params& ep, const void* vt, int skv16, bool out_bf16, cudaStream_t s) {
  using T = typename C::Traits;
  const FwdParams& p = ep.base;
  constexpr int D = T::kHeadDimQK;
  const void* k = p.seq_kv > 0 ? p.k : vt;  // no keys: nothing is loaded, but the map needs a base
  const CUtensorMap mq = map_e4m3(p.q, p.batch, p.heads_q, p.seq_q, D, T::kBlockM, T::kRowBytes);
  const CUtensorMap mk = map_e4m3(k, p.batch, p.heads_kv, p.seq_kv > 0 ? p.seq_kv : 1, D, T::kBlockN, T::kRowBytes);
  const CUtensorMap mvt = map_e4m3(vt, p.batch, p.heads_kv, D, skv16, D, T::kVtRowBytes);  // rows: Dv; "dim": keys
  const dim3 grid(static_cast<unsigned>((p.seq_q + T::kBlockM - 1) / T::kBlockM), static_cast<unsigned>(p.heads_q),
                  static_cast<unsigned>(p.batch));
  out_bf16 ? launch_kernel<T, C::kPingPong, true>(mq, mk, mvt, ep, grid, s)
           : launch_kernel<T, C::kPingPong, false>(mq, mk, mvt, ep, grid, s);
}

template <int D>
void launch_d(const E4m3Params& ep, bool out_bf16, cudaStream_t s) {
  const FwdParams& p = ep.base;
  // Vᵀ rows of Skv16 keys (a TMA stride is a multiple of 16 bytes; 16 also holds a sequence of no
  // keys, whose maps must still be valid though the kernel loads nothing).
  const int skv16 = p.seq_kv > 0 ? (p.seq_kv + 15) / 16 * 16 : 16;
  Scratch vt(static_cast<size_t>(p.batch) * p.heads_kv * D * skv16, s);
  const dim3 tgrid(static_cast<unsigned>((skv16 + 63) / 64), static_cast<unsigned>(p.heads_kv), static_cast<unsigned>(p.batch));
  transpose_v_kernel<D><<<tgrid, 256, 0, s>>>(static_cast<const uint8_t*>(p.v), static_cast<uint8_t*>(vt.ptr), p.heads_kv,
                                               p.seq_kv, skv16);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) cuda_fail(e, "transpose_v_kernel", __FILE__, __LINE__);
  static_assert(WgmmaE4m3Config<D, false>::Traits::kBlockM == WgmmaE4m3Config<D, true>::Traits::kBlockM,
                "one q-tile height per head dim");
  if (p.causal)
    launch_config<WgmmaE4m3Config<D, true>>(ep, vt.ptr, skv16, out_bf16, s);
  else
    launch_config<WgmmaE4m3Config<D, false>>(ep, vt.ptr, skv16, out_bf16, s);
}

}  // namespace

void launch_wgmma_e4m3(const E4m3Params& ep, bool out_bf16, void* stream) {
  const FwdParams& p = ep.base;
  const auto s = static_cast<cudaStream_t>(stream);
  if (p.heads_kv <= 0 || p.heads_q % p.heads_kv != 0)
    throw std::invalid_argument("wgmma_e4m3: heads_q must be a multiple of heads_kv");
  const int d = p.head_dim_qk;
  if (d != p.head_dim_v || (d != 64 && d != 128 && d != 256))
    throw std::invalid_argument("wgmma_e4m3: head dims (" + std::to_string(d) + ", " + std::to_string(p.head_dim_v) +
                                ") not compiled (64, 128 and 256, Dqk = Dv)");
  if (p.batch == 0 || p.heads_q == 0 || p.seq_q == 0) return;  // nothing to write
  if (d == 64)
    launch_d<64>(ep, out_bf16, s);
  else if (d == 128)
    launch_d<128>(ep, out_bf16, s);
  else
    launch_d<256>(ep, out_bf16, s);
}

}  // namespace flashcheck::kernels
