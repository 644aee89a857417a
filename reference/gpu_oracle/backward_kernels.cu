// The fp64 backward oracle's own kernels (kernels.h): the per-row softmax gradient over the
// materialised scores, and the key-side products dV = Pᵀ·dO and dK = scale · dSᵀ·Q. The row side
// (S, dP, dQ) runs f64_kernels.cu's product kernels. Every step is reference/naive_backward.h's,
// in fp64: P = exp(t − m)/ℓ from the scores themselves (not from a saved LSE), D = Σ_j P_j dP_j,
// dS = P (dP − D) times the softcap's derivative 1/cosh²(s/c).
#include <cuda_runtime.h>

#include "reference/gpu_oracle/check.h"
#include "reference/gpu_oracle/device_common.cuh"
#include "reference/gpu_oracle/kernels.h"

namespace flashcheck::gpu_oracle {
namespace {

constexpr int kRowsPerStage = 16;  // rows summed per shared-memory stage of the key side
constexpr int kPad = 18;           // doubles per smem row of a 16-wide stage (as f64_kernels.cu)

__device__ __forceinline__ double warp_sum(double x) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(0xffffffffu, x, off);
  return x;
}

// One block per tile, a warp per row (8 rows each). Three sweeps of the row's visible keys: ℓ, then
// P and D, then the writes over the whole span (so no product kernel reads a stale value, and a
// masked pair or a padding row is exactly 0 in both P and dS).
__global__ void __launch_bounds__(256) f64_ds_kernel(double* __restrict__ s, double* __restrict__ dp,
                                                     const double* __restrict__ pmax, const double* __restrict__ z,
                                                     double* __restrict__ sinkpart, const Geom g) {
  const int64_t t = blockIdx.x;
  const Tile tile = g.tiles[t];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int r = warp; r < 64; r += 8) {
    const Row rw = g.rows[t * 64 + r];
    double* sr = s + tile.s_off + r * tile.ncols;
    double* dr = dp + tile.s_off + r * tile.ncols;
    const double* zr = z ? z + tile.s_off + r * tile.ncols : nullptr;
    const bool sees = rw.lo < rw.hi;
    const int64_t lo = sees ? rw.lo - tile.key0 : 0, hi = sees ? rw.hi - tile.key0 : 0;
    const double m = visible_max(pmax, tile, rw, r);
    const double sink = g.p.sinks ? static_cast<double>(g.p.sinks[rw.h]) : neg_inf();
    // 0: sees no key; 1: the forward's NaN row (NaN or +inf among its scores, or all −inf); 2: normal.
    const int state = !sees ? 0 : (isnan(m) || isinf(m)) ? 1 : 2;
    const double mm = state == 2 ? fmax(m, sink) : 0.0;  // the sink joins the max, as in the forward
    double inv_l = 0, delta = 0;
    if (state == 2) {
      double l = 0;
      for (int64_t j = lo + lane; j < hi; j += 32) l += exp(fmax(sr[j] - mm, kExpArgFloor));
      l = warp_sum(l);
      if (sink > neg_inf()) l += exp(sink - mm);  // in the denominator, with no value
      inv_l = 1.0 / l;
      for (int64_t j = lo + lane; j < hi; j += 32) delta += exp(fmax(sr[j] - mm, kExpArgFloor)) * inv_l * dr[j];
      delta = warp_sum(delta);
    }
    for (int64_t j = lane; j < tile.ncols; j += 32) {
      double p = 0, ds = 0;
      if (j >= lo && j < hi) {
        if (state == 2) {
          p = exp(fmax(sr[j] - mm, kExpArgFloor)) * inv_l;
          ds = p * (dr[j] - delta);
          if (zr) {
            // 1/cosh², not 1 − tanh², which cancels where tanh saturates (naive_backward's reason).
            const double ch = cosh(zr[j] / g.p.softcap);
            ds *= 1.0 / (ch * ch);
          }
        } else {
          p = ds = quiet_nan();
        }
      }
      sr[j] = p;
      dr[j] = ds;
    }
    if (lane == 0 && rw.out >= 0) {
      // ∂loss/∂sink = −P_sink·D per row; a −inf sink takes no weight and has gradient 0.
      const bool no_sink = !(sink > neg_inf());
      sinkpart[rw.out] = state == 0 || no_sink ? 0.0 : state == 1 ? quiet_nan() : -exp(sink - mm) * inv_l * delta;
    }
  }
}

// The region of key block kb: the last r with regions[r].block0 <= kb.
__device__ __forceinline__ int64_t region_of_block(const Region* regions, int64_t n, int64_t kb) {
  int64_t lo = 0, hi = n - 1;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (regions[mid].block0 <= kb) lo = mid; else hi = mid - 1;
  }
  return lo;
}

