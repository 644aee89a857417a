// The same-dtype eager baseline (verify/baseline.cpp) on the GPU, operation for operation.
//
// The CPU baseline is sequential per output: each score sums its Dqk products in dim order, ℓ sums
// the row's exps in key order, each output sums p·v in key order, with a separate rounding for
// every multiply and add (x86-64 builds without FMA). A register-tiled GEMM keeps that order per
// output element for free (the k loop runs in order), so these kernels use __fmul_rn/__fadd_rn
// (never contracted into an FMA) and reproduce the CPU's bits. The one function that differs is exp:
// glibc's expf there, (float)exp((double)x) here; both are faithfully rounded, so they agree or
// differ by one fp32 ulp (reference/gpu_oracle_test.cpp carries the bound this implies).
#include <cuda_runtime.h>

#include "reference/gpu_oracle/check.h"
#include "reference/gpu_oracle/device_common.cuh"
#include "reference/gpu_oracle/kernels.h"

namespace flashcheck::gpu_oracle {
namespace {

constexpr int kTile = 128;  // rows and keys of a scores tile, rows of a P·V tile
constexpr int kBK = 8;      // dims (scores) or keys (P·V) per shared-memory stage
constexpr int kAst = kTile + 4;  // transposed [k][row] stride: rows stay 16-byte aligned

__device__ __forceinline__ float round_to(Round r, float x) {
  if (r == Round::bf16) return __bfloat162float(__float2bfloat16_rn(x));
  if (r == Round::f16) return __half2float(__float2half_rn(x));
  return x;
}

// exp in fp32, faithfully rounded: the double exp is within 1 ulp of e^x in fp64, far inside half an
// fp32 ulp, so the conversion lands on one of the two floats around e^x.
__device__ __forceinline__ float exp_f32(float x) { return static_cast<float>(exp(static_cast<double>(x))); }

// std::max(m, s) as the CPU baseline writes it: (m < s) ? s : m, which never takes a NaN.
__device__ __forceinline__ float cpu_max(float m, float s) { return (m < s) ? s : m; }

// Thread (ty, tx) of 16×16 owns rows {4ty..4ty+3, 64+4ty..} and, in the scores kernel, keys
// {4tx..4tx+3, 64+4tx..}: two 16-byte shared loads per operand per step, conflict-free.
__device__ __forceinline__ int split8(int base4, int i) { return i < 4 ? base4 + i : 64 + base4 + i - 4; }

template <typename T>
__global__ void __launch_bounds__(256) baseline_scores_kernel(const T* __restrict__ q, const T* __restrict__ k,
                                                              const int64_t* __restrict__ rows, float* __restrict__ s,
                                                              float* __restrict__ pmax, const Geom g, const Round rd) {
  __shared__ __align__(16) float As[2][kBK][kAst];
  __shared__ __align__(16) float Bs[2][kBK][kAst];
  const int64_t mtiles = g.nr_pad / kTile, ntiles = g.skv_pad / kTile;
  int64_t bid = blockIdx.x;
  const int64_t nt = bid % ntiles;
  bid /= ntiles;
  const int64_t mt = bid % mtiles, lbh = bid / mtiles;
  const int64_t r0 = mt * kTile, n0 = nt * kTile;
  if (n0 >= visible_keys(g, rows[r0 + kTile - 1])) return;  // no row of the tile sees these keys

  const int tid = threadIdx.x, ty = tid >> 4, tx = tid & 15;
  const int lrow = tid >> 1, lcc = tid & 1;  // stage load: row (or key) tid/2, dims 4·(tid%2)..+3
  const T* qb = q + (lbh * g.nr_pad + r0 + lrow) * g.dqk_pad + 4 * lcc;
  const T* kb = k + (local_kv_head(g, lbh) * g.skv_pad + n0 + lrow) * g.dqk_pad + 4 * lcc;
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

  const int64_t nst = g.dqk_pad / kBK;
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

  const float scale = static_cast<float>(g.scale);
  float* sb = s + (lbh * g.nr_pad + r0) * g.skv_pad + n0;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int row = split8(4 * ty, i);
    const int64_t nvis = visible_keys(g, rows[r0 + row]);
    float x[8];
    float pm = -INFINITY;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      x[j] = round_to(rd, __fmul_rn(round_to(rd, acc[i][j]), scale));
      if (n0 + split8(4 * tx, j) < nvis) pm = cpu_max(pm, x[j]);
    }
    *reinterpret_cast<float4*>(sb + row * g.skv_pad + 4 * tx) = make_float4(x[0], x[1], x[2], x[3]);
    *reinterpret_cast<float4*>(sb + row * g.skv_pad + 64 + 4 * tx) = make_float4(x[4], x[5], x[6], x[7]);
    // The max ignores NaN and ties only differ in the sign of zero, which exp(s − m) cannot see:
    // any combination order gives the CPU's m.
#pragma unroll
    for (int off = 1; off < 16; off <<= 1) pm = cpu_max(pm, __shfl_xor_sync(0xffffffffu, pm, off));
    if (tx == 0) pmax[(lbh * g.nr_pad + r0 + row) * ntiles + nt] = pm;
  }
}

