// The fp64 oracle's kernels: S = (Q Kᵀ)·scale on FP64 tensor cores (mma.sync m8n8k4 f64) with the
// score modifiers (softcap, ALiBi) applied in fp64, then exp(s − m), ℓ (the sink's share included)
// and P·V on FP64 tensor cores, O = (P·V)/ℓ, LSE = m + log ℓ.
//
// Two passes over materialised scores, as the CPU oracle takes its steps: pass 1 writes S and, per
// row and 64-key tile, the max of the visible scores; pass 2 knows the exact row max before it
// takes a single exp, so no running-max rescale (and none of its rounding) enters. S costs
// O(rows × keys the tile sees) device memory (kernels.h), which host.cpp bounds by splitting the
// work into pieces. fp8 inputs arrive as f16 (exact) and are multiplied by their descale when
// widened to fp64 (exact: 4 + 24 significant bits), as naive_attention widens them.
#include <cuda_runtime.h>

#include "reference/gpu_oracle/check.h"
#include "reference/gpu_oracle/device_common.cuh"
#include "reference/gpu_oracle/kernels.h"

namespace flashcheck::gpu_oracle {
namespace {

constexpr int kBK = 16;   // reduction (dims, or keys) per shared-memory stage
constexpr int kPad = 18;  // doubles per smem row of a 16-wide stage: +2 shifts rows by 4 banks,
                          // so the 16-byte fragment loads of 8 lanes never share a bank
// What one row adds to a visible score after the scale, in naive_attention's order and roundings
// (reference/score_mod.h): softcap c·tanh(s/c), then + ALiBi bias (slope·distance rounded, then
// the add). The _rn intrinsics are never fused into an FMA, so every step rounds as the CPU's
// separate operations do; only tanh's own last-ulp error differs (gpu_oracle_test's bound).
struct RowMod {
  double cap = 0;
  int alibi = 0;
  double slope = 0;
  int64_t d = 0, i = 0;
};

__device__ __forceinline__ RowMod row_mod(const Geom& g, const Tile& t, const Row& r) {
  RowMod m;
  m.cap = g.p.softcap;
  m.alibi = g.p.alibi;
  if (m.alibi) m.slope = static_cast<double>(alibi_slope(g.p, t.b, r.h));
  m.d = t.d;
  m.i = r.i;
  return m;
}

__device__ __forceinline__ double score_mod(double s, const RowMod& m, int64_t j) {
  if (m.cap > 0) s = __dmul_rn(m.cap, tanh(__ddiv_rn(s, m.cap)));
  if (m.alibi == 1) {
    const int64_t x = m.i + m.d - j;
    s = __dadd_rn(s, __dmul_rn(-m.slope, static_cast<double>(x < 0 ? -x : x)));
  } else if (m.alibi == 2) {
    s = __dadd_rn(s, __dmul_rn(m.slope, static_cast<double>(j - m.i)));
  }
  return s;
}

// Pass 1. One block: 64 query rows (one tile) × 64 keys, 4 warps of 32×32 (4×4 mma tiles).
// The reduction order is free, so within a 16-dim stage mma step s takes dims {4t + s}: a lane's
// four A (and B) values are then 4 consecutive doubles, two 16-byte shared loads instead of four.
// kPlain (the backward's dP = dO·Vᵀ, dO as fp32 rows, V as packed values): the same product over
// Dv_pad dims with V's descale, stored as it is (no scale, no modifiers, no max). Otherwise z, when
// given (the backward with a softcap), receives each visible score after the scale and before the
// modifiers: the cap's derivative is taken there.
template <typename TA, typename TB, bool kPlain>
__global__ void __launch_bounds__(128) f64_scores_kernel(const TA* __restrict__ q, const TB* __restrict__ k,
                                                         double* __restrict__ s, double* __restrict__ pmax,
                                                         double* __restrict__ z, const Geom g) {
  __shared__ __align__(16) double As[2][64][kPad];
  __shared__ __align__(16) double Bs[2][64][kPad];
  __shared__ double red[2][64];

  const int64_t blk = blockIdx.x;
  const int64_t t = tile_of_block(g.block0, g.ntiles, blk);
  const Tile tile = g.tiles[t];
  const int64_t nt = blk - g.block0[t], kt = tile.ncols / 64;
  const int64_t r0 = t * 64, n0 = tile.key0 + nt * 64;  // first packed row, first (absolute) key
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  // A key tile inside the span that no row sees (rows far apart, e.g. sampled under a window) is
  // skipped: pass 2 reads neither its scores nor its max.
  int sees = 0;
  if (tid < 64) {
    const Row& r = g.rows[r0 + tid];
    sees = r.lo < r.hi && r.lo < n0 + 64 && r.hi > n0;
  }
  if (!__syncthreads_or(sees)) return;

  const int wm = warp >> 1, wn = warp & 1, g4 = lane >> 2, t4 = lane & 3;
  const int64_t dpad = kPlain ? g.p.dv_pad : g.p.dqk_pad;
  const TA* qb = q + r0 * dpad;
  const TB* kb = k + (tile.kv_row + nt * 64) * dpad;
  // fp8: the values times their descale, exact in fp64 (naive_attention's widening). dO has none.
  const double dq = g.p.fp8 && !kPlain ? static_cast<double>(tile.q_descale) : 1.0;
  const double dk = g.p.fp8 ? static_cast<double>(kPlain ? tile.v_descale : tile.k_descale) : 1.0;

  using LA = Ld<TA>;
  using LB = Ld<TB>;
  typename LA::R qr[2];
  typename LB::R kr[2];
  // Stage chunk c = tid + 128·i: row c / 4, dims 4·(c % 4) .. +3 of the stage.
  auto load = [&](int64_t d0) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int c = tid + 128 * i, row = c >> 2, cc = c & 3;
      qr[i] = LA::load(qb + row * dpad + d0 + 4 * cc);
      kr[i] = LB::load(kb + row * dpad + d0 + 4 * cc);
    }
  };
  auto store = [&](int buf) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int c = tid + 128 * i, row = c >> 2, cc = c & 3;
      const float4 a = LA::widen(qr[i]), b = LB::widen(kr[i]);
      double2* da = reinterpret_cast<double2*>(&As[buf][row][4 * cc]);
      double2* db = reinterpret_cast<double2*>(&Bs[buf][row][4 * cc]);
      if (g.p.fp8) {
        da[0] = make_double2(a.x * dq, a.y * dq);
        da[1] = make_double2(a.z * dq, a.w * dq);
        db[0] = make_double2(b.x * dk, b.y * dk);
        db[1] = make_double2(b.z * dk, b.w * dk);
      } else {
        da[0] = make_double2(a.x, a.y);
        da[1] = make_double2(a.z, a.w);
        db[0] = make_double2(b.x, b.y);
        db[1] = make_double2(b.z, b.w);
      }
    }
  };

  double acc[4][4][2];
