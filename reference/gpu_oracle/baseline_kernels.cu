// The same-dtype eager baseline (verify/baseline.cpp) on the GPU, operation for operation.
//
// The CPU baseline is sequential per output: each score sums its Dqk products in dim order, ℓ sums
// the row's exps in key order, each output sums p·v in key order, with a separate rounding for
// every multiply and add (x86-64 builds without FMA). A register-tiled GEMM keeps that order per
// output element for free (the k loop runs in order), so these kernels use __fmul_rn/__fadd_rn
// (never contracted into an FMA) and reproduce the CPU's bits. The functions that differ are exp
// and tanh: glibc's expf/tanhf there, (float)exp((double)x) and (float)tanh((double)x) here; all
// are faithfully rounded or nearly so (reference/gpu_oracle_test.cpp carries the bound this implies).
//
// Variants: every change a variant makes to a score is baseline_score (one device function, after
// the fp32 dot product): the dtype roundings, the scale, fp8 descales, softcap and ALiBi. The sink
// joins the row's max and ℓ in the stats kernel; fp8 V is dequantised where it is staged.
#include <cuda_runtime.h>

#include "reference/gpu_oracle/check.h"
#include "reference/gpu_oracle/device_common.cuh"
#include "reference/gpu_oracle/kernels.h"

