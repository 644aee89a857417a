// mma_f16: FlashAttention-2 forward on mma.sync tensor cores (sm_80+), bf16 or fp16 in, fp32
// accumulators, for the design of seeds/003 (TileLang): 128-row Q blocks, pipelined K/V tiles,
// exp2 with log2(e) folded into the scale, P rounded to the input type and kept in registers
// between the two GEMMs, bottom-right causal offsets, LSE out.
#include <cuda_runtime.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "gpu/common/cp_async.cuh"
#include "gpu/common/mask.cuh"
#include "gpu/common/params.h"
#include "gpu/common/launch.cuh"
#include "gpu/mma_f16/mma.cuh"
#include "gpu/mma_f16/softmax.cuh"
#include "gpu/mma_f16/tile_size.h"
#ifdef FLASHCHECK_PERTURB
#include "gpu/common/perturb.cuh"
#include "gpu/common/perturb_host.h"
#endif

namespace flashcheck::kernels {

// Shared-memory tiles are rows of D 16-bit elements, 16-byte chunk c of row r stored at chunk
// c ^ (r % 8): the 8 rows an ldmatrix phase reads then sit in 8 different bank groups instead of
// one (a plain layout with 256-byte rows would be an 8-way bank conflict).
template <int D>
__device__ __forceinline__ int swz(int row, int col) {
  return row * D + ((((col >> 3) ^ (row & 7))) << 3) + (col & 7);
}

// Copies kRows rows of a [len, D] tensor, starting at row r0, into a swizzled tile; rows past `len`
// become zeros without being read. Thread tid always copies chunk c = tid % (D/8) of rows
// tid / (D/8) + j·kRowStep. kRowStep is a multiple of 8, so the swizzled chunk c ^ (row % 8) is the
// same for every j, and each copy is a fixed offset from one shared and one global base: no
// per-copy index arithmetic in the main loop. (A generic strided loop here compiled to ~15 integer
// instructions per 16-byte copy, 15% of the loop's instructions at D = 128; see PERF.md.)
template <int D, int kThreads, int kRows>
__device__ __forceinline__ void load_tile(uint16_t* tile, const uint16_t* g, int r0, int len, int tid) {
  constexpr int kChunks = D / 8, kRowStep = kThreads / kChunks;
  static_assert(kThreads % kChunks == 0 && kRowStep % 8 == 0 && kRows % kRowStep == 0,
                "each thread keeps one chunk column, and row steps keep the swizzle phase");
  const int r = tid / kChunks, c = tid % kChunks;
  uint16_t* dst = tile + r * D + ((c ^ (r & 7)) << 3);
  const uint16_t* src = g + static_cast<size_t>(r0 + r) * D + c * 8;
  if (r0 + kRows <= len) {  // whole tile in bounds: every tile but a sequence's last
#pragma unroll
    for (int j = 0; j < kRows / kRowStep; ++j) cp_async_16(dst + j * kRowStep * D, src + j * kRowStep * D);
  } else {
#pragma unroll
    for (int j = 0; j < kRows / kRowStep; ++j) {
      const bool ok = r0 + r + j * kRowStep < len;
      cp_async_16(dst + j * kRowStep * D, ok ? src + j * kRowStep * D : g, ok);
    }
  }
}

template <int D, bool kBf16>
__global__ void __launch_bounds__(MmaF16Traits<D>::kThreads, MmaF16Traits<D>::kWarps == 8 ? 1 : 2)
    mma_f16_kernel(FwdParams p) {
  using T = MmaF16Traits<D>;
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
  if (tid == 0) perturb::init(p.perturb);  // seen by all after the first __syncthreads below
#endif
  // Causal blocks near the bottom of the sequence do the most work: launch them first.
  const int q_tile = p.causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
  const int q0 = q_tile * BM, h = blockIdx.y, b = blockIdx.z;
  const int hk = h / (p.heads_q / p.heads_kv);
  const uint16_t* Q = static_cast<const uint16_t*>(p.q) + (static_cast<size_t>(b) * p.heads_q + h) * p.seq_q * D;
  const uint16_t* K = static_cast<const uint16_t*>(p.k) + (static_cast<size_t>(b) * p.heads_kv + hk) * p.seq_kv * D;
  const uint16_t* V = static_cast<const uint16_t*>(p.v) + (static_cast<size_t>(b) * p.heads_kv + hk) * p.seq_kv * D;

  const int q_last = min(q0 + BM, p.seq_q) - 1;
  const int kv_end = kv_visible(q_last, p.seq_q, p.seq_kv, p.causal);  // tiles past this never load
  const int kv_first_row = kv_visible(q0, p.seq_q, p.seq_kv, p.causal);  // keys every row of the block sees
  const int n_tiles = (kv_end + BN - 1) / BN;

  load_tile<D, T::kThreads, BM>(sQ, Q, q0, p.seq_q, tid);
  if (n_tiles > 0) {
    load_tile<D, T::kThreads, BN>(sK, K, 0, p.seq_kv, tid);
    load_tile<D, T::kThreads, BN>(sV, V, 0, p.seq_kv, tid);
  }
  cp_async_commit();

  // This thread's rows: m-tile mt, half hf -> row warp·16·MT + 16·mt + lane/4 + 8·hf.
  const int wrow = warp * 16 * MT;
  int n_vis[MT][2];
  float m[MT][2], l[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int row = q0 + wrow + 16 * mt + (lane >> 2) + 8 * hf;
      n_vis[mt][hf] = row < p.seq_q ? kv_visible(row, p.seq_q, p.seq_kv, p.causal) : 0;
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
  const float sl2 = p.scale * 1.4426950408889634f;

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

  for (int t = 0; t < n_tiles; ++t) {
    if (t + 1 < n_tiles) {  // stream tile t+1 in while tile t is computed on
      const int st = (t + 1) & 1;
      load_tile<D, T::kThreads, BN>(sK + st * BN * D, K, (t + 1) * BN, p.seq_kv, tid);
      load_tile<D, T::kThreads, BN>(sV + st * BN * D, V, (t + 1) * BN, p.seq_kv, tid);
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
    const int k0 = t * BN;

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

    // Mask only the tiles that need it: the sequence tail, and tiles crossing the causal diagonal.
    if (k0 + BN > p.seq_kv || k0 + BN > kv_first_row) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = k0 + nt * 8 + (lane & 3) * 2 + (e & 1);
            if (key >= n_vis[mt][e >> 1]) s[mt][nt][e] = -INFINITY;  // exp2(-inf) = 0: no weight
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
  float* lse = p.lse ? p.lse + (static_cast<size_t>(b) * p.heads_q + h) * p.seq_q : nullptr;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const float lt = quad_sum(l[mt][hf]);
      const float inv = lt > 0.0f ? 1.0f / lt : 0.0f;  // a row with no visible key: O = 0, never 0/0
      const int r = wrow + 16 * mt + (lane >> 2) + 8 * hf;
#pragma unroll
      for (int dt = 0; dt < DT; ++dt) {
        const uint32_t v = pack2<kBf16>(acc_o[mt][dt][2 * hf] * inv, acc_o[mt][dt][2 * hf + 1] * inv);
        *reinterpret_cast<uint32_t*>(sQ + swz<D>(r, dt * 8 + (lane & 3) * 2)) = v;
      }
      if (lse && (lane & 3) == 0 && q0 + r < p.seq_q)
        // -inf only for a row that saw no key (lt = 0): a NaN sum (NaN or +Inf inputs) stays NaN.
        lse[q0 + r] = lt == 0.0f ? -INFINITY : (m[mt][hf] * sl2 + log2f(lt)) * 0.6931471805599453f;
    }
  __syncthreads();
  uint16_t* O = static_cast<uint16_t*>(p.o) + (static_cast<size_t>(b) * p.heads_q + h) * p.seq_q * D;
  for (int i = tid; i < BM * (D / 8); i += T::kThreads) {
    const int r = i / (D / 8), c = i % (D / 8);
    if (q0 + r < p.seq_q)
      *reinterpret_cast<uint4*>(O + static_cast<size_t>(q0 + r) * D + c * 8) =
          *reinterpret_cast<const uint4*>(sQ + swz<D>(r, c * 8));
  }
}

template <int D, bool kBf16>
void launch(const FwdParams& p, void* s) {
  using T = MmaF16Traits<D>;
#ifndef FLASHCHECK_PERTURB
  launch_fwd(mma_f16_kernel<D, kBf16>, "mma_f16_kernel", T::kBlockM, T::kThreads, T::kSmemBytes, p, s, T::kBlockN);
#else
  // The perturbed build: its state area after the tiles, its settings in the parameters.
  FwdParams pp = p;
  pp.perturb = perturb::begin(p, static_cast<cudaStream_t>(s));
  launch_fwd(mma_f16_kernel<D, kBf16>, "mma_f16_kernel (perturbed build)", T::kBlockM, T::kThreads,
             T::kSmemBytes + perturb::kExtraSmem, pp, s, T::kBlockN);
  perturb::end(pp.perturb, static_cast<cudaStream_t>(s), "mma_f16");
#endif
}

void launch_mma_f16(const FwdParams& p, bool bf16, void* stream) {
  void* s = stream;
  switch (p.head_dim_qk) {
    case 64: return bf16 ? launch<64, true>(p, s) : launch<64, false>(p, s);
    case 128: return bf16 ? launch<128, true>(p, s) : launch<128, false>(p, s);
    case 256: return bf16 ? launch<256, true>(p, s) : launch<256, false>(p, s);
    default: throw std::invalid_argument("mma_f16: head dim " + std::to_string(p.head_dim_qk) + " not compiled");
  }
}

}  // namespace flashcheck::kernels