#pragma unroll
  for (int mi = 0; mi < 4; ++mi)
#pragma unroll
    for (int ni = 0; ni < 4; ++ni) acc[mi][ni][0] = acc[mi][ni][1] = 0.0;

  const int64_t nst = dpad / kBK;
  load(0);
  store(0);
  __syncthreads();
  for (int64_t st = 0; st < nst; ++st) {
    const int buf = static_cast<int>(st & 1);
    if (st + 1 < nst) load((st + 1) * kBK);
    double a[4][4], b[4][4];
#pragma unroll
    for (int mi = 0; mi < 4; ++mi) {
      const double2* p = reinterpret_cast<const double2*>(&As[buf][32 * wm + 8 * mi + g4][4 * t4]);
      const double2 x = p[0], y = p[1];
      a[mi][0] = x.x, a[mi][1] = x.y, a[mi][2] = y.x, a[mi][3] = y.y;
    }
#pragma unroll
    for (int ni = 0; ni < 4; ++ni) {
      const double2* p = reinterpret_cast<const double2*>(&Bs[buf][32 * wn + 8 * ni + g4][4 * t4]);
      const double2 x = p[0], y = p[1];
      b[ni][0] = x.x, b[ni][1] = x.y, b[ni][2] = y.x, b[ni][3] = y.y;
    }
#pragma unroll
    for (int sk = 0; sk < 4; ++sk)
#pragma unroll
      for (int mi = 0; mi < 4; ++mi)
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) dmma(acc[mi][ni][0], acc[mi][ni][1], a[mi][sk], b[ni][sk]);
    if (st + 1 < nst) store(buf ^ 1);
    __syncthreads();
  }

  // Epilogue: s = dot·scale (one rounding, as naive_attention's (Q Kᵀ)·scale), the row's modifiers
  // on visible keys, stored whole (masked entries unmodified: pass 2 never reads them), and the
  // NaN-sticky max over visible keys.
  double* sb = s + tile.s_off + nt * 64;
  if constexpr (kPlain) {
#pragma unroll
    for (int mi = 0; mi < 4; ++mi)
#pragma unroll
      for (int ni = 0; ni < 4; ++ni)
        *reinterpret_cast<double2*>(sb + (32 * wm + 8 * mi + g4) * tile.ncols + 32 * wn + 8 * ni + 2 * t4) =
            make_double2(acc[mi][ni][0], acc[mi][ni][1]);
    return;
  }