namespace flashcheck::gpu_oracle {
namespace {

constexpr int kTile = kBaselineTile;  // rows and keys of a scores tile, rows of a P·V tile
constexpr int kBK = 8;      // dims (scores) or keys (P·V) per shared-memory stage
constexpr int kAst = kTile + 4;  // transposed [k][row] stride: rows stay 16-byte aligned

// The baseline's score of query row r and (visible) key j from its fp32 dot product `acc`:
//   s = rd(acc)                 (fp8: acc × (q_descale·k_descale) in fp32, no rounding to fp8)
//   s = rd(s × scale)           (rd: the dtype, or the output dtype for fp8)
//   s = cap·tanh(s / cap)       softcap, fp32
//   s = s + bias(i, j)          ALiBi, the bias slope·distance rounded to fp32
// Each step one fp32 rounding, none fused.
struct ScoreCtx {
  Round rd;
  int fp8;
  float qk_descale, scale, cap;
  int alibi;
  float slope;
  int64_t d, i;
};

__device__ __forceinline__ ScoreCtx score_ctx(const Geom& g, Round rd, const Tile& t, const Row& r) {
  ScoreCtx c;
  c.rd = rd;
  c.fp8 = g.p.fp8;
  c.qk_descale = t.qk_descale;
  c.scale = static_cast<float>(g.p.scale);
  c.cap = static_cast<float>(g.p.softcap);
  c.alibi = g.p.alibi;
  c.slope = c.alibi ? alibi_slope(g.p, t.b, r.h) : 0.0f;
  c.d = t.d;
  c.i = r.i;
  return c;
}

__device__ __forceinline__ float baseline_score(float acc, const ScoreCtx& c, int64_t j) {
  float x = c.fp8 ? __fmul_rn(acc, c.qk_descale) : round_to(c.rd, acc);
  x = round_to(c.rd, __fmul_rn(x, c.scale));
  if (c.cap > 0) x = __fmul_rn(c.cap, tanh_f32(__fdiv_rn(x, c.cap)));
  if (c.alibi == 1) {
    const int64_t dist = c.i + c.d - j;
    x = __fadd_rn(x, __fmul_rn(-c.slope, static_cast<float>(dist < 0 ? -dist : dist)));
  } else if (c.alibi == 2) {
    x = __fadd_rn(x, __fmul_rn(c.slope, static_cast<float>(j - c.i)));
  }
  return x;
}

// Thread (ty, tx) of 16×16 owns rows {4ty..4ty+3, 64+4ty..} and, in the scores kernel, keys
// {4tx..4tx+3, 64+4tx..}: two 16-byte shared loads per operand per step, conflict-free.
__device__ __forceinline__ int split8(int base4, int i) { return i < 4 ? base4 + i : 64 + base4 + i - 4; }

template <typename T>
__global__ void __launch_bounds__(256) baseline_scores_kernel(const T* __restrict__ q, const T* __restrict__ k,
                                                              float* __restrict__ s, float* __restrict__ pmax,
                                                              const Geom g, const Round rd) {
  __shared__ __align__(16) float As[2][kBK][kAst];
  __shared__ __align__(16) float Bs[2][kBK][kAst];
  const int64_t blk = blockIdx.x;
  const int64_t t = tile_of_block(g.block0, g.ntiles, blk);
  const Tile tile = g.tiles[t];
  const int64_t nt = blk - g.block0[t], kt = tile.ncols / kTile;
  const int64_t r0 = t * kTile, n0 = tile.key0 + nt * kTile;  // first packed row, first (absolute) key
  const int tid = threadIdx.x, ty = tid >> 4, tx = tid & 15;
  int sees = 0;  // a key tile no row of the tile sees is skipped (its scores and max are never read)
  if (tid < kTile) {
    const Row& r = g.rows[r0 + tid];
    sees = r.lo < r.hi && r.lo < n0 + kTile && r.hi > n0;
  }
  if (!__syncthreads_or(sees)) return;

  const int lrow = tid >> 1, lcc = tid & 1;  // stage load: row (or key) tid/2, dims 4·(tid%2)..+3
  const int64_t dpad = g.p.dqk_pad;
  const T* qb = q + (r0 + lrow) * dpad + 4 * lcc;
  const T* kb = k + (tile.kv_row + nt * kTile + lrow) * dpad + 4 * lcc;
  using L = Ld<T>;
  typename L::R qr, kr;
  auto load = [&](int64_t d0) {
    qr = L::load(qb + d0);
    kr = L::load(kb + d0);
  };
  auto store = [&](int buf) {
    const float4 a = L::widen(qr), b = L::widen(kr);
    As[buf][4 * lcc + 0][lrow] = a.x, As[buf][4 * lcc + 1][lrow] = a.y;
    As[buf][4 * lcc + 2][lrow] = a.z, As[buf][4 * lcc + 3][lrow] = a.w;
    Bs[buf][4 * lcc + 0][lrow] = b.x, Bs[buf][4 * lcc + 1][lrow] = b.y;
    Bs[buf][4 * lcc + 2][lrow] = b.z, Bs[buf][4 * lcc + 3][lrow] = b.w;
  };

  float acc[8][8];
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;

  const int64_t nst = dpad / kBK;
  load(0);
  store(0);
  __syncthreads();
  for (int64_t st = 0; st < nst; ++st) {
    const int buf = static_cast<int>(st & 1);
    if (st + 1 < nst) load((st + 1) * kBK);
#pragma unroll
    for (int kk = 0; kk < kBK; ++kk) {
      const float4 a0 = *reinterpret_cast<const float4*>(&As[buf][kk][4 * ty]);
      const float4 a1 = *reinterpret_cast<const float4*>(&As[buf][kk][64 + 4 * ty]);
      const float4 b0 = *reinterpret_cast<const float4*>(&Bs[buf][kk][4 * tx]);
      const float4 b1 = *reinterpret_cast<const float4*>(&Bs[buf][kk][64 + 4 * tx]);
      const float a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
      const float b[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
      // acc += q_d·k_d, dims in order, product and sum rounded separately (the CPU's `acc += q[x]*k[x]`).
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = __fadd_rn(acc[i][j], __fmul_rn(a[i], b[j]));
    }
    if (st + 1 < nst) store(buf ^ 1);
    __syncthreads();
  }

  float* sb = s + tile.s_off + nt * kTile;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int row = split8(4 * ty, i);
    const Row rw = g.rows[r0 + row];
    const ScoreCtx ctx = score_ctx(g, rd, tile, rw);
    float x[8];
    float pm = -INFINITY;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int64_t key = n0 + split8(4 * tx, j);
      x[j] = acc[i][j];
      if (key >= rw.lo && key < rw.hi) {  // masked scores are stored raw: nothing reads them
        x[j] = baseline_score(x[j], ctx, key);
        pm = cpu_max(pm, x[j]);
      }
    }
    *reinterpret_cast<float4*>(sb + row * tile.ncols + 4 * tx) = make_float4(x[0], x[1], x[2], x[3]);
    *reinterpret_cast<float4*>(sb + row * tile.ncols + 64 + 4 * tx) = make_float4(x[4], x[5], x[6], x[7]);
    // The max ignores NaN and ties only differ in the sign of zero, which exp(s − m) cannot see:
    // any combination order gives the CPU's m.
#pragma unroll
    for (int off = 1; off < 16; off <<= 1) pm = cpu_max(pm, __shfl_xor_sync(0xffffffffu, pm, off));
    if (tx == 0) pmax[tile.s_off / kTile + row * kt + nt] = pm;
  }
}

// One thread per row: m from the tile maxima of its visible keys and the sink, then
// ℓ = Σ exp(s_j − m) strictly in key order, the sink's exp(sink − m) added last.
__global__ void __launch_bounds__(256) baseline_stats_kernel(const float* __restrict__ s,
                                                             const float* __restrict__ pmax,
                                                             float* __restrict__ m_out, float* __restrict__ l_out,
                                                             const Geom g) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * 256 + threadIdx.x;
  if (idx >= g.ntiles * kTile) return;
  const Row rw = g.rows[idx];
  const int64_t t = idx / kTile, lr = idx % kTile;
  float m = -INFINITY, l = 0.0f;
  if (rw.lo < rw.hi) {
    const int64_t key0 = g.tiles[t].key0, s_off = g.tiles[t].s_off, ncols = g.tiles[t].ncols;
    const int lo = static_cast<int>(rw.lo - key0), hi = static_cast<int>(rw.hi - key0);  // within the tile's span
    const float* pm = pmax + s_off / kTile + lr * (ncols / kTile);
    for (int x = lo / kTile; x * kTile < hi; ++x) m = cpu_max(m, pm[x]);
    const float sink = g.p.sinks ? g.p.sinks[rw.h] : -INFINITY;
    if (g.p.sinks) m = cpu_max(m, sink);
    const float* row = s + s_off + lr * ncols;
    for (int j = lo; j < hi; ++j) l = __fadd_rn(l, exp_f32(__fsub_rn(row[j], m)));
    if (g.p.sinks) l = __fadd_rn(l, exp_f32(__fsub_rn(sink, m)));
  }
  m_out[idx] = m;
  l_out[idx] = l;
}