// One thread per row: m from the tile maxima, then ℓ = Σ exp(s_j − m) strictly in key order.
__global__ void __launch_bounds__(256) baseline_stats_kernel(const float* __restrict__ s,
                                                             const float* __restrict__ pmax,
                                                             const int64_t* __restrict__ rows, float* __restrict__ m_out,
                                                             float* __restrict__ l_out, const Geom g) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * 256 + threadIdx.x;
  if (idx >= g.nbh * g.nr_pad) return;
  const int64_t n = visible_keys(g, rows[idx % g.nr_pad]);
  const int64_t ntiles = g.skv_pad / kTile;
  const float* pm = pmax + idx * ntiles;
  float m = -INFINITY;
  for (int64_t t = 0; t * kTile < n; ++t) m = cpu_max(m, pm[t]);
  const float* row = s + idx * g.skv_pad;
  float l = 0.0f;
  for (int64_t j = 0; j < n; j += 4) {
    const float4 x = *reinterpret_cast<const float4*>(row + j);
    l = __fadd_rn(l, exp_f32(__fsub_rn(x.x, m)));
    if (j + 1 < n) l = __fadd_rn(l, exp_f32(__fsub_rn(x.y, m)));
    if (j + 2 < n) l = __fadd_rn(l, exp_f32(__fsub_rn(x.z, m)));
    if (j + 3 < n) l = __fadd_rn(l, exp_f32(__fsub_rn(x.w, m)));
  }
  m_out[idx] = m;
  l_out[idx] = l;
}

// P·V: 128 rows × BNV = 16·TC columns per block, 8 keys per stage; thread (ty, tx) owns 8 rows ×
// TC columns. p = rd(exp(s − m)/ℓ) is formed once per (row, key) in shared memory, 0 where masked.
template <typename T, int TC>
__global__ void __launch_bounds__(256) baseline_pv_kernel(const float* __restrict__ s, const float* __restrict__ m,
                                                          const float* __restrict__ l, const T* __restrict__ v,
                                                          const int64_t* __restrict__ rows, float* __restrict__ o,
                                                          const Geom g, const Round rd) {
  constexpr int BNV = 16 * TC, VCH = kBK * BNV / 4;  // V chunks of 4 per stage (≤ 256: one per thread)
  __shared__ __align__(16) float Ps[2][kBK][kAst];
  __shared__ __align__(16) float Vs[2][kBK][BNV + 4];
  __shared__ float row_m[kTile], row_l[kTile];
  __shared__ int64_t row_n[kTile];

  const int64_t mtiles = g.nr_pad / kTile, cblocks = g.dv_pad / BNV;
  int64_t bid = blockIdx.x;
  const int64_t cb = bid % cblocks;
  bid /= cblocks;
  const int64_t mt = bid % mtiles, lbh = bid / mtiles;
  const int64_t r0 = mt * kTile, c0 = cb * BNV;
  const int tid = threadIdx.x, ty = tid >> 4, tx = tid & 15;
  if (tid < kTile) {
    const int64_t idx = lbh * g.nr_pad + r0 + tid;
    row_m[tid] = m[idx];
    row_l[tid] = l[idx];
    row_n[tid] = visible_keys(g, rows[r0 + tid]);
  }
  const int64_t kend = visible_keys(g, rows[r0 + kTile - 1]);
  const int64_t nst = (kend + kBK - 1) / kBK;
  __syncthreads();

  const int lrow = tid >> 1, lcc = tid & 1;  // score stage load: row tid/2, keys 4·(tid%2)..+3
  const float* sb = s + (lbh * g.nr_pad + r0 + lrow) * g.skv_pad + 4 * lcc;
  const int vkey = tid / (BNV / 4), vcc = tid % (BNV / 4);
  const T* vb = v + (local_kv_head(g, lbh) * g.skv_pad + vkey) * g.dv_pad + c0 + 4 * vcc;
  using L = Ld<T>;
  float4 sr;
  typename L::R vr{};  // threads past the V stage's chunks never load it
  auto load = [&](int64_t k0) {
    sr = *reinterpret_cast<const float4*>(sb + k0);
    if (tid < VCH) vr = L::load(vb + k0 * g.dv_pad);
  };
  auto store = [&](int buf, int64_t k0) -> int {
    const float x[4] = {sr.x, sr.y, sr.z, sr.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int key = 4 * lcc + j;
      float p = 0.0f;
      // pj = round_to(dtype, exp(s − m) / ℓ), the CPU's exact sequence of roundings.
      if (k0 + key < row_n[lrow]) p = round_to(rd, __fdiv_rn(exp_f32(__fsub_rn(x[j], row_m[lrow])), row_l[lrow]));
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
    load(0);
    int bad = __syncthreads_or(store(0, 0));
    for (int64_t st = 0; st < nst; ++st) {
      const int buf = static_cast<int>(st & 1);
      if (st + 1 < nst) load((st + 1) * kBK);
      const int64_t k0 = st * kBK;
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
            if (k0 + kk >= row_n[split8(4 * ty, i)]) continue;
#pragma unroll
            for (int j = 0; j < TC; ++j) acc[i][j] = __fadd_rn(acc[i][j], __fmul_rn(a[i], b[j]));
          }
        }
      }
      int next_bad = 0;
      if (st + 1 < nst) next_bad = store(buf ^ 1, (st + 1) * kBK);
      bad = __syncthreads_or(next_bad);
    }
  }

