// mma_f16's kernel: FlashAttention-2 forward on mma.sync tensor cores (sm_80+), bf16 or fp16 in,
// fp32 accumulators, for the design of seeds/003 (TileLang): 128-row Q blocks, pipelined K/V tiles,
// exp2 with log2(e) folded into the scale, P rounded to the input type and kept in registers
// between the two GEMMs, LSE out. One template over a Policy (policy.h): where the rows live, the
// mask (which KV tiles a q-tile visits and which of them need masking) and the score modifiers.
// The plain policy compiles to the kernel mma_f16 had before problem model 2, instruction for
// instruction (checked by comparing the PTX).
#pragma once
#include <cuda_runtime.h>

#include <cmath>
#include <type_traits>

#include "gpu/common/cp_async.cuh"
#include "gpu/common/params.h"
#include "gpu/common/row_end.cuh"
#include "gpu/mma_f16/mma.cuh"
#include "gpu/mma_f16/policy.h"
#include "gpu/mma_f16/softmax.cuh"
#include "gpu/mma_f16/tile_size.h"
#include "gpu/common/var_params.h"
#ifdef FLASHCHECK_PERTURB
#include "gpu/common/perturb.cuh"
#endif

namespace flashcheck::kernels {

// Shared-memory tiles are rows of D 16-bit elements, 16-byte chunk c of row r stored at chunk
// c ^ (r % 8): the 8 rows an ldmatrix phase reads then sit in 8 different bank groups instead of
// one (a plain layout with 256-byte rows would be an 8-way bank conflict).
template <int D>
__device__ __forceinline__ int swz(int row, int col) {
  return row * D + ((((col >> 3) ^ (row & 7))) << 3) + (col & 7);
}

// Copies kRows rows of a [len, D] tensor whose rows are `ld` elements apart, starting at row r0,
// into a swizzled tile; rows past `len` become zeros without being read. Thread tid always copies
// chunk c = tid % (D/8) of rows tid / (D/8) + j·kRowStep. kRowStep is a multiple of 8, so the
// swizzled chunk c ^ (row % 8) is the same for every j, and each copy is a fixed offset from one
// shared and one global base: no per-copy index arithmetic in the main loop. (A generic strided
// loop here compiled to ~15 integer instructions per 16-byte copy, 15% of the loop's instructions
// at D = 128; see PERF.md.) With the plain policy ld is the constant D and every offset folds; a
// run-time stride (StridedRows' RowStride) walks the rows with one 64-bit step instead, computed
// once per call: an offset multiplied out per copy cost 3 instructions each and, kept live, the
// registers the main loop lacks.
template <int D, int kThreads, int kRows, typename Ld>
__device__ __forceinline__ void load_tile(uint16_t* tile, const uint16_t* g, int r0, int len, int tid, Ld ld) {
  constexpr int kChunks = D / 8, kRowStep = kThreads / kChunks;
  static_assert(kThreads % kChunks == 0 && kRowStep % 8 == 0 && kRows % kRowStep == 0,
                "each thread keeps one chunk column, and row steps keep the swizzle phase");
  const int r = tid / kChunks, c = tid % kChunks;
  uint16_t* dst = tile + r * D + ((c ^ (r & 7)) << 3);
  if constexpr (std::is_same_v<Ld, RowStride>) {
    const size_t step = static_cast<size_t>(kRowStep) * static_cast<size_t>(ld.elems);
    const uint16_t* src = g + static_cast<size_t>(r0 + r) * static_cast<size_t>(ld.elems) + c * 8;
    if (r0 + kRows <= len) {
#pragma unroll
      for (int j = 0; j < kRows / kRowStep; ++j, src += step) cp_async_16(dst + j * kRowStep * D, src);
    } else {
#pragma unroll
      for (int j = 0; j < kRows / kRowStep; ++j, src += step) {
        const bool ok = r0 + r + j * kRowStep < len;
        cp_async_16(dst + j * kRowStep * D, ok ? src : g, ok);
      }
    }
  } else {
    const uint16_t* src = g + static_cast<size_t>(r0 + r) * ld + c * 8;
    if (r0 + kRows <= len) {  // whole tile in bounds: every tile but a sequence's last
#pragma unroll
      for (int j = 0; j < kRows / kRowStep; ++j) cp_async_16(dst + j * kRowStep * D, src + j * kRowStep * ld);
    } else {
#pragma unroll
      for (int j = 0; j < kRows / kRowStep; ++j) {
        const bool ok = r0 + r + j * kRowStep < len;
        cp_async_16(dst + j * kRowStep * D, ok ? src + j * kRowStep * ld : g, ok);
      }
    }
  }
}

template <int D, bool kBf16, class Pol>
__global__ void __launch_bounds__(MmaF16Traits<D>::kThreads, MmaF16Traits<D>::kWarps == 8 ? 1 : 2)
    mma_f16_kernel(typename Pol::Params p) {
  using T = MmaF16Traits<D>;
  using Mask = typename Pol::Mask;
  using Softcap = typename Pol::Softcap;
  using Bias = typename Pol::Bias;
  constexpr int BM = T::kBlockM, BN = T::kBlockN, MT = T::kMTiles, NT = T::kNTiles, DT = T::kDTiles;
  extern __shared__ __align__(128) uint16_t smem[];
  uint16_t* sQ = smem;
  uint16_t* sK = sQ + BM * D;             // [stage][BN][D]
  uint16_t* sV = sK + T::kStages * BN * D;  // [stage][BN][D]

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
#ifdef FLASHCHECK_PERTURB
  // The perturbed build (gpu/common/perturb.h): seeded per-warp sleeps where one warp's lead over
  // another opens a window (reading a stage while another warp refills it), and each stage
  // poisoned once every warp has read it, so a read of it before its refill landed reads NaN.
  if (tid == 0) perturb::init(fwd_of(p).perturb);  // seen by all after the first __syncthreads below
#endif
  typename Pol::Place rows;
  if (!rows.init(p, lane)) return;  // uniform over the CTA
  const int q0 = rows.q0;

  const Mask mask = make_mask<typename Pol::Mask>(p, rows.sq, rows.skv);
  const int q_last = min(q0 + BM, rows.sq) - 1;
  const TileRange kv = mask.template trip<BN>(q0, q_last);
  const int n_tiles = kv.count;
  // Plain: registers (the local below, taken apart by the compiler). Variants: shared memory past
  // the tiles, written here by thread 0, read after the first barrier (block_rows.cuh says why).
  CtaScalars cta{rows.b, q0, rows.sq, rows.skv, kv.begin, kv.all_lo, kv.all_hi, 0};
  const CtaScalars* late = &cta;
  if constexpr (Pol::kVariant) {
    cta.d = fwd_of(p).causal == 1 ? 0 : rows.skv - rows.sq;
    CtaScalars* parked = reinterpret_cast<CtaScalars*>(reinterpret_cast<char*>(smem) + T::kSmemBytes);
    if (tid == 0) *parked = cta;
    __syncthreads();  // before any thread reads it (the first prefetch does)
    late = parked;
  }

  load_tile<D, T::kThreads, BM>(sQ, rows.q, q0, rows.sq, tid, rows.ld_q(p));
  if (n_tiles > 0) {
    load_tile<D, T::kThreads, BN>(sK, rows.k, kv.begin * BN, rows.skv, tid, rows.ld_k(p));
    load_tile<D, T::kThreads, BN>(sV, rows.v, kv.begin * BN, rows.skv, tid, rows.ld_v(p));
  }
  cp_async_commit();

  // This thread's rows: m-tile mt, half hf -> row warp·16·MT + 16·mt + lane/4 + 8·hf. Their
  // visible keys are kept in registers by the plain policy (4 of them); variants recompute them on
  // edge tiles (below).
  const int wrow = warp * 16 * MT;
  typename Mask::Row vis[MT][2];
  float m[MT][2], l[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int row = q0 + wrow + 16 * mt + (lane >> 2) + 8 * hf;
      if constexpr (!Pol::kVariant) vis[mt][hf] = mask.row(row);
      m[mt][hf] = -INFINITY;
      l[mt][hf] = 0.0f;
    }
  float acc_o[MT][DT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int dt = 0; dt < DT; ++dt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_o[mt][dt][e] = 0.0f;
  float sl2;
  Softcap softcap{};
  Bias bias{};
  if constexpr (Pol::kVariant) {
    sl2 = p.sl2;
    if constexpr (Softcap::kOn) softcap = {p.softcap_x, p.softcap_exp};
    if constexpr (Bias::kOn)
      bias.neg_slope = -p.alibi_slopes[p.alibi_per_batch ? rows.b * p.base.heads_q + rows.h : rows.h] / p.alibi_unit;
  } else {
    sl2 = p.scale * 1.4426950408889634f;
  }

  // ldmatrix row addresses this lane supplies (fragment layouts in mma.cuh). In the swizzled tiles
  // the chunk of column 16·ks + 8·b (b ∈ {0,1}) in row r sits at (2ks + b) ^ (r % 8) = 2ks ^ (b ^ r % 8):
  // so each address is one per-lane base XOR a compile-time (ks << 5), with no per-(ks, tile)
  // address registers (hoisting ~80 of those was what made the compiler spill). Valid because every
  // tile starts at a multiple of 2·D bytes, so row offsets never touch the chunk bits.
  constexpr uint32_t kRowBytes = 2 * D;
  const int a_row = (lane & 7) + ((lane >> 3) & 1) * 8, a_b = lane >> 4;         // Q: A operand
  const int b_row = (lane & 7) + (lane >> 4) * 8, b_b = (lane >> 3) & 1;         // K: B operand
  const int v_row = (lane & 7) + ((lane >> 3) & 1) * 8, v_b = lane >> 4;         // V: B via .trans
  const uint32_t q_base = smem_u32(sQ) + (wrow + a_row) * kRowBytes + ((a_b ^ (a_row & 7)) << 4);
  const uint32_t k_lane = b_row * kRowBytes + ((b_b ^ (b_row & 7)) << 4);
  const uint32_t v_lane = v_row * kRowBytes + ((v_b ^ (v_row & 7)) << 4);

  // Iteration t computes KV tile kv.begin + t, in stage t % 2.
  for (int t = 0; t < n_tiles; ++t) {
    if (t + 1 < n_tiles) {  // stream tile t+1 in while tile t is computed on
      const int st = (t + 1) & 1;
      const int r_next = (late->kv_begin + t + 1) * BN;
      load_tile<D, T::kThreads, BN>(sK + st * BN * D, rows.k, r_next, late->skv, tid, rows.ld_k(p));
      load_tile<D, T::kThreads, BN>(sV + st * BN * D, rows.v, r_next, late->skv, tid, rows.ld_v(p));
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
#ifdef FLASHCHECK_PERTURB
    perturb::delay_warp(perturb::kSiteFull, 4000);
#endif
    const uint32_t k_base = smem_u32(sK + (t & 1) * BN * D) + k_lane;
    const uint32_t v_base = smem_u32(sV + (t & 1) * BN * D) + v_lane;
    const int k0 = (late->kv_begin + t) * BN;

    // S = Q Kᵀ for this warp's 16·MT rows and the tile's BN keys.
    float s[MT][NT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      uint32_t a[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) ldmatrix_x4(a[mt], (q_base + mt * 16 * kRowBytes) ^ (ks << 5));
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        uint32_t bk[4];
        ldmatrix_x4(bk, (k_base + np * 16 * kRowBytes) ^ (ks << 5));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_16816<kBf16>(s[mt][2 * np], a[mt], bk[0], bk[1]);
          mma_16816<kBf16>(s[mt][2 * np + 1], a[mt], bk[2], bk[3]);
        }
      }
    }

    // Score modifiers in FlashAttention's order: softcap on every score, the mask on edge tiles
    // only (−inf: exp2 of it is 0, no weight), ALiBi on every score (a masked −inf stays −inf).
    if constexpr (Softcap::kOn) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) s[mt][nt][e] = softcap(s[mt][nt][e]);
    }
    if (Mask::template edge<BN>(k0, late->skv, late->all_lo, late->all_hi)) {
      if constexpr (Pol::kVariant) {
        // Each row's keys recomputed from the parked scalars: a few instructions per row on the
        // few edge tiles, instead of 4–8 registers held through the whole loop.
        const Mask at = make_mask<typename Pol::Mask>(p, late->sq, late->skv);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int hf = 0; hf < 2; ++hf) {
            const typename Mask::Row rv = at.row(late->q0 + wrow + 16 * mt + (lane >> 2) + 8 * hf);
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
              for (int e = 2 * hf; e < 2 * hf + 2; ++e) {
                const int key = k0 + nt * 8 + (lane & 3) * 2 + (e & 1);
                if (Mask::hidden(rv, key)) s[mt][nt][e] = -INFINITY;
              }
          }
      } else {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int key = k0 + nt * 8 + (lane & 3) * 2 + (e & 1);
              if (Mask::hidden(vis[mt][e >> 1], key)) s[mt][nt][e] = -INFINITY;
            }
      }
    }
    if constexpr (Bias::kOn) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
          const float base = Bias::row_base(late->q0 + late->d + wrow + 16 * mt + (lane >> 2) + 8 * hf, k0, lane);
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int e = 2 * hf; e < 2 * hf + 2; ++e) s[mt][nt][e] = bias.add(s[mt][nt][e], base, nt * 8 + (e & 1));
        }
    }

    // Online softmax per row, then P (rounded to the input type) straight from registers into P·V.
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      float corr[2];
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) corr[hf] = online_softmax_row(s[mt], hf, m[mt][hf], l[mt][hf], sl2);
      // corr is exactly 1 for a row whose max did not rise, and x·1 = x: when that holds for all 16
      // rows of the m-tile the 4·DT multiplies can go without changing a bit. Past the first few
      // tiles most rows keep their max, so the (warp-uniform) branch usually skips.
      if (!T::kSkipUnchangedRescale || __any_sync(0xffffffffu, corr[0] != 1.0f || corr[1] != 1.0f)) {
#pragma unroll
        for (int dt = 0; dt < DT; ++dt) {
          acc_o[mt][dt][0] *= corr[0];
          acc_o[mt][dt][1] *= corr[0];
          acc_o[mt][dt][2] *= corr[1];
          acc_o[mt][dt][3] *= corr[1];
        }
      }
    }