#pragma unroll
  for (int mi = 0; mi < 4; ++mi) {
    const int row = 32 * wm + 8 * mi + g4;
    const Row rw = g.rows[r0 + row];
    const RowMod mod = row_mod(g, tile, rw);
    double pm = neg_inf();
#pragma unroll
    for (int ni = 0; ni < 4; ++ni) {
      const int col = 32 * wn + 8 * ni + 2 * t4;
      const int64_t j0 = n0 + col, j1 = j0 + 1;
      double x0 = acc[mi][ni][0] * g.p.scale, x1 = acc[mi][ni][1] * g.p.scale;
      if (z) *reinterpret_cast<double2*>(z + tile.s_off + nt * 64 + row * tile.ncols + col) = make_double2(x0, x1);
      if (j0 >= rw.lo && j0 < rw.hi) {
        x0 = score_mod(x0, mod, j0);
        pm = nan_max(pm, x0);
      }
      if (j1 >= rw.lo && j1 < rw.hi) {
        x1 = score_mod(x1, mod, j1);
        pm = nan_max(pm, x1);
      }
      *reinterpret_cast<double2*>(sb + row * tile.ncols + col) = make_double2(x0, x1);
    }
    pm = nan_max(pm, __shfl_xor_sync(0xffffffffu, pm, 1));
    pm = nan_max(pm, __shfl_xor_sync(0xffffffffu, pm, 2));
    if (t4 == 0) red[wn][row] = pm;
  }
  __syncthreads();
  if (tid < 64) pmax[tile.s_off / 64 + tid * kt + nt] = nan_max(red[0][tid], red[1][tid]);
}