// One block: 64 keys × BN columns, warps of 32×32 (2 × BN/32 of them). The reduction runs over the
// rows of every tile of the region whose span holds the 64 keys, 16 rows a stage, tiles ascending:
// a fixed order, so the result is the same bits on every run. A stage no row of which sees one of
// the keys is skipped. x holds P (dV) or dS (dK) as [row][span key]; b the rows' dO or Q.
template <typename TB, int BN>
__global__ void __launch_bounds__(2 * BN) f64_keys_kernel(const double* __restrict__ x, const TB* __restrict__ b,
                                                          double* __restrict__ out, const Region* __restrict__ regions,
                                                          const int64_t nregions, const double mul, const int64_t ldb,
                                                          const int64_t dout, const int b_is_q, const Geom g) {
  constexpr int NT = 2 * BN, KCH = 64 * kRowsPerStage / NT, BCH = kRowsPerStage * BN / 4 / NT;
  static_assert(BCH * NT * 4 == kRowsPerStage * BN && KCH * NT == 64 * kRowsPerStage, "stage does not divide");
  constexpr int BST = BN + 1;  // odd row stride, as f64_pv_kernel's V stage
  __shared__ __align__(16) double As[64][kPad];
  __shared__ double Bs[kRowsPerStage][BST];
  __shared__ int64_t row_lo[kRowsPerStage], row_hi[kRowsPerStage];

  const int64_t cblocks = ldb / BN, bid = blockIdx.x, cb = bid % cblocks, kb = bid / cblocks, c0 = cb * BN;
  const Region rg = regions[region_of_block(regions, nregions, kb)];
  const int64_t k0 = rg.key0 + 64 * (kb - rg.block0);  // first key of the block (absolute)
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp & 1, wn = warp >> 1, g4 = lane >> 2, t4 = lane & 3;
  using L = Ld<TB>;

  double acc[4][4][2];
#pragma unroll
  for (int mi = 0; mi < 4; ++mi)
#pragma unroll
    for (int ni = 0; ni < 4; ++ni) acc[mi][ni][0] = acc[mi][ni][1] = 0.0;

  for (int64_t t = rg.t0; t < rg.t1; ++t) {
    const Tile tile = g.tiles[t];
    if (tile.ncols == 0 || k0 < tile.key0 || k0 + 64 > tile.key0 + tile.ncols) continue;  // uniform
    const double bd = g.p.fp8 && b_is_q ? static_cast<double>(tile.q_descale) : 1.0;
    for (int st = 0; st < 64 / kRowsPerStage; ++st) {
      const int64_t r0 = t * 64 + st * kRowsPerStage;  // first packed row of the stage
      int sees = 0;
      if (tid < kRowsPerStage) {
        const Row rw = g.rows[r0 + tid];
        row_lo[tid] = rw.lo;
        row_hi[tid] = rw.hi;
        sees = rw.lo < rw.hi && rw.lo < k0 + 64 && rw.hi > k0;
      }
      if (!__syncthreads_or(sees)) continue;
      const double* xs = x + tile.s_off + (r0 - t * 64) * tile.ncols + (k0 - tile.key0);
#pragma unroll
      for (int i = 0; i < KCH; ++i) {  // consecutive threads read consecutive keys of a row
        const int e = tid + NT * i, row = e >> 6, key = e & 63;
        As[key][row] = xs[row * tile.ncols + key];
      }
      int bad = 0;
#pragma unroll
      for (int i = 0; i < BCH; ++i) {
        const int c = tid + NT * i, row = c / (BN / 4), cc = c % (BN / 4);
        const float4 v = L::widen(L::load(b + (r0 + row) * ldb + c0 + 4 * cc));
        bad |= !all_finite(v);
        double* d = &Bs[row][4 * cc];
        d[0] = v.x * bd, d[1] = v.y * bd, d[2] = v.z * bd, d[3] = v.w * bd;  // exact: descale 1 or fp8
      }
      bad = __syncthreads_or(bad);
      if (!bad) {
        double a[4][4];
#pragma unroll
        for (int mi = 0; mi < 4; ++mi) {
          const double2* p = reinterpret_cast<const double2*>(&As[32 * wm + 8 * mi + g4][4 * t4]);
          const double2 u = p[0], w = p[1];
          a[mi][0] = u.x, a[mi][1] = u.y, a[mi][2] = w.x, a[mi][3] = w.y;
        }
#pragma unroll
        for (int sk = 0; sk < 4; ++sk) {
          double bb[4];
#pragma unroll
          for (int ni = 0; ni < 4; ++ni) bb[ni] = Bs[4 * t4 + sk][32 * wn + 8 * ni + g4];
#pragma unroll
          for (int mi = 0; mi < 4; ++mi)
#pragma unroll
            for (int ni = 0; ni < 4; ++ni) dmma(acc[mi][ni][0], acc[mi][ni][1], a[mi][sk], bb[ni]);
        }
      } else {
        // Inf or NaN among the stage's rows: a masked pair's 0 times it would be NaN through the
        // tile product. One by one over visible pairs instead (as naive_attention_backward).
#pragma unroll
        for (int mi = 0; mi < 4; ++mi) {
          const int key = 32 * wm + 8 * mi + g4;
#pragma unroll
          for (int ni = 0; ni < 4; ++ni)
#pragma unroll
            for (int c = 0; c < 2; ++c) {
              const int col = 32 * wn + 8 * ni + 2 * t4 + c;
              for (int j = 0; j < kRowsPerStage; ++j)
                if (k0 + key >= row_lo[j] && k0 + key < row_hi[j]) acc[mi][ni][c] += As[key][j] * Bs[j][col];
            }
        }
      }
      __syncthreads();  // the next stage overwrites As, Bs and the rows
    }
  }

  double* ob = out + (rg.kv_row + (k0 - rg.key0)) * dout;
#pragma unroll
  for (int mi = 0; mi < 4; ++mi)
#pragma unroll
    for (int ni = 0; ni < 4; ++ni)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int64_t col = c0 + 32 * wn + 8 * ni + 2 * t4 + c;
        if (col < dout) ob[(32 * wm + 8 * mi + g4) * dout + col] = acc[mi][ni][c] * mul;
      }
}