// P·V: 128 rows × BNV = 16·TC columns per block, 8 keys per stage; thread (ty, tx) owns 8 rows ×
// TC columns. p = rd(exp(s − m)/ℓ) is formed once per (row, key) in shared memory, 0 where masked.
template <typename T, int TC>
__global__ void __launch_bounds__(256) baseline_pv_kernel(const float* __restrict__ s, const float* __restrict__ m,
                                                          const float* __restrict__ l, const T* __restrict__ v,
                                                          float* __restrict__ o, const Geom g, const Round rd) {
  constexpr int BNV = 16 * TC, VCH = kBK * BNV / 4;  // V chunks of 4 per stage (≤ 256: one per thread)
  __shared__ __align__(16) float Ps[2][kBK][kAst];
  __shared__ __align__(16) float Vs[2][kBK][BNV + 4];
  __shared__ float row_m[kTile], row_l[kTile];
  __shared__ int row_lo[kTile], row_hi[kTile];  // visible keys relative to the tile's key0 (none: 0, 0)
  __shared__ int64_t row_out[kTile];

  const int64_t cblocks = g.p.dv_pad / BNV;
  int64_t bid = blockIdx.x;
  const int64_t cb = bid % cblocks, t = bid / cblocks;
  const int64_t r0 = t * kTile, c0 = cb * BNV;
  const Tile tile = g.tiles[t];
  const int tid = threadIdx.x, ty = tid >> 4, tx = tid & 15;
  if (tid < kTile) {
    const int64_t idx = r0 + tid;
    const Row rw = g.rows[idx];
    row_m[tid] = m[idx];
    row_l[tid] = l[idx];
    const bool sees = rw.lo < rw.hi;  // a tile's span is far below 2^31 keys (its scores fit the device)
    row_lo[tid] = sees ? static_cast<int>(rw.lo - tile.key0) : 0;
    row_hi[tid] = sees ? static_cast<int>(rw.hi - tile.key0) : 0;
    row_out[tid] = rw.out;
  }
  __syncthreads();
  // The block's keys (relative to key0, a multiple of the stage): from the first any row sees (down
  // to a multiple of the stage) to the last. Keys before a row's first add p = 0 to its sums: +0
  // leaves them bitwise alone.
  int kbeg = 0x7fffffff, kend = 0;
  for (int r = 0; r < kTile; ++r)
    if (row_hi[r] > row_lo[r]) kbeg = kbeg < row_lo[r] ? kbeg : row_lo[r], kend = kend > row_hi[r] ? kend : row_hi[r];
  if (kend == 0) kbeg = 0;
  kbeg -= kbeg % kBK;
  const int nst = (kend - kbeg + kBK - 1) / kBK;

  const int lrow = tid >> 1, lcc = tid & 1;  // score stage load: row tid/2, keys 4·(tid%2)..+3
  // Row lrow's score of relative key kc at sb[kc]; its V row at vb + kc·dv_pad.
  const float* sb = s + tile.s_off + lrow * tile.ncols + 4 * lcc;
  const int vkey = tid / (BNV / 4), vcc = tid % (BNV / 4);
  const T* vb = v + (tile.kv_row + vkey) * g.p.dv_pad + c0 + 4 * vcc;
  const float vd = tile.v_descale;
  using L = Ld<T>;
  float4 sr;
  typename L::R vr{};  // threads past the V stage's chunks never load it
  auto load = [&](int k0) {
    sr = *reinterpret_cast<const float4*>(sb + k0);
    if (tid < VCH) vr = L::load(vb + static_cast<int64_t>(k0) * g.p.dv_pad);
  };
  auto store = [&](int buf, int k0) -> int {
    const float x[4] = {sr.x, sr.y, sr.z, sr.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int key = 4 * lcc + j;
      float p = 0.0f;
      // pj = round_to(dtype, exp(s − m) / ℓ), the CPU's exact sequence of roundings.
      if (k0 + key >= row_lo[lrow] && k0 + key < row_hi[lrow])
        p = round_to(rd, __fdiv_rn(exp_f32(__fsub_rn(x[j], row_m[lrow])), row_l[lrow]));
      Ps[buf][key][lrow] = p;
    }
    int bad = 0;
    if (tid < VCH) {
      const float4 a = L::widen(vr);
      bad = !all_finite(a);
      *reinterpret_cast<float4*>(&Vs[buf][vkey][4 * vcc]) = a;
    }
    return bad;
  };
  auto col_of = [&](int j) { return TC == 8 ? split8(4 * tx, j) : TC * tx + j; };

  float acc[8][TC];
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < TC; ++j) acc[i][j] = 0.0f;

  if (nst > 0) {
    load(kbeg);
    int bad = __syncthreads_or(store(0, kbeg));
    for (int st = 0; st < nst; ++st) {
      const int buf = st & 1;
      const int k0 = kbeg + st * kBK;
      if (st + 1 < nst) load(k0 + kBK);
#pragma unroll
      for (int kk = 0; kk < kBK; ++kk) {
        const float4 a0 = *reinterpret_cast<const float4*>(&Ps[buf][kk][4 * ty]);
        const float4 a1 = *reinterpret_cast<const float4*>(&Ps[buf][kk][64 + 4 * ty]);
        const float a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
        float b[TC];
#pragma unroll
        for (int j = 0; j < TC; ++j) b[j] = Vs[buf][kk][col_of(j)];
        if (!bad) {
          // Masked keys have p = 0: adding ±0 leaves the sum's bits alone (it is never −0).
#pragma unroll
          for (int i = 0; i < 8; ++i)
#pragma unroll
            for (int j = 0; j < TC; ++j) acc[i][j] = __fadd_rn(acc[i][j], __fmul_rn(a[i], b[j]));
        } else {
          // Inf/NaN in this V stage: 0·inf would be NaN, so masked keys are skipped, not multiplied.
#pragma unroll
          for (int i = 0; i < 8; ++i) {
            const int r = split8(4 * ty, i);
            if (k0 + kk < row_lo[r] || k0 + kk >= row_hi[r]) continue;
#pragma unroll
            for (int j = 0; j < TC; ++j) acc[i][j] = __fadd_rn(acc[i][j], __fmul_rn(a[i], b[j]));
          }
        }
      }
      int next_bad = 0;
      if (st + 1 < nst) next_bad = store(buf ^ 1, k0 + kBK);
      bad = __syncthreads_or(next_bad);
    }
  }