#ifdef FLASHCHECK_PERTURB
    perturb::delay_warp(perturb::kSiteWarp, 4000);
#endif
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      // The accumulator layout of two n8 tiles is the A-operand layout of one k16 slice.
      uint32_t a[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        a[mt][0] = pack2<kBf16>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        a[mt][1] = pack2<kBf16>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        a[mt][2] = pack2<kBf16>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        a[mt][3] = pack2<kBf16>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      }
#pragma unroll
      for (int dp = 0; dp < DT / 2; ++dp) {
        uint32_t bv[4];
        ldmatrix_x4_trans(bv, (v_base + kk * 16 * kRowBytes) ^ (dp << 5));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_16816<kBf16>(acc_o[mt][2 * dp], a[mt], bv[0], bv[1]);
          mma_16816<kBf16>(acc_o[mt][2 * dp + 1], a[mt], bv[2], bv[3]);
        }
      }
    }
#ifdef FLASHCHECK_PERTURB
    perturb::delay_warp(perturb::kSiteTurn, 4000);
#endif
    __syncthreads();  // the stage just read is the next prefetch's destination
#ifdef FLASHCHECK_PERTURB
    if (perturb::on(perturb::kPoison)) {  // uniform: every thread reads the same switch
      uint16_t* const stage_k = sK + (t & 1) * BN * D;
      uint16_t* const stage_v = sV + (t & 1) * BN * D;
      for (int i = tid; i < BN * D / 8; i += T::kThreads) {
        perturb::poison16(stage_k + 8 * i);
        perturb::poison16(stage_v + 8 * i);
      }
      __syncthreads();  // the poison lands before the prefetch that refills this stage is issued
    }