template <typename TB, int BN>
void keys_as(const double* x, const void* b, double* out, const Region* regions, int64_t nregions, int64_t key_blocks,
             double mul, int64_t ldb, int64_t dout, bool b_is_q, const Geom& g, cudaStream_t st) {
  const int64_t blocks = key_blocks * (ldb / BN);
  if (blocks <= 0) return;
  FCO_LAUNCH((f64_keys_kernel<TB, BN>), static_cast<unsigned>(blocks), 2 * BN, 0, st, x, static_cast<const TB*>(b), out,
             regions, nregions, mul, ldb, dout, b_is_q ? 1 : 0, g);
  FCO_LAUNCHED(f64_keys_kernel);
}

template <typename TB>
void keys_width(const double* x, const void* b, double* out, const Region* regions, int64_t nregions,
                int64_t key_blocks, double mul, int64_t ldb, int64_t dout, bool b_is_q, const Geom& g,
                cudaStream_t st) {
  // ldb is 32·2^k up to 256 or a multiple of 256 (host_backward.cpp pads both head dims so).
  switch (ldb < 128 ? ldb : 128) {
    case 32: return keys_as<TB, 32>(x, b, out, regions, nregions, key_blocks, mul, ldb, dout, b_is_q, g, st);
    case 64: return keys_as<TB, 64>(x, b, out, regions, nregions, key_blocks, mul, ldb, dout, b_is_q, g, st);
    default: return keys_as<TB, 128>(x, b, out, regions, nregions, key_blocks, mul, ldb, dout, b_is_q, g, st);
  }
}

}  // namespace

void launch_f64_ds(double* s, double* dp, const double* pmax, const double* z, double* sinkpart, const Geom& g,
                   cudaStream_t st) {
  if (g.ntiles <= 0) return;
  FCO_LAUNCH(f64_ds_kernel, static_cast<unsigned>(g.ntiles), 256, 0, st, s, dp, pmax, z, sinkpart, g);
  FCO_LAUNCHED(f64_ds_kernel);
}

void launch_f64_keys(Elem e, bool b_is_q, const double* x, const void* b, double* out, const Region* regions,
                     int64_t nregions, int64_t key_blocks, double mul, const Geom& g, cudaStream_t st) {
  if (!b_is_q)
    return keys_width<float>(x, b, out, regions, nregions, key_blocks, mul, g.p.dv_pad, g.p.dv, false, g, st);
  const int64_t ld = g.p.dqk_pad, d = g.p.dqk;
  switch (e) {
    case Elem::f32: return keys_width<float>(x, b, out, regions, nregions, key_blocks, mul, ld, d, true, g, st);
    case Elem::f16: return keys_width<__half>(x, b, out, regions, nregions, key_blocks, mul, ld, d, true, g, st);
    case Elem::bf16:
      return keys_width<__nv_bfloat16>(x, b, out, regions, nregions, key_blocks, mul, ld, d, true, g, st);
  }
}

}  // namespace flashcheck::gpu_oracle
