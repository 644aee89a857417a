// wgmma_f16: FlashAttention forward for Hopper (sm_90a), after seeds/002 and FlashAttention-3's
// design, written from the PTX ISA. Per block of 64·kConsumerWGs query rows (tile_size.h):
//  * warpgroup 0 gives its registers away (setmaxnreg) and one of its threads streams Q once and
//    K/V tiles through a kStages ring by TMA (tma.cuh), each tile completing on an mbarrier;
//  * warpgroups 1.. (setmaxnreg up) each own 64 rows: S = Q·Kᵀ by wgmma from shared memory, the
//    online softmax in registers, O += P·V by wgmma with P straight from registers (mainloop.cuh,
//    with the softmax of one tile overlapping the GEMMs of the next, and the warpgroups taking
//    turns at the tensor cores), then normalise and store (epilogue.cuh).
// Numerics are mma_f16's: exp2 with log2(e) folded into the scale, p = 2^((s − m)·c), P rounded to
// the input type, ℓ from unrounded p, LSE in natural log, rows with no visible key O = 0, LSE −inf.
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "gpu/common/launched_tile.h"
#include "gpu/common/mask.cuh"
#include "gpu/common/params.h"
#include "gpu/common/cuda_check.h"
#include "gpu/wgmma_f16/epilogue.cuh"
#include "gpu/wgmma_f16/launch.h"
#include "gpu/wgmma_f16/mainloop.cuh"
#include "gpu/wgmma_f16/smem.cuh"
#include "gpu/wgmma_f16/tile_size.h"
#include "gpu/wgmma_f16/tma.cuh"
#ifdef FLASHCHECK_PERTURB
#include "gpu/common/perturb_host.h"
#include "gpu/wgmma_f16/perturb.cuh"
#endif

