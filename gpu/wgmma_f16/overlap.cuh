// The consumer schedule the wgmma kernels share (wgmma_f16, wgmma_e4m3): a warpgroup's KV tiles with
// S_t = Q·K_tᵀ and P_{t−1}·V_{t−1} in flight together, the softmax of S_t overlapping that P·V, and
// O rescaled by tile t's correction only once the P·V has finished; with kTurns the consumer
// warpgroups also take turns at issuing (ping-pong), so one's softmax runs while another's GEMMs
// occupy the tensor cores. What differs between the kernels (operand types, the GEMMs, how P is
// packed) is the Step they pass; every wait, release and turn is here, once.
#pragma once
#include <cstdint>

#include "gpu/wgmma_f16/barrier.cuh"
#include "gpu/wgmma_f16/wgmma.cuh"
#ifdef FLASHCHECK_PERTURB
#include "gpu/common/perturb.cuh"
#endif

namespace flashcheck::kernels {

// Named barriers (0 is __syncthreads): 1 + w = "consumer warpgroup w may issue its GEMMs";
// 4 + w = warpgroup w's epilogue (w < 3).
constexpr uint32_t kBarTurn = 1, kBarEpilogue = 4;

// Runs n_tiles ≥ 1 tiles through consumer warpgroup cw of W. Sm names the ring's barriers
// (k_full/k_empty/v_full/v_empty per stage, kStages stages); Step does the work:
//   qk(stage)   issue S = Q·Kᵀ on K's slot       pv(stage)  issue O += P·V on V's slot
//   s_ready()   fence S's registers after its wait (wgmma::fence_operands)
//   o_ready()   the same for O and P after P·V's wait
//   softmax_tile(t)  scores → probabilities of tile t (and its correction)
//   rescale()   O *= the correction              to_p()     pack P for the next P·V
template <int kStages, int W, bool kTurns, class Sm, class Step>
__device__ __forceinline__ void overlapped_tiles(const Sm& sm, int cw, int n_tiles, Step& step) {
  // Ping-pong turns: warpgroup w waits on barrier 1 + w until warpgroup w − 1 (mod W) has issued
  // its GEMMs (128 syncing + 128 arriving threads), and hands over to w + 1 after issuing its own.
  // Each issues n_tiles + 1 times; the last warpgroup opens with one extra hand-over so that 0 goes
  // first, and skips its final one (nobody waits for it), so every barrier phase completes.
  auto turn_wait = [&] {
#ifdef FLASHCHECK_PERTURB
    perturb::delay_warp(perturb::kSiteTurn, 3000);
#endif
    if constexpr (kTurns) sync::named_sync(kBarTurn + cw, 256);
  };
  auto turn_pass = [&](bool last) {
    if constexpr (kTurns)
      if (!(last && cw == W - 1)) sync::named_arrive(kBarTurn + (cw + 1) % W, 256);
  };

  if constexpr (kTurns)
    if (cw == W - 1) sync::named_arrive(kBarTurn + 0, 256);
  // Prologue: S_0 alone.
  int stage = 0;
  uint32_t phase = 0;
  turn_wait();
  sync::mbar_wait(sm.k_full(0), 0);
  wgmma::fence();
  step.qk(0);
  wgmma::commit();
  turn_pass(false);
  wgmma::wait<0>();
  step.s_ready();
  sync::mbar_arrive(sm.k_empty(0));
  step.softmax_tile(0);  // O is still 0: its correction is not needed
  step.to_p();

  // Steady state: S_t and P_{t-1}·V_{t-1} in flight together.
  for (int t = 1; t < n_tiles; ++t) {
    const int prev = stage;
    const uint32_t prev_phase = phase;
    if (++stage == kStages) stage = 0, phase ^= 1;
    turn_wait();
    sync::mbar_wait(sm.k_full(stage), phase);
    wgmma::fence();
    step.qk(stage);
    wgmma::commit();
    sync::mbar_wait(sm.v_full(prev), prev_phase);
    step.pv(prev);
    wgmma::commit();
    turn_pass(false);
    wgmma::wait<1>();  // S_t done, P_{t-1}·V_{t-1} may still run
    step.s_ready();
    sync::mbar_arrive(sm.k_empty(stage));
    step.softmax_tile(t);
    wgmma::wait<0>();
    step.o_ready();
    sync::mbar_arrive(sm.v_empty(prev));
    step.rescale();
    step.to_p();
  }

  // Epilogue of the loop: the last tile's P·V.
  turn_wait();
  sync::mbar_wait(sm.v_full(stage), phase);
  wgmma::fence();
  step.pv(stage);
  wgmma::commit();
  turn_pass(true);
  wgmma::wait<0>();
  step.o_ready();
  sync::mbar_arrive(sm.v_empty(stage));
}

}  // namespace flashcheck::kernels
