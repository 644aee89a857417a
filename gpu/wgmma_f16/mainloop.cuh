// The two roles of wgmma_f16's main loop: the producer thread that streams Q, K and V in by TMA,
// and a consumer warpgroup that runs S = Q·Kᵀ, the online softmax and O += P·V on 64 query rows.
#pragma once
#include <cmath>
#include <cstdint>

#include "gpu/common/params.h"
#include "gpu/wgmma_f16/barrier.cuh"
#include "gpu/wgmma_f16/overlap.cuh"
#include "gpu/wgmma_f16/place.cuh"
#include "gpu/wgmma_f16/scores.cuh"
#include "gpu/wgmma_f16/smem.cuh"
#include "gpu/wgmma_f16/softmax.cuh"
#include "gpu/wgmma_f16/tma.cuh"
#include "gpu/wgmma_f16/wgmma.cuh"
#ifdef FLASHCHECK_PERTURB
#include "gpu/wgmma_f16/perturb.cuh"
#endif

namespace flashcheck::kernels {

// ---- producer ----------------------------------------------------------------------------------

// Warp 0 of the producer warpgroup. Lane 0 streams Q once, then K and V of every tile the block
// visits (tiles kv_begin .. kv_begin + n_tiles − 1), each into its ring slot as soon as all consumer
// threads have released the tile that used the slot kStages tiles earlier.
//
// zero_from: keys from this one on are not the sequence's (INT_MAX when TMA's bounds already
// zero-fill them). A packed batch's box runs on into the next sequence's rows, and rows past
// seqused_kv are whatever the cache holds (NaN in the harness). The mask gives their scores −inf,
// but P·V still multiplies V's rows by p = 0, and 0·NaN = NaN: so the last tile's V lands on a
// barrier of its own, the whole warp zeroes V's rows from zero_from on, and only then is the tile
// handed to the consumers.
template <class T>
__device__ __forceinline__ void wgmma_produce(const WgmmaSmem<T>& sm, const CUtensorMap* mq, const CUtensorMap* mk,
                                              const CUtensorMap* mv, const CtaPlace& c, int kv_begin, int n_tiles,
                                              int zero_from, int lane) {
  const int kv_last = (kv_begin + n_tiles) * T::kBlockN;  // one past the last key loaded
  const bool tail = n_tiles > 0 && kv_last > zero_from;
  if (lane == 0) {
    tma::prefetch_map(mq);
    tma::prefetch_map(mk);
    tma::prefetch_map(mv);
    // Q is loaded even when the block sees no key: the consumers always wait for it, so no copy can
    // still be landing in the Q tile when their epilogue reuses it for O.
    sync::mbar_arrive_expect_tx(sm.q_full(), static_cast<uint32_t>(T::kQBytes));
#pragma unroll
    for (int j = 0; j < T::kQBlocks; ++j)
      tma::load_4d(sm.q() + j * T::kQBlockBytes, mq, sm.q_full(), 64 * j, c.q_row + c.q0, c.h, c.tma_b);

    int stage = 0;
    uint32_t round = 0;  // how many times the ring has wrapped before tile t
    for (int t = 0; t < n_tiles; ++t) {
      const int k0 = (kv_begin + t) * T::kBlockN;
      // Phase `round - 1` of the empty barrier completes when the consumers release tile t − kStages.
#ifdef FLASHCHECK_PERTURB
      perturb::delay_thread(perturb::kSiteProducer, 2000);
#endif
      if (round > 0) sync::mbar_wait(sm.k_empty(stage), (round - 1) & 1);
#ifdef FLASHCHECK_PERTURB
      if (round > 0) perturb::poison_k<T>(sm, stage);
#endif
      sync::mbar_arrive_expect_tx(sm.k_full(stage), static_cast<uint32_t>(T::kKBytes));
#pragma unroll
      for (int j = 0; j < T::kQBlocks; ++j)
        tma::load_4d(sm.k(stage) + j * T::kKVBlockBytes, mk, sm.k_full(stage), 64 * j, c.k_row + k0, c.hk, c.tma_b);
      if (round > 0) sync::mbar_wait(sm.v_empty(stage), (round - 1) & 1);
#ifdef FLASHCHECK_PERTURB
      if (round > 0) perturb::poison_v<T>(sm, stage);
#endif
      uint64_t* v_bar = tail && t == n_tiles - 1 ? sm.tail_full() : sm.v_full(stage);
      sync::mbar_arrive_expect_tx(v_bar, static_cast<uint32_t>(T::kVBytes));
#pragma unroll
      for (int j = 0; j < T::kVBlocks; ++j)
        tma::load_4d(sm.v(stage) + j * T::kKVBlockBytes, mv, v_bar, 64 * j, c.k_row + k0, c.hk, c.tma_b);
      if (++stage == T::kStages) stage = 0, ++round;
    }
  }
  if (tail) {
    const int stage = (n_tiles - 1) % T::kStages;
    sync::mbar_wait(sm.tail_full(), 0);
    // Whole 128-byte rows of every column block: the swizzle only permutes chunks within a row.
    const int first = zero_from - (kv_last - T::kBlockN);  // in [0, kBlockN)
    constexpr int kChunksPerRow = 8;
    for (int i = first * kChunksPerRow + lane; i < T::kBlockN * kChunksPerRow; i += 32)
#pragma unroll
      for (int j = 0; j < T::kVBlocks; ++j)
        *reinterpret_cast<uint4*>(sm.v(stage) + j * T::kKVBlockBytes + 16 * i) = make_uint4(0, 0, 0, 0);
    sync::fence_proxy_async();  // the generic-proxy zeros, before wgmma's async-proxy reads
    __syncwarp();
    if (lane == 0) sync::mbar_arrive(sm.v_full(stage));
  }
}

// ---- consumer GEMMs ----------------------------------------------------------------------------

// S = Q·Kᵀ for this warpgroup's 64 rows and the tile's kBlockN keys: Dqk/16 wgmmas over k-slices;
// slice ks is 32·(ks % 4) bytes into column block ks / 4 of both Q and K. The first overwrites S.
template <class T, bool kBf16>
__device__ __forceinline__ void gemm_qk(float (&s)[T::kSRegs], uint64_t desc_q, uint64_t desc_k) {
#ifdef FLASHCHECK_PERTURB
  perturb::stretch_qk<T, kBf16>(s, desc_q, desc_k);
  perturb::on_use(perturb::kResS);
  perturb::on_use_smem(perturb::desc_addr(desc_k));
#endif
#pragma unroll
  for (int ks = 0; ks < T::kHeadDimQK / 16; ++ks)
    wgmma::WgmmaOp<T::kBlockN, kBf16>::ss(s, wgmma::desc_add(desc_q, (ks / 4) * T::kQBlockBytes + (ks % 4) * 32),
                                          wgmma::desc_add(desc_k, (ks / 4) * T::kKVBlockBytes + (ks % 4) * 32), ks > 0);
}

// O += P·V: kBlockN/16 wgmmas over 16-key slices, P from registers, V's slice kk 16 rows = 2048
// bytes further into every column block.
template <class T, bool kBf16>
__device__ __forceinline__ void gemm_pv(float (&o)[T::kORegs], const uint32_t (&p)[T::kPRegs], uint64_t desc_v) {
#ifdef FLASHCHECK_PERTURB
  perturb::on_use(perturb::kResO);
  perturb::on_use(perturb::kResP);
  perturb::on_use_smem(perturb::desc_addr(desc_v));
#endif
#pragma unroll
  for (int kk = 0; kk < T::kBlockN / 16; ++kk)
    wgmma::WgmmaOp<T::kHeadDimV, kBf16>::rs(o, p[4 * kk], p[4 * kk + 1], p[4 * kk + 2], p[4 * kk + 3],
                                            wgmma::desc_add(desc_v, kk * 16 * 128), 1);
}

// ---- consumer main loop ------------------------------------------------------------------------

// The running state of a consumer thread's two rows after the main loop.
template <class T>
struct RowState {
  float o[T::kORegs];  // unnormalised O (accumulator layout)
  float m[2], l[2];    // running max of raw scores, lane-partial sum of p
};

// Runs KV tiles kv_begin .. kv_begin + n_tiles − 1 of the block through consumer warpgroup `cw`
// (rows q0 + 64·cw ...). `lane`/`warp` are within the warpgroup. Always waits for Q (see
// wgmma_produce).
template <class T, bool kBf16, int kSched, class Pol>
__device__ __forceinline__ void wgmma_consume(const WgmmaSmem<T>& sm, const typename Pol::Params& p, const CtaPlace& c,
                                              int cw, int kv_begin, int n_tiles, int warp, int lane, RowState<T>& st,
                                              float& sl2) {
  constexpr int BN = T::kBlockN;
  constexpr bool kOverlapped = kSched != kSerial;
  constexpr bool kTurns = kSched == kPingPong;
  constexpr int W = T::kConsumerWGs;

  const int row_wg = c.q0 + 64 * cw;                     // first query row of this warpgroup
  const int row0 = row_wg + 16 * warp + (lane >> 2);     // this thread's rows: row0, row0 + 8
  const TileScores<Pol, BN> scores(p, c, row_wg, row0);

#pragma unroll
  for (int i = 0; i < T::kORegs; ++i) st.o[i] = 0.0f;
  st.m[0] = st.m[1] = -INFINITY;
  st.l[0] = st.l[1] = 0.0f;
  sl2 = scores.sl2;  // raw score → log2 units, for the epilogue's LSE too

  sync::mbar_wait(sm.q_full(), 0);
  if (n_tiles == 0) return;

  const uint64_t desc_q = wgmma::make_desc(sync::smem_addr(sm.q()) + cw * 64 * 128, 16, 1024);
  const uint64_t desc_k0 = wgmma::make_desc(sync::smem_addr(sm.k(0)), 16, 1024);
  const uint64_t desc_v0 = wgmma::make_desc(sync::smem_addr(sm.v(0)), static_cast<uint32_t>(T::kKVBlockBytes), 1024);
  auto desc_k = [&](int stage) { return wgmma::desc_add(desc_k0, stage * static_cast<uint32_t>(T::kKBytes)); };
  auto desc_v = [&](int stage) { return wgmma::desc_add(desc_v0, stage * static_cast<uint32_t>(T::kVBytes)); };

  float s[T::kSRegs];
  uint32_t pf[T::kPRegs];
  float corr[2];

  // S of tile t is ready in s: modify and mask its scores (scores.cuh), then turn them into
  // probabilities.
  auto softmax_tile = [&](int t) {
#ifdef FLASHCHECK_PERTURB
    perturb::on_access(perturb::kResS);
#endif
    scores.apply(s, (kv_begin + t) * BN, lane);
    softmax::online<T::kSRegs, 0, T::kOneFfmaExp>(s, st.m, st.l, corr, sl2);
  };

  if constexpr (!kOverlapped) {
    int stage = 0;
    uint32_t phase = 0;
    for (int t = 0; t < n_tiles; ++t) {
      sync::mbar_wait(sm.k_full(stage), phase);
      wgmma::fence();
      gemm_qk<T, kBf16>(s, desc_q, desc_k(stage));
      wgmma::commit();
      wgmma::wait<0>();
      wgmma::fence_operands(s);
      sync::mbar_arrive(sm.k_empty(stage));
      softmax_tile(t);
      softmax::rescale(st.o, corr);  // tile 0: corr = 0 and O = 0
      softmax::to_a_fragments<kBf16>(s, pf);
      sync::mbar_wait(sm.v_full(stage), phase);
      wgmma::fence();
      gemm_pv<T, kBf16>(st.o, pf, desc_v(stage));
      wgmma::commit();
      wgmma::wait<0>();
      wgmma::fence_operands(st.o);
      wgmma::fence_operands(pf);
      sync::mbar_arrive(sm.v_empty(stage));
      if (++stage == T::kStages) stage = 0, phase ^= 1;
    }
  } else {
    // The overlapped schedules (overlap.cuh), this kernel's GEMMs and softmax as the step. (A
    // template step shared with wgmma_e4m3 changed this kernel's SASS; this one leaves it as it was.)
    struct Step {
      const decltype(softmax_tile)& softmax_of;
      uint64_t desc_q;
      const decltype(desc_k)& k_desc;
      const decltype(desc_v)& v_desc;
      float (&s)[T::kSRegs];
      uint32_t (&pf)[T::kPRegs];
      float (&o)[T::kORegs];
      float (&corr)[2];
      __device__ __forceinline__ void qk(int stage) { gemm_qk<T, kBf16>(s, desc_q, k_desc(stage)); }
      __device__ __forceinline__ void pv(int stage) { gemm_pv<T, kBf16>(o, pf, v_desc(stage)); }
      __device__ __forceinline__ void s_ready() { wgmma::fence_operands(s); }
      __device__ __forceinline__ void o_ready() {
        wgmma::fence_operands(o);
        wgmma::fence_operands(pf);
      }
      __device__ __forceinline__ void softmax_tile(int t) { softmax_of(t); }
      __device__ __forceinline__ void rescale() { softmax::rescale<T::kSkipUnchangedRescale>(o, corr); }
      __device__ __forceinline__ void to_p() { softmax::to_a_fragments<kBf16>(s, pf); }
    } step{softmax_tile, desc_q, desc_k, desc_v, s, pf, st.o, corr};
    overlapped_tiles<T::kStages, W, kTurns>(sm, cw, n_tiles, step);
  }
}

}  // namespace flashcheck::kernels