// Pass 2. One block: BM = 32·WR query rows of a tile × BNV = 32·DVT output columns, warps of 32×32
// (4×4 mma tiles); WR·DVT warps. Each key stage (16 keys, at multiples of 16 from key 0, so the
// grouping of keys never depends on the tiling): the block turns its 16 scores per row into
// p = exp(s − m) in shared memory (each score exactly once when BNV covers Dv) and multiplies by the
// V stage. Keys of a stage are permuted like pass 1's dims: mma step s takes keys {4t + s}.
// kGrad (the backward's dQ = scale · dS·K): s holds dS, zero outside each row's visible keys, and
// v the packed K (g.p.dv and dv_pad are Dqk's, the descale K's): the same product without the
// exp, ℓ or LSE, the result times the softmax scale.
template <typename T, int DVT, int WR, bool kGrad>
__global__ void __launch_bounds__(32 * WR * DVT) f64_pv_kernel(const double* __restrict__ s,
                                                               const double* __restrict__ pmax,
                                                               const T* __restrict__ v, double* __restrict__ o,
                                                               double* __restrict__ lse, const Geom g) {
  constexpr int NT = 32 * WR * DVT, BM = 32 * WR, BNV = 32 * DVT;
  constexpr int VST = BNV + 1;         // odd row stride: the 4 keys a fragment load spans hit 4 bank groups
  constexpr int EPT = BM * kBK / NT;   // scores per thread per stage (= 16 / DVT)
  constexpr int VCH = kBK * BNV / 4 / NT;  // 4-element V chunks per thread per stage
  static_assert(EPT * NT == BM * kBK && VCH * NT * 4 == kBK * BNV, "stage does not divide among threads");

  double* smem = dynamic_smem<double>();
  double(*Ps)[BM][kPad] = reinterpret_cast<double(*)[BM][kPad]>(smem);
  double(*Vs)[kBK][VST] = reinterpret_cast<double(*)[kBK][VST]>(smem + 2 * BM * kPad);
  __shared__ double row_m[BM], row_l[BM], row_sink[BM];
  __shared__ int row_lo[BM], row_hi[BM];  // keys the row takes, relative to key0: none for empty and NaN rows
  __shared__ int64_t row_out[BM];
  __shared__ int row_state[BM];  // 0: sees no key, 1: NaN row, 2: normal

  const int64_t cblocks = g.p.dv_pad / BNV;
  int64_t bid = blockIdx.x;
  const int64_t cb = bid % cblocks;
  const int64_t r0 = (bid / cblocks) * BM, t = r0 / 64, c0 = cb * BNV;  // first packed row, its tile
  const Tile tile = g.tiles[t];
  const int64_t lr0 = r0 - t * 64;  // first row within the tile
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp % WR, wn = warp / WR, g4 = lane >> 2, t4 = lane & 3;

  if (tid < BM) {
    const Row rw = g.rows[r0 + tid];
    double m = neg_inf();
    if (kGrad) {
      m = 0.0;  // any finite value: every row with keys takes them
    } else {
      m = visible_max(pmax, tile, rw, lr0 + tid);
    }
    // NaN among the visible scores, all of them −inf (0/0) or a +inf one (inf − inf): the softmax
    // is undefined and the row is NaN, exactly naive_attention's rule (a sink is never NaN or +inf).
    const int state = rw.lo >= rw.hi ? 0 : (isnan(m) || isinf(m)) ? 1 : 2;
    const double sink = g.p.sinks ? static_cast<double>(g.p.sinks[rw.h]) : neg_inf();
    row_state[tid] = state;
    row_m[tid] = state == 2 ? fmax(m, sink) : 0.0;  // the sink joins the max: exp never overflows
    row_sink[tid] = sink;
    // A tile's span is far below 2^31 keys (its scores fit the device): relative keys are ints.
    row_lo[tid] = state == 2 ? static_cast<int>(rw.lo - tile.key0) : 0;
    row_hi[tid] = state == 2 ? static_cast<int>(rw.hi - tile.key0) : 0;
    row_out[tid] = rw.out;
  }
  __syncthreads();
  // The block's keys (relative to key0, a multiple of 64): from the first any normal row sees (down
  // to a multiple of 16) to the last.
  int kbeg = 0x7fffffff, kend = 0;
  for (int r = 0; r < BM; ++r)
    if (row_hi[r] > row_lo[r]) kbeg = kbeg < row_lo[r] ? kbeg : row_lo[r], kend = kend > row_hi[r] ? kend : row_hi[r];
  if (kend == 0) kbeg = 0;
  kbeg -= kbeg % kBK;
  const int nst = (kend - kbeg + kBK - 1) / kBK;

  // Row rr's score of relative key kc at sb[rr·ncols + kc]; its V row at vb + kc·dv_pad.
  const double* sb = s + tile.s_off + lr0 * tile.ncols;
  const T* vb = v + tile.kv_row * g.p.dv_pad + c0;
  const double vd = g.p.fp8 ? static_cast<double>(kGrad ? tile.k_descale : tile.v_descale) : 1.0;
  const int kk = tid & 15;  // the key (within a stage) of every score this thread turns into p
  using L = Ld<T>;
  double sr[EPT];
  typename L::R vr[VCH];
  double lpart[EPT];
#pragma unroll
  for (int i = 0; i < EPT; ++i) lpart[i] = 0.0;

  auto load = [&](int kc) {
#pragma unroll
    for (int i = 0; i < EPT; ++i) sr[i] = sb[((tid >> 4) + (NT / 16) * i) * tile.ncols + kc + kk];
#pragma unroll
    for (int i = 0; i < VCH; ++i) {
      const int c = tid + NT * i, key = c / (BNV / 4), cc = c % (BNV / 4);
      vr[i] = L::load(vb + static_cast<int64_t>(kc + key) * g.p.dv_pad + 4 * cc);
    }
  };
  // p = exp(s − m) for visible keys, exactly 0 for the others; returns "V stage has inf/NaN".
  auto store = [&](int buf, int k0) -> int {
#pragma unroll
    for (int i = 0; i < EPT; ++i) {
      const int row = (tid >> 4) + (NT / 16) * i;
      const int key = k0 + kk;
      double e = 0.0;
      if (key >= row_lo[row] && key < row_hi[row]) {
        if (kGrad) {
          e = sr[i];
        } else {
          e = exp(fmax(sr[i] - row_m[row], kExpArgFloor));
          lpart[i] += e;
        }
      }
      Ps[buf][row][kk] = e;
    }
    int bad = 0;
#pragma unroll
    for (int i = 0; i < VCH; ++i) {
      const int c = tid + NT * i, key = c / (BNV / 4), cc = c % (BNV / 4);
      const float4 x = L::widen(vr[i]);
      bad |= !all_finite(x);
      double* d = &Vs[buf][key][4 * cc];
      if (g.p.fp8) {  // dequantised: exact in fp64
        d[0] = x.x * vd, d[1] = x.y * vd, d[2] = x.z * vd, d[3] = x.w * vd;
      } else {
        d[0] = x.x, d[1] = x.y, d[2] = x.z, d[3] = x.w;
      }
    }
    return bad;
  };

  double acc[4][4][2];
#pragma unroll
  for (int mi = 0; mi < 4; ++mi)
#pragma unroll
    for (int ni = 0; ni < 4; ++ni) acc[mi][ni][0] = acc[mi][ni][1] = 0.0;

  if (nst > 0) {
    load(kbeg);
    int bad = __syncthreads_or(store(0, kbeg));
    for (int st = 0; st < nst; ++st) {
      const int buf = st & 1;
      const int k0 = kbeg + st * kBK;
      if (st + 1 < nst) load(k0 + kBK);
      if (!bad) {
        double a[4][4];
#pragma unroll
        for (int mi = 0; mi < 4; ++mi) {
          const double2* p = reinterpret_cast<const double2*>(&Ps[buf][32 * wm + 8 * mi + g4][4 * t4]);
          const double2 x = p[0], y = p[1];
          a[mi][0] = x.x, a[mi][1] = x.y, a[mi][2] = y.x, a[mi][3] = y.y;
        }
#pragma unroll
        for (int sk = 0; sk < 4; ++sk) {
          double b[4];
#pragma unroll
          for (int ni = 0; ni < 4; ++ni) b[ni] = Vs[buf][4 * t4 + sk][32 * wn + 8 * ni + g4];
#pragma unroll
          for (int mi = 0; mi < 4; ++mi)
#pragma unroll
            for (int ni = 0; ni < 4; ++ni) dmma(acc[mi][ni][0], acc[mi][ni][1], a[mi][sk], b[ni]);
        }
      } else {
        // Inf or NaN in this V stage: p = 0 times inf is NaN, so a key a row does not see would
        // poison it through the tile product. Take the products one by one and skip masked keys
        // (naive_attention does the same for such heads); visible keys still propagate NaN/Inf.
#pragma unroll
        for (int mi = 0; mi < 4; ++mi) {
          const int row = 32 * wm + 8 * mi + g4;
          const int lo = row_lo[row], hi = row_hi[row];
#pragma unroll
          for (int ni = 0; ni < 4; ++ni)
#pragma unroll
            for (int c = 0; c < 2; ++c) {
              const int col = 32 * wn + 8 * ni + 2 * t4 + c;
              for (int j = 0; j < kBK; ++j)
                if (k0 + j >= lo && k0 + j < hi) acc[mi][ni][c] += Ps[buf][row][j] * Vs[buf][j][col];
            }
        }
      }
      int next_bad = 0;
      if (st + 1 < nst) next_bad = store(buf ^ 1, k0 + kBK);
      bad = __syncthreads_or(next_bad);
    }
  }

  // ℓ: each thread summed one key column of its rows; the 16 lanes of a row finish the sum, and
  // the sink's share joins last (naive_attention adds it after the keys' sum).
#pragma unroll
  for (int i = 0; i < EPT; ++i) {
    double lp = lpart[i];
#pragma unroll
    for (int off = 1; off < 16; off <<= 1) lp += __shfl_xor_sync(0xffffffffu, lp, off);
    const int row = (tid >> 4) + (NT / 16) * i;
    if (kk == 0) row_l[row] = row_sink[row] > neg_inf() ? lp + exp(row_sink[row] - row_m[row]) : lp;
  }
  __syncthreads();

#pragma unroll
  for (int mi = 0; mi < 4; ++mi) {
    const int row = 32 * wm + 8 * mi + g4;
    const int64_t out = row_out[row];
    if (out < 0) continue;
    const int state = row_state[row];
    double* orow = o + out * g.p.dv;
#pragma unroll
    for (int ni = 0; ni < 4; ++ni)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int64_t col = c0 + 32 * wn + 8 * ni + 2 * t4 + c;
        if (col >= g.p.dv) continue;
        // ℓ ≥ 1 for a normal row: its max key (or the sink) contributes exp(0) = 1.
        if (kGrad)
          orow[col] = acc[mi][ni][c] * g.p.scale;
        else
          orow[col] = state == 2 ? acc[mi][ni][c] / row_l[row] : (state == 0 ? 0.0 : quiet_nan());
      }
  }
  if (!kGrad && cb == 0 && tid < BM && row_out[tid] >= 0) {
    const int state = row_state[tid];
    lse[row_out[tid]] = state == 2 ? row_m[tid] + log(row_l[tid]) : (state == 0 ? neg_inf() : quiet_nan());
  }
}