#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int64_t out = row_out[split8(4 * ty, i)];
    if (out < 0) continue;
    float* orow = o + out * g.p.dv;
#pragma unroll
    for (int j = 0; j < TC; ++j) {
      const int64_t col = c0 + col_of(j);
      // fp8: Σ p·v over the raw fp8 values, times the V descale in fp32 (verify/baseline.cpp's order).
      if (col < g.p.dv) orow[col] = round_to(rd, g.p.fp8 ? __fmul_rn(acc[i][j], vd) : acc[i][j]);
    }
  }
}

template <typename T>
void scores_as(Round r, const void* q, const void* k, float* s, float* pmax, const Geom& g, cudaStream_t st) {
  if (g.score_blocks <= 0) return;
  FCO_LAUNCH(baseline_scores_kernel<T>, static_cast<unsigned>(g.score_blocks), 256, 0, st, static_cast<const T*>(q),
             static_cast<const T*>(k), s, pmax, g, r);
  FCO_LAUNCHED(baseline_scores_kernel);
}

template <typename T, int TC>
void pv_as(Round r, const float* s, const float* m, const float* l, const void* v, float* o, const Geom& g,
           cudaStream_t st) {
  const int64_t blocks = g.ntiles * (g.p.dv_pad / (16 * TC));
  if (blocks <= 0) return;
  auto kernel = baseline_pv_kernel<T, TC>;
  FCO_LAUNCH(kernel, static_cast<unsigned>(blocks), 256, 0, st, s, m, l, static_cast<const T*>(v), o, g, r);
  FCO_LAUNCHED(baseline_pv_kernel);
}

