// wgmma_f16's kernel: FlashAttention forward for Hopper (sm_90a), after seeds/002 and
// FlashAttention-3's design, written from the PTX ISA. Per block of 64·kConsumerWGs query rows
// (tile_size.h):
//  * warpgroup 0 gives its registers away (setmaxnreg) and one of its threads streams Q once and
//    K/V tiles through a kStages ring by TMA (tma.cuh), each tile completing on an mbarrier;
//  * warpgroups 1.. (setmaxnreg up) each own 64 rows: S = Q·Kᵀ by wgmma from shared memory, the
//    score modifiers (scores.cuh), the online softmax in registers, O += P·V by wgmma with P
//    straight from registers (mainloop.cuh, with the softmax of one tile overlapping the GEMMs of
//    the next, and the warpgroups taking turns at the tensor cores), then normalise and store
//    (epilogue.cuh).
// The policy (policy.h) says where the block's rows live and which variant it computes.
// Numerics are mma_f16's: exp2 with log2(e) folded into the scale, p = 2^((s − m)·c), P rounded to
// the input type, ℓ from unrounded p, LSE in natural log, rows with no visible key O = 0, LSE −inf.
#pragma once
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "gpu/common/variant_mask.cuh"
#include "gpu/wgmma_f16/epilogue.cuh"
#include "gpu/wgmma_f16/mainloop.cuh"
#include "gpu/wgmma_f16/place.cuh"
#include "gpu/wgmma_f16/policy.h"
#include "gpu/wgmma_f16/smem.cuh"
#include "gpu/wgmma_f16/tile_size.h"
#include "gpu/wgmma_f16/tma.cuh"
#ifdef FLASHCHECK_PERTURB
#include "gpu/wgmma_f16/perturb.cuh"
#endif

namespace flashcheck::kernels {

template <class T, bool kBf16, int kSched, class Pol>
__global__ void __launch_bounds__(T::kThreads, 1)
    wgmma_f16_kernel(const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_k,
                     const __grid_constant__ CUtensorMap map_v, const typename Pol::Params p) {
  extern __shared__ uint8_t smem_raw[];
  // The 128-byte swizzle is anchored at 1024-byte boundaries; the dynamic base is not.
  const uint32_t raw = sync::smem_addr(smem_raw);
  const WgmmaSmem<T> sm{smem_raw + ((1024 - (raw & 1023)) & 1023)};

  CtaPlace c;
  if (!Pol::Place::locate(p, threadIdx.x % 32, c)) return;  // uniform over the CTA
  // The KV tiles the block visits: whole tiles no row sees are never loaded (causal tile skipping,
  // and left of a window).
  const int q_last = min(c.q0 + T::kBlockM, c.sq) - 1;
  const TileRange kv = make_mask<typename Pol::Mask>(p, c.sq, c.skv).template trip<T::kBlockN>(c.q0, q_last);

  if (threadIdx.x == 0) {
    sync::mbar_init(sm.q_full(), 1);
    sync::mbar_init(sm.tail_full(), 1);
#pragma unroll
    for (int s = 0; s < T::kStages; ++s) {
      sync::mbar_init(sm.k_full(s), 1);  // the producer's arrive.expect_tx; the bytes do the rest
      sync::mbar_init(sm.v_full(s), 1);
      sync::mbar_init(sm.k_empty(s), T::kConsumerWGs * 128);  // every consumer thread releases
      sync::mbar_init(sm.v_empty(s), T::kConsumerWGs * 128);
    }
    sync::mbar_init_fence();
#ifdef FLASHCHECK_PERTURB
    perturb::init_wgmma(sm, fwd_of(p).perturb);
#endif
  }
  __syncthreads();

  const int wg = threadIdx.x / 128, tid_wg = threadIdx.x % 128;
  if (wg == 0) {
    sync::setmaxnreg_dec<T::kProducerRegs>();
    // Rows past the sequence's keys zeroed where TMA's bounds do not (packed, seqused_kv).
    int zero_from = INT_MAX;
    if constexpr (Pol::kVariant)
      if (p.cu_seqlens_q || p.seqused_kv) zero_from = c.skv;
    if (tid_wg < 32) wgmma_produce<T>(sm, &map_q, &map_k, &map_v, c, kv.begin, kv.count, zero_from, tid_wg);
  } else {
    sync::setmaxnreg_inc<T::kConsumerRegs>();
    const int cw = wg - 1, warp = tid_wg / 32, lane = tid_wg % 32;
    RowState<T> st;
    float sl2;
    wgmma_consume<T, kBf16, kSched, Pol>(sm, p, c, cw, kv.begin, kv.count, warp, lane, st, sl2);
    wgmma_epilogue<T, kBf16, Pol>(sm, p, c, st, sl2, cw, warp, lane, tid_wg);
#ifdef FLASHCHECK_PERTURB
    perturb::flush();
#endif
  }
}

}  // namespace flashcheck::kernels