#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int64_t r = r0 + split8(4 * ty, i);
    if (r >= g.nr) continue;
    float* orow = o + (lbh * g.nr + r) * g.dv;
#pragma unroll
    for (int j = 0; j < TC; ++j) {
      const int64_t col = c0 + col_of(j);
      if (col < g.dv) orow[col] = round_to(rd, acc[i][j]);
    }
  }
}

template <typename T>
void scores_as(Round r, const void* q, const void* k, const int64_t* rows, float* s, float* pmax, const Geom& g,
               cudaStream_t st) {
  const int64_t blocks = g.nbh * (g.nr_pad / kTile) * (g.skv_pad / kTile);
  if (blocks <= 0) return;
  FCO_LAUNCH(baseline_scores_kernel<T>, static_cast<unsigned>(blocks), 256, 0, st, static_cast<const T*>(q),
             static_cast<const T*>(k), rows, s, pmax, g, r);
  FCO_LAUNCHED(baseline_scores_kernel);
}

template <typename T, int TC>
void pv_as(Round r, const float* s, const float* m, const float* l, const void* v, const int64_t* rows, float* o,
           const Geom& g, cudaStream_t st) {
  const int64_t blocks = g.nbh * (g.nr_pad / kTile) * (g.dv_pad / (16 * TC));
  if (blocks <= 0) return;
  auto kernel = baseline_pv_kernel<T, TC>;
  FCO_LAUNCH(kernel, static_cast<unsigned>(blocks), 256, 0, st, s, m, l, static_cast<const T*>(v), rows, o, g, r);
  FCO_LAUNCHED(baseline_pv_kernel);
}

template <typename T>
void pv_dispatch(Round r, const float* s, const float* m, const float* l, const void* v, const int64_t* rows,
                 float* o, const Geom& g, cudaStream_t st) {
  if (g.dv_pad == 32) return pv_as<T, 2>(r, s, m, l, v, rows, o, g, st);
  if (g.dv_pad == 64) return pv_as<T, 4>(r, s, m, l, v, rows, o, g, st);
  return pv_as<T, 8>(r, s, m, l, v, rows, o, g, st);
}

}  // namespace

void launch_baseline_scores(Elem e, Round r, const void* q, const void* k, const int64_t* rows, float* s,
                            float* pmax, const Geom& g, cudaStream_t st) {
  switch (e) {
    case Elem::f32: return scores_as<float>(r, q, k, rows, s, pmax, g, st);
    case Elem::f16: return scores_as<__half>(r, q, k, rows, s, pmax, g, st);
    case Elem::bf16: return scores_as<__nv_bfloat16>(r, q, k, rows, s, pmax, g, st);
  }
}

void launch_baseline_stats(const float* s, const float* pmax, const int64_t* rows, float* m, float* l,
                           const Geom& g, cudaStream_t st) {
  const int64_t threads = g.nbh * g.nr_pad;
  if (threads <= 0) return;
  FCO_LAUNCH(baseline_stats_kernel, static_cast<unsigned>((threads + 255) / 256), 256, 0, st, s, pmax, rows, m, l, g);
  FCO_LAUNCHED(baseline_stats_kernel);
}

void launch_baseline_pv(Elem e, Round r, const float* s, const float* m, const float* l, const void* v,
                        const int64_t* rows, float* o, const Geom& g, cudaStream_t st) {
  switch (e) {
    case Elem::f32: return pv_dispatch<float>(r, s, m, l, v, rows, o, g, st);
    case Elem::f16: return pv_dispatch<__half>(r, s, m, l, v, rows, o, g, st);
    case Elem::bf16: return pv_dispatch<__nv_bfloat16>(r, s, m, l, v, rows, o, g, st);
  }
}

}  // namespace flashcheck::gpu_oracle