template <typename TA, typename TB, bool kPlain>
void scores_as(const void* q, const void* k, double* s, double* pmax, double* z, const Geom& g, cudaStream_t st) {
  if (g.score_blocks <= 0) return;
  FCO_LAUNCH((f64_scores_kernel<TA, TB, kPlain>), static_cast<unsigned>(g.score_blocks), 128, 0, st,
             static_cast<const TA*>(q), static_cast<const TB*>(k), s, pmax, z, g);
  FCO_LAUNCHED(f64_scores_kernel);
}

template <typename T, int DVT, int WR, bool kGrad>
void pv_as(const double* s, const double* pmax, const void* v, double* o, double* lse, const Geom& g, cudaStream_t st) {
  constexpr int BM = 32 * WR, BNV = 32 * DVT;
  const int64_t blocks = g.ntiles * (64 / BM) * (g.p.dv_pad / BNV);
  if (blocks <= 0) return;
  const size_t smem = (2 * BM * kPad + 2 * kBK * (BNV + 1)) * sizeof(double);
  auto kernel = f64_pv_kernel<T, DVT, WR, kGrad>;
  FCO_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  FCO_LAUNCH(kernel, static_cast<unsigned>(blocks), 32 * WR * DVT, smem, st, s, pmax, static_cast<const T*>(v), o, lse,
             g);
  FCO_LAUNCHED(f64_pv_kernel);
}

