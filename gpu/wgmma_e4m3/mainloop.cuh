// wgmma_e4m3's main loop: the producer thread that streams Q, K and Vᵀ in by TMA, and a consumer
// warpgroup that runs S = Q·Kᵀ (e4m3 × e4m3 → fp32), the online softmax with fp8's max offset, and
// O += P·V with P packed to e4m3 straight from the accumulators. The ring, barriers and schedule
// are wgmma_f16's (gpu/wgmma_f16/mainloop.cuh says why each wait sits where it does); what differs
// is the operands: k-steps of 32 one-byte elements, Vᵀ as a K-major B, and P four to a register.
#pragma once
#include <cuda_fp8.h>

#include <cmath>
#include <cstdint>

#include "gpu/wgmma_e4m3/params.h"
#include "gpu/wgmma_e4m3/smem.cuh"
#include "gpu/wgmma_e4m3/vt_layout.h"
#include "gpu/wgmma_e4m3/wgmma_e4m3.cuh"
#include "gpu/wgmma_f16/barrier.cuh"
#include "gpu/wgmma_f16/overlap.cuh"
#include "gpu/wgmma_f16/place.cuh"
#include "gpu/wgmma_f16/scores.cuh"
#include "gpu/wgmma_f16/softmax.cuh"
#include "gpu/wgmma_f16/tma.cuh"
#include "gpu/wgmma_f16/wgmma.cuh"

namespace flashcheck::kernels {

// P = 2^kPLog2 · exp(s − m) spans [0, 256]: e4m3's subnormals start at 2^-9, so unscaled
// probabilities below 2^-10 would all be 0 (the replica's default for fp8, reference/replica.h).
constexpr int kE4m3PLog2 = 8;

// Lane 0 of the producer warpgroup: Q once, then K and Vᵀ of tiles kv_begin .. kv_begin + n − 1.
// Rows past the sequence (Q, K) and keys past Skv16 (Vᵀ) are zero-filled by TMA; Vᵀ's keys in
// [Skv, Skv16) are zeros of the copy.
template <class T>
__device__ __forceinline__ void e4m3_produce(const E4m3Smem<T>& sm, const CUtensorMap* mq, const CUtensorMap* mk,
                                             const CUtensorMap* mvt, const CtaPlace& c, int kv_begin, int n_tiles) {
  tma::prefetch_map(mq);
  tma::prefetch_map(mk);
  tma::prefetch_map(mvt);
  sync::mbar_arrive_expect_tx(sm.q_full(), static_cast<uint32_t>(T::kQBytes));
#pragma unroll
  for (int j = 0; j < T::kQBlocks; ++j)
    tma::load_4d(sm.q() + j * T::kQBlockBytes, mq, sm.q_full(), T::kRowBytes * j, c.q0, c.h, c.b);
  int stage = 0;
  uint32_t round = 0;
  for (int t = 0; t < n_tiles; ++t) {
    const int k0 = (kv_begin + t) * T::kBlockN;
    if (round > 0) sync::mbar_wait(sm.k_empty(stage), (round - 1) & 1);
    sync::mbar_arrive_expect_tx(sm.k_full(stage), static_cast<uint32_t>(T::kKBytes));
#pragma unroll
    for (int j = 0; j < T::kQBlocks; ++j)
      tma::load_4d(sm.k(stage) + j * T::kKBlockBytes, mk, sm.k_full(stage), T::kRowBytes * j, k0, c.hk, c.b);
    if (round > 0) sync::mbar_wait(sm.v_empty(stage), (round - 1) & 1);
    sync::mbar_arrive_expect_tx(sm.v_full(stage), static_cast<uint32_t>(T::kVtBytes));
#pragma unroll
    for (int j = 0; j < T::kVtBlocks; ++j)  // keys k0 + kVtRowBytes·j .., all Dv rows
      tma::load_4d(sm.v(stage) + j * T::kVtBlockBytes, mvt, sm.v_full(stage), k0 + T::kVtRowBytes * j, 0, c.hk, c.b);
    if (++stage == T::kStages) stage = 0, ++round;
  }
}

// S = Q·Kᵀ: D/32 k-steps of 32 bytes; step ks is 32·(ks % n) bytes into column block ks / n, n the
// steps per row (4 in 128-byte rows, 2 in 64-byte ones).
template <class T>
__device__ __forceinline__ void e4m3_gemm_qk(float (&s)[T::kSRegs], uint64_t desc_q, uint64_t desc_k) {
  constexpr int n = T::kRowBytes / 32;
#pragma unroll
  for (int ks = 0; ks < T::kHeadDimQK / 32; ++ks)
    wgmma::WgmmaE4m3Op<T::kBlockN>::ss(s, wgmma::desc_add(desc_q, (ks / n) * T::kQBlockBytes + (ks % n) * 32),
                                       wgmma::desc_add(desc_k, (ks / n) * T::kKBlockBytes + (ks % n) * 32), ks > 0);
}

// O += P·V: kBlockN/32 k-steps, P's registers 4kk .. 4kk + 3; step kk's keys are 32·(kk % n) bytes
// into the rows of Vᵀ's column block kk / n, n the steps per block row (4 in 128-byte rows, 2 in
// 64-byte ones).
template <class T>
__device__ __forceinline__ void e4m3_gemm_pv(float (&o)[T::kORegs], const uint32_t (&p)[T::kPRegs], uint64_t desc_vt) {
  constexpr int n = T::kVtRowBytes / 32;
#pragma unroll
  for (int kk = 0; kk < T::kBlockN / 32; ++kk)
    wgmma::WgmmaE4m3Op<T::kHeadDimV>::rs(o, p[4 * kk], p[4 * kk + 1], p[4 * kk + 2], p[4 * kk + 3],
                                         wgmma::desc_add(desc_vt, (kk / n) * T::kVtBlockBytes + (kk % n) * 32), 1);
}

// Four fp32 → one register of four e4m3 (round to nearest even; P ≤ 256 < 448 never saturates),
// the first value in the lowest byte.
__device__ __forceinline__ uint32_t pack4_e4m3(float a, float b, float c, float d) {
  const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3);
  const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(c, d), __NV_SATFINITE, __NV_E4M3);
  return lo | (hi << 16);
}

