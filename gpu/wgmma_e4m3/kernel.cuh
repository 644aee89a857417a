// wgmma_e4m3's kernel: FlashAttention forward with e4m3 inputs for Hopper (sm_90a), wgmma_f16's
// design (gpu/wgmma_f16/kernel.cuh: a producer warpgroup streaming tiles by TMA, consumer
// warpgroups of 64 rows each) on fp8 operands, in the numerics the replica declares for fp8
// (reference/replica.h): raw fp8 dot products as scores, q/k descales in the exponent's factor,
// P = 2^8·exp(s − m) rounded to e4m3 for P·V (ℓ from the unrounded fp32 P), O·v_descale/ℓ rounded
// to the 16-bit output type, LSE in natural log. Plain problems (BHSD, causal alignments, GQA).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "gpu/common/kernel_policy.h"
#include "gpu/common/variant_mask.cuh"
#include "gpu/wgmma_e4m3/epilogue.cuh"
#include "gpu/wgmma_e4m3/mainloop.cuh"
#include "gpu/wgmma_e4m3/params.h"
#include "gpu/wgmma_e4m3/smem.cuh"
#include "gpu/wgmma_f16/barrier.cuh"
#include "gpu/wgmma_f16/place.cuh"

namespace flashcheck::kernels {

// Where the descale factor of (batch b, KV head hk) lives in its array (1 when there is none).
__device__ __forceinline__ float descale_at(const float* d, int per_head, int b, int heads_kv, int hk) {
  return d ? d[per_head ? b * heads_kv + hk : 0] : 1.0f;
}

template <class T>
using E4m3Policy = KernelPolicy<DensePlace<T::kBlockM>, PrefixMask, NoSoftcap, NoBias>;

// map_vt addresses the launch's Vᵀ copy [B, Hkv, Dv, Skv16] in boxes of 128 keys × Dv rows.
template <class T, bool kTurns, bool kOutBf16>
__global__ void __launch_bounds__(T::kThreads, 1)
    wgmma_e4m3_kernel(const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_k,
                      const __grid_constant__ CUtensorMap map_vt, const E4m3Params ep) {
  using Pol = E4m3Policy<T>;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = sync::smem_addr(smem_raw);
  const E4m3Smem<T> sm{{smem_raw + ((1024 - (raw & 1023)) & 1023)}};
  const FwdParams& p = ep.base;

  CtaPlace c;
  DensePlace<T::kBlockM>::locate(p, threadIdx.x % 32, c);
  const int q_last = min(c.q0 + T::kBlockM, c.sq) - 1;
  const TileRange kv = make_mask<PrefixMask>(p, c.sq, c.skv).template trip<T::kBlockN>(c.q0, q_last);

  if (threadIdx.x == 0) {
    sync::mbar_init(sm.q_full(), 1);
#pragma unroll
    for (int s = 0; s < T::kStages; ++s) {
      sync::mbar_init(sm.k_full(s), 1);
      sync::mbar_init(sm.v_full(s), 1);
      sync::mbar_init(sm.k_empty(s), T::kConsumerWGs * 128);
      sync::mbar_init(sm.v_empty(s), T::kConsumerWGs * 128);
    }
    sync::mbar_init_fence();
  }
  __syncthreads();

  const int wg = threadIdx.x / 128, tid_wg = threadIdx.x % 128;
  if (wg == 0) {
    sync::setmaxnreg_dec<T::kProducerRegs>();
    if (tid_wg == 0) e4m3_produce<T>(sm, &map_q, &map_k, &map_vt, c, kv.begin, kv.count);
  } else {
    sync::setmaxnreg_inc<T::kConsumerRegs>();
    const int cw = wg - 1, warp = tid_wg / 32, lane = tid_wg % 32;
    const float qk = descale_at(ep.descale_q, ep.descale_per_head, c.b, p.heads_kv, c.hk) *
                     descale_at(ep.descale_k, ep.descale_per_head, c.b, p.heads_kv, c.hk);
    const float vd = descale_at(ep.descale_v, ep.descale_per_head, c.b, p.heads_kv, c.hk);
    E4m3RowState<T> st;
    float sl2;
    e4m3_consume<T, kTurns, Pol>(sm, p, c, cw, kv.begin, kv.count, warp, lane, qk, st, sl2);
    e4m3_epilogue<T, kOutBf16>(sm, p, c, st, sl2, vd, cw, warp, lane, tid_wg);
  }
}

}  // namespace flashcheck::kernels