template <typename T, bool kGrad = false>
void pv_dispatch(const double* s, const double* pmax, const void* v, double* o, double* lse, const Geom& g,
                 cudaStream_t st) {
  // 256 threads at most: BM = 64 rows up to Dv 128; 32 rows at Dv 256 keeps registers under the cap.
  switch (g.p.dv_pad < 256 ? g.p.dv_pad : 256) {
    case 32: return pv_as<T, 1, 2, kGrad>(s, pmax, v, o, lse, g, st);
    case 64: return pv_as<T, 2, 2, kGrad>(s, pmax, v, o, lse, g, st);
    case 128: return pv_as<T, 4, 2, kGrad>(s, pmax, v, o, lse, g, st);
    default: return pv_as<T, 8, 1, kGrad>(s, pmax, v, o, lse, g, st);
  }
}

}  // namespace

void launch_f64_scores(Elem e, const void* q, const void* k, double* s, double* pmax, const Geom& g, cudaStream_t st,
                       double* z) {
  switch (e) {
    case Elem::f32: return scores_as<float, float, false>(q, k, s, pmax, z, g, st);
    case Elem::f16: return scores_as<__half, __half, false>(q, k, s, pmax, z, g, st);
    case Elem::bf16: return scores_as<__nv_bfloat16, __nv_bfloat16, false>(q, k, s, pmax, z, g, st);
  }
}