template <typename T>
void pv_dispatch(Round r, const float* s, const float* m, const float* l, const void* v, float* o, const Geom& g,
                 cudaStream_t st) {
  if (g.p.dv_pad == 32) return pv_as<T, 2>(r, s, m, l, v, o, g, st);
  if (g.p.dv_pad == 64) return pv_as<T, 4>(r, s, m, l, v, o, g, st);
  return pv_as<T, 8>(r, s, m, l, v, o, g, st);
}

}  // namespace

void launch_baseline_scores(Elem e, Round r, const void* q, const void* k, float* s, float* pmax, const Geom& g,
                            cudaStream_t st) {
  switch (e) {
    case Elem::f32: return scores_as<float>(r, q, k, s, pmax, g, st);
    case Elem::f16: return scores_as<__half>(r, q, k, s, pmax, g, st);
    case Elem::bf16: return scores_as<__nv_bfloat16>(r, q, k, s, pmax, g, st);
  }
}

void launch_baseline_stats(const float* s, const float* pmax, float* m, float* l, const Geom& g, cudaStream_t st) {
  const int64_t threads = g.ntiles * kTile;
  if (threads <= 0) return;
  FCO_LAUNCH(baseline_stats_kernel, static_cast<unsigned>((threads + 255) / 256), 256, 0, st, s, pmax, m, l, g);
  FCO_LAUNCHED(baseline_stats_kernel);
}

void launch_baseline_pv(Elem e, Round r, const float* s, const float* m, const float* l, const void* v, float* o,
                        const Geom& g, cudaStream_t st) {
  switch (e) {
    case Elem::f32: return pv_dispatch<float>(r, s, m, l, v, o, g, st);
    case Elem::f16: return pv_dispatch<__half>(r, s, m, l, v, o, g, st);
    case Elem::bf16: return pv_dispatch<__nv_bfloat16>(r, s, m, l, v, o, g, st);
  }
}

}  // namespace flashcheck::gpu_oracle