#endif
  }

  // A block whose rows see no key at all ran no iteration: its Q copy may still be landing in the
  // tile the epilogue reuses. (Found by flashcheck's empty-row check: garbage in rows that must be 0.)
  if (n_tiles == 0) {
    cp_async_wait<0>();
    __syncthreads();
  }

  // Epilogue: normalise, round to the output type through shared memory (reusing Q's tile) so
  // that global stores are whole 16-byte chunks, and write LSE in natural log.
  float* lse = rows.lse(p, late->b);
  // A sink logit (per query head, natural units) joins the max and the denominator at the end, in
  // log2 units; −inf when there is none, which leaves every row as it was.
  float sink2 = -INFINITY;
  if constexpr (Pol::kVariant)
    if (p.sinks) sink2 = p.sinks[rows.h] * 1.4426950408889634f;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const RowEnd end = end_row<Pol::kVariant>(quad_sum(l[mt][hf]), m[mt][hf] * sl2, sink2);
      const int r = wrow + 16 * mt + (lane >> 2) + 8 * hf;
#pragma unroll
      for (int dt = 0; dt < DT; ++dt) {
        const uint32_t v = pack2<kBf16>(acc_o[mt][dt][2 * hf] * end.inv, acc_o[mt][dt][2 * hf + 1] * end.inv);
        *reinterpret_cast<uint32_t*>(sQ + swz<D>(r, dt * 8 + (lane & 3) * 2)) = v;
      }
      if (lse && (lane & 3) == 0 && late->q0 + r < late->sq)
        // -inf only for a row that saw no key (lt = 0): a NaN sum (NaN or +Inf inputs) stays NaN.
        *rows.lse_row(p, lse, late->q0 + r) = end.lse;
    }
  __syncthreads();
  uint16_t* O = rows.o(p, late->b);
  for (int i = tid; i < BM * (D / 8); i += T::kThreads) {
    const int r = i / (D / 8), c = i % (D / 8);
    if (late->q0 + r < late->sq)
      *reinterpret_cast<uint4*>(O + static_cast<size_t>(late->q0 + r) * rows.ld_o(p) + c * 8) =
          *reinterpret_cast<const uint4*>(sQ + swz<D>(r, c * 8));
  }
}

}  // namespace flashcheck::kernels