void launch_f64_dp(Elem e, const float* d_out, const void* v, double* dp, const Geom& g, cudaStream_t st) {
  switch (e) {
    case Elem::f32: return scores_as<float, float, true>(d_out, v, dp, nullptr, nullptr, g, st);
    case Elem::f16: return scores_as<float, __half, true>(d_out, v, dp, nullptr, nullptr, g, st);
    case Elem::bf16: return scores_as<float, __nv_bfloat16, true>(d_out, v, dp, nullptr, nullptr, g, st);
  }
}

void launch_f64_pv(Elem e, const double* s, const double* pmax, const void* v, double* o, double* lse, const Geom& g,
                   cudaStream_t st) {
  switch (e) {
    case Elem::f32: return pv_dispatch<float>(s, pmax, v, o, lse, g, st);
    case Elem::f16: return pv_dispatch<__half>(s, pmax, v, o, lse, g, st);
    case Elem::bf16: return pv_dispatch<__nv_bfloat16>(s, pmax, v, o, lse, g, st);
  }
}

void launch_f64_dq(Elem e, const double* ds, const void* k, double* dq, const Geom& g, cudaStream_t st) {
  switch (e) {
    case Elem::f32: return pv_dispatch<float, true>(ds, nullptr, k, dq, nullptr, g, st);
    case Elem::f16: return pv_dispatch<__half, true>(ds, nullptr, k, dq, nullptr, g, st);
    case Elem::bf16: return pv_dispatch<__nv_bfloat16, true>(ds, nullptr, k, dq, nullptr, g, st);
  }
}

bool kernels_loadable(cudaError_t* why) {
  cudaFuncAttributes attr{};
  const cudaError_t e = cudaFuncGetAttributes(&attr, f64_scores_kernel<float, float, false>);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    if (why) *why = e;
    return false;
  }
  return true;
}

}  // namespace flashcheck::gpu_oracle