namespace flashcheck::kernels {

template <class T, bool kBf16, int kSched>
__global__ void __launch_bounds__(T::kThreads, 1)
    wgmma_f16_kernel(const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_k,
                     const __grid_constant__ CUtensorMap map_v, const FwdParams p) {
  extern __shared__ uint8_t smem_raw[];
  // The 128-byte swizzle is anchored at 1024-byte boundaries; the dynamic base is not.
  const uint32_t raw = sync::smem_addr(smem_raw);
  const WgmmaSmem<T> sm{smem_raw + ((1024 - (raw & 1023)) & 1023)};

  // Causal blocks near the bottom of the sequence do the most work: launch them first.
  const int q_tile = p.causal ? static_cast<int>(gridDim.x) - 1 - static_cast<int>(blockIdx.x) : static_cast<int>(blockIdx.x);
  const int q0 = q_tile * T::kBlockM, h = blockIdx.y, b = blockIdx.z;
  const int hk = h / (p.heads_q / p.heads_kv);
  // Tiles past the keys the block's last row sees are never loaded (causal tile skipping).
  const int q_last = min(q0 + T::kBlockM, p.seq_q) - 1;
  const int kv_end = kv_visible(q_last, p.seq_q, p.seq_kv, p.causal);
  const int n_tiles = (kv_end + T::kBlockN - 1) / T::kBlockN;

  if (threadIdx.x == 0) {
    sync::mbar_init(sm.q_full(), 1);
#pragma unroll
    for (int s = 0; s < T::kStages; ++s) {
      sync::mbar_init(sm.k_full(s), 1);  // the producer's arrive.expect_tx; the bytes do the rest
      sync::mbar_init(sm.v_full(s), 1);
      sync::mbar_init(sm.k_empty(s), T::kConsumerWGs * 128);  // every consumer thread releases
      sync::mbar_init(sm.v_empty(s), T::kConsumerWGs * 128);
    }
    sync::mbar_init_fence();
#ifdef FLASHCHECK_PERTURB
    perturb::init_wgmma(sm, p.perturb);
#endif
  }
  __syncthreads();

  const int wg = threadIdx.x / 128, tid_wg = threadIdx.x % 128;
  if (wg == 0) {
    sync::setmaxnreg_dec<T::kProducerRegs>();
    if (tid_wg == 0) wgmma_produce<T>(sm, &map_q, &map_k, &map_v, q0, h, hk, b, n_tiles);
  } else {
    sync::setmaxnreg_inc<T::kConsumerRegs>();
    const int cw = wg - 1, warp = tid_wg / 32, lane = tid_wg % 32;
    RowState<T> st;
    wgmma_consume<T, kBf16, kSched>(sm, p, cw, q0, n_tiles, warp, lane, st);
    wgmma_epilogue<T, kBf16>(sm, p, st, cw, q0, h, b, warp, lane, tid_wg);
#ifdef FLASHCHECK_PERTURB
    perturb::flush();
#endif
  }
}

namespace {

template <class T, bool kBf16, int kSched>
void launch_t(const FwdParams& p, cudaStream_t stream) {
  const CUtensorMap mq = tma::make_map_bhsd(p.q, kBf16, p.batch, p.heads_q, p.seq_q, T::kHeadDimQK, T::kBlockM);
  const CUtensorMap mk = tma::make_map_bhsd(p.k, kBf16, p.batch, p.heads_kv, p.seq_kv, T::kHeadDimQK, T::kBlockN);
  const CUtensorMap mv = tma::make_map_bhsd(p.v, kBf16, p.batch, p.heads_kv, p.seq_kv, T::kHeadDimV, T::kBlockN);
  auto* kernel = wgmma_f16_kernel<T, kBf16, kSched>;
#ifndef FLASHCHECK_PERTURB
  FC_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(T::kSmemBytes)));
#endif
  const dim3 grid(static_cast<unsigned>((p.seq_q + T::kBlockM - 1) / T::kBlockM), static_cast<unsigned>(p.heads_q),
                  static_cast<unsigned>(p.batch));
#ifndef FLASHCHECK_PERTURB
  kernel<<<grid, T::kThreads, T::kSmemBytes, stream>>>(mq, mk, mv, p);
  FC_CHECK_LAUNCH("wgmma_f16_kernel");
#else
  // The perturbed build: its state area after the kernel's shared memory, its settings in the
  // parameters, and the tracker's report read back (a violation throws, failing the case).
  constexpr unsigned kSmem = T::kSmemBytes + perturb::kExtraSmem;
  static_assert(kSmem <= 227 * 1024, "the perturbed build's state area fits beside the kernel's shared memory");
  FC_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmem)));
  FwdParams pp = p;
  pp.perturb = perturb::begin(p, stream);
  kernel<<<grid, T::kThreads, kSmem, stream>>>(mq, mk, mv, pp);
  FC_CHECK_LAUNCH("wgmma_f16_kernel (perturbed build)");
  perturb::end(pp.perturb, stream, "wgmma_f16");
#endif
  note_launched_tile("wgmma_f16", T::kBlockM, T::kBlockN);
}

template <class C>
void launch_config(const FwdParams& p, bool bf16, cudaStream_t s) {
  if (bf16)
    launch_t<typename C::Traits, true, C::kSchedule>(p, s);
  else
    launch_t<typename C::Traits, false, C::kSchedule>(p, s);
}

template <int Dqk, int Dv>
void launch_dims(const FwdParams& p, bool bf16, cudaStream_t s) {
  if (p.causal)
    launch_config<WgmmaF16Config<Dqk, Dv, true>>(p, bf16, s);
  else
    launch_config<WgmmaF16Config<Dqk, Dv, false>>(p, bf16, s);
}

}  // namespace


void launch_wgmma_f16(const FwdParams& p, bool bf16, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  if (p.heads_kv <= 0 || p.heads_q % p.heads_kv != 0)
    throw std::invalid_argument("wgmma_f16: heads_q must be a multiple of heads_kv");
  if (p.batch == 0 || p.heads_q == 0 || p.seq_q == 0) return;  // nothing to write
  switch (p.head_dim_qk * 1000 + p.head_dim_v) {
    case 64064: return launch_dims<64, 64>(p, bf16, s);
    case 128128: return launch_dims<128, 128>(p, bf16, s);
    case 192128: return launch_dims<192, 128>(p, bf16, s);
    case 256256: return launch_dims<256, 256>(p, bf16, s);
    default:
      throw std::invalid_argument("wgmma_f16: head dims (" + std::to_string(p.head_dim_qk) + ", " +
                                  std::to_string(p.head_dim_v) + ") not compiled");
  }
}


}  // namespace flashcheck::kernels