// P (accumulator layout) → the e4m3 A fragments of P·V, register by register as vt_layout.h
// assigns them (the Vᵀ copy holds the matching key at every k position): no shuffle.
template <int kRegs>
__device__ __forceinline__ void e4m3_to_p(const float (&s)[kRegs], uint32_t (&p)[kRegs / 4]) {
#pragma unroll
  for (int kk = 0; kk < kRegs / 16; ++kk)
#pragma unroll
    for (int r = 0; r < 4; ++r)
      p[4 * kk + r] = pack4_e4m3(s[p_accumulator(kk, r, 0)], s[p_accumulator(kk, r, 1)], s[p_accumulator(kk, r, 2)],
                                 s[p_accumulator(kk, r, 3)]);
}

template <class T>
struct E4m3RowState {
  float o[T::kORegs];
  float m[2], l[2];
};

// Consumer warpgroup cw: tiles kv_begin .. kv_begin + n_tiles − 1 on its 64 rows, overlapped as
// wgmma_f16's kOverlap (S_t and P_{t−1}·V_{t−1} in flight together), with turns between the
// warpgroups when kTurns. sl2: score → log2 units (scale · q_descale · k_descale · log2 e).
template <class T, bool kTurns, class Pol>
__device__ __forceinline__ void e4m3_consume(const E4m3Smem<T>& sm, const FwdParams& p, const CtaPlace& c, int cw,
                                             int kv_begin, int n_tiles, int warp, int lane, float qk_descale,
                                             E4m3RowState<T>& st, float& sl2) {
  constexpr int BN = T::kBlockN, W = T::kConsumerWGs;
  const int row_wg = c.q0 + 64 * cw;
  const int row0 = row_wg + 16 * warp + (lane >> 2);
  const TileScores<Pol, BN> scores(p, c, row_wg, row0);
#pragma unroll
  for (int i = 0; i < T::kORegs; ++i) st.o[i] = 0.0f;
  st.m[0] = st.m[1] = -INFINITY;
  st.l[0] = st.l[1] = 0.0f;
  // The descales scale every score of the head alike: folded into the exponent's factor, the raw
  // fp8 dot products stay the scores (as the replica's), and the max is taken on them.
  sl2 = scores.sl2 * qk_descale;

  sync::mbar_wait(sm.q_full(), 0);
  if (n_tiles == 0) return;

  const uint64_t desc_q = wgmma::make_kmajor_desc(sync::smem_addr(sm.q()) + cw * 64 * T::kRowBytes, T::kRowBytes);
  const uint64_t desc_k0 = wgmma::make_kmajor_desc(sync::smem_addr(sm.k(0)), T::kRowBytes);
  const uint64_t desc_v0 = wgmma::make_kmajor_desc(sync::smem_addr(sm.v(0)), T::kVtRowBytes);

  auto desc_k = [&](int stage) { return wgmma::desc_add(desc_k0, stage * static_cast<uint32_t>(T::kKBytes)); };
  auto desc_v = [&](int stage) { return wgmma::desc_add(desc_v0, stage * static_cast<uint32_t>(T::kVtBytes)); };
  float s[T::kSRegs];
  uint32_t pf[T::kPRegs];
  float corr[2];
  auto softmax_tile = [&](int t) {
    scores.apply(s, (kv_begin + t) * BN, lane);
    softmax::online<T::kSRegs, kE4m3PLog2>(s, st.m, st.l, corr, sl2);
  };

  // wgmma_f16's overlapped schedule (overlap.cuh) with this kernel's operands as the step.
  struct Step {
    const decltype(softmax_tile)& softmax_of;
    uint64_t desc_q;
    const decltype(desc_k)& k_desc;
    const decltype(desc_v)& v_desc;
    float (&s)[T::kSRegs];
    uint32_t (&pf)[T::kPRegs];
    float (&o)[T::kORegs];
    float (&corr)[2];
    __device__ __forceinline__ void qk(int stage) { e4m3_gemm_qk<T>(s, desc_q, k_desc(stage)); }
    __device__ __forceinline__ void pv(int stage) { e4m3_gemm_pv<T>(o, pf, v_desc(stage)); }
    __device__ __forceinline__ void s_ready() { wgmma::fence_operands(s); }
    __device__ __forceinline__ void o_ready() {
      wgmma::fence_operands(o);
      wgmma::fence_operands(pf);
    }
    __device__ __forceinline__ void softmax_tile(int t) { softmax_of(t); }
    __device__ __forceinline__ void rescale() { softmax::rescale<T::kSkipUnchangedRescale>(o, corr); }
    __device__ __forceinline__ void to_p() { e4m3_to_p(s, pf); }
  } step{softmax_tile, desc_q, desc_k, desc_v, s, pf, st.o, corr};
  overlapped_tiles<T::kStages, W, kTurns>(sm, cw, n_tiles, step);
}

}  // namespace flashcheck::kernels
