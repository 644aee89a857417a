// decode_paged_f16's first kernel: one CTA per (sequence, KV head, query chunk, split) computes
// the attention of its query rows over its split's keys only, and writes the partial result — O
// normalised by its own sum ℓ, its raw score max and log2 ℓ — to the workspace. combine_kernel.cuh
// merges the splits. The query heads of one KV head are rows of the same CTA (row f of a chunk is
// query f / group of head kv_head·group + f % group), so each K/V byte is read once per KV head
// and query chunk. Tensor cores (mma.sync m16n8k16, one m16 tile of rows per warp), fp32
// accumulators, P rounded to the input type before P·V, exp2 with log2(e) in the scale.
#pragma once
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "gpu/common/cp_async.cuh"
#include "gpu/decode_paged_f16/params.h"
#include "gpu/decode_paged_f16/sequence.cuh"
#include "gpu/decode_paged_f16/split_plan.h"
#include "gpu/decode_paged_f16/tile_size.h"
#include "gpu/mma_f16/mma.cuh"

namespace flashcheck::kernels {

// Element offset of 16-byte chunk c of row r in a shared tile of D-element rows, the chunk stored
// at c ^ (r % 8): the eight rows one ldmatrix phase reads then fall in eight different bank
// groups (unswizzled rows of 128–512 bytes would all start in the same banks).
template <int D>
__device__ __forceinline__ int decode_swz(int r, int c) {
  return r * D + ((c ^ (r & 7)) << 3);
}

__device__ __forceinline__ float decode_quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float decode_quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

template <int D, bool kBf16, class Keys>
__global__ void __launch_bounds__(DecodeTraits<D>::kThreads, 2) decode_split_kernel(const DecodeParams p) {
  using T = DecodeTraits<D>;
  constexpr int BN = T::kBlockN, NT = T::kNTiles, DT = T::kDTiles, CH = T::kChunks, RS = T::kRowStep, ST = T::kStages;
  extern __shared__ __align__(128) uint16_t smem[];
  uint16_t* const sQ = smem;                 // [kRows][D]
  uint16_t* const sK = sQ + T::kRows * D;    // [ST][BN][D]
  uint16_t* const sV = sK + ST * BN * D;     // [ST][BN][D]

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int b = static_cast<int>(blockIdx.x) / p.heads_kv, hk = static_cast<int>(blockIdx.x) % p.heads_kv;
  const int split = blockIdx.z, G = p.group;
  const int sq = decode_sq(p, b), skv = decode_skv(p, b);
  const int64_t rows = int64_t(sq) * G;            // (query, head) rows of this (sequence, KV head)
  const int64_t f0 = int64_t(blockIdx.y) * T::kRows;  // this chunk's first row
  if (f0 >= rows) return;  // (uniform) a chunk past this sequence's queries: no row to write

  // The chunk's keys: those its last query sees (visible_keys grows with the query), of which this
  // split takes a range of whole tiles (split_plan.h; the same arithmetic the host tested).
  const int64_t f_end = f0 + T::kRows < rows ? f0 + T::kRows : rows;
  const int n_vis = visible_keys(p.causal, static_cast<int>((f_end - 1) / G), sq, skv);
  const KeyRange range = split_range(n_vis, p.num_splits, BN, split);
  const int lo = static_cast<int>(range.begin), hi = static_cast<int>(range.end);
  const int n_tiles = (hi - lo + BN - 1) / BN;

  const int64_t rows_total = int64_t(p.batch) * p.heads_q * p.seq_q;
  float* const ws_max = p.ws_max + int64_t(split) * rows_total;
  float* const ws_log2l = p.ws_log2l + int64_t(split) * rows_total;
  float* const ws_o = p.ws_o + int64_t(split) * rows_total * D;
  // Workspace row of chunk row f: (b, head, query) as the combine reads it.
  auto ws_row = [&](int64_t f) { return (int64_t(b) * p.heads_q + int64_t(hk) * G + f % G) * p.seq_q + f / G; };

  if (n_tiles == 0) {
    // No key of this split is visible to the chunk: every row's partial is the empty state
    // (O = 0, m = log2 ℓ = −inf), which the combine weighs 0 — written, so no partial is ever unset.
    for (int idx = tid; idx < T::kRows * (D / 4); idx += T::kThreads) {
      const int r = idx / (D / 4), c = idx % (D / 4);
      if (f0 + r >= rows) continue;
      const int64_t R = ws_row(f0 + r);
      *reinterpret_cast<float4*>(ws_o + R * D + 4 * c) = make_float4(0.f, 0.f, 0.f, 0.f);
      if (c == 0) ws_max[R] = ws_log2l[R] = -INFINITY;
    }
    return;
  }

  // Q rows of the chunk; rows past the sequence's queries become zeros without being read.
  const uint16_t* const Q = static_cast<const uint16_t*>(p.q);
  for (int idx = tid; idx < T::kRows * CH; idx += T::kThreads) {
    const int r = idx / CH, c = idx % CH;
    const int64_t f = f0 + r;
    const bool ok = f < rows;
    const uint16_t* src = ok ? Q + query_row(p, p.sq, b, hk * G + static_cast<int>(f % G), static_cast<int>(f / G)) + c * 8 : Q;
    cp_async_16(sQ + decode_swz<D>(r, c), src, ok);
  }

  // K/V tile t (keys lo + t·BN ...) into ring stage st. Thread tid copies chunk tid % CH of rows
  // tid / CH + j·RS; a key past the split's end is written as zeros and never read (past the
  // cache length it is the unused tail of a last page, or another sequence's page).
  Keys keys;
  keys.init(p, b);
  const uint16_t* const K = static_cast<const uint16_t*>(p.k) + int64_t(hk) * p.sk.head;
  const uint16_t* const V = static_cast<const uint16_t*>(p.v) + int64_t(hk) * p.sv.head;
  const int lr = tid / CH, lc = tid % CH;
  auto load_tile = [&](int t, int st) {
    const int k0 = lo + t * BN;
    uint16_t* const dk = sK + st * BN * D;
    uint16_t* const dv = sV + st * BN * D;
#pragma unroll
    for (int j = 0; j < BN / RS; ++j) {
      const int r = lr + j * RS, key = k0 + r;
      const bool ok = key < hi;
      int64_t outer = 0, seq = 0;
      if (ok) keys.locate(key, outer, seq);
      const uint16_t* srck = ok ? K + outer * p.sk.outer + seq * p.sk.seq + lc * 8 : K;
      const uint16_t* srcv = ok ? V + outer * p.sv.outer + seq * p.sv.seq + lc * 8 : V;
      const int off = decode_swz<D>(r, lc);
      cp_async_16(dk + off, srck, ok);
      cp_async_16(dv + off, srcv, ok);
    }
  };
  // The ring: group s holds tile s (group 0 also Q). Iteration t waits until tiles 0..t landed,
  // then refills the stage iteration t − 1 computed on (the barrier says every warp is done with it).
#pragma unroll
  for (int s = 0; s < ST - 1; ++s) {
    if (s < n_tiles) load_tile(s, s);
    cp_async_commit();
  }

  // This thread's rows of the warp's m16 tile: wr + g and wr + g + 8 (accumulator layout of
  // mma.cuh), each taking keys [lo, lim) of this split; a row past the queries takes none.
  const int g = lane >> 2, t4 = lane & 3, wr = warp * 16;
  const bool computes = f0 + wr < rows;  // warp-uniform: a warp whose rows are all past the queries only copies
  int lim[2];
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const int64_t f = f0 + wr + g + 8 * hf;
    const int vis = f < rows ? visible_keys(p.causal, static_cast<int>(f / G), sq, skv) : 0;
    lim[hf] = vis < hi ? vis : hi;
  }
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  float acc[DT][4];
#pragma unroll
  for (int dt = 0; dt < DT; ++dt)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[dt][e] = 0.f;
  const float sl2 = p.sl2;

  // ldmatrix row addresses (fragment layouts in mma.cuh). Every row these name is ≡ lane (mod 8),
  // so the swizzle term is the same x for all of them.
  const int x = lane & 7;
  const int a_row = wr + (lane & 7) + ((lane >> 3) & 1) * 8, a_c = lane >> 4;  // Q as the A operand
  const int b_row = (lane & 7) + (lane >> 4) * 8, b_c = (lane >> 3) & 1;        // K as B (keys × d)
  const int v_row = (lane & 7) + ((lane >> 3) & 1) * 8, v_c = lane >> 4;        // V as B through .trans
  const uint32_t q_addr = smem_u32(sQ);

  for (int t = 0; t < n_tiles; ++t) {
    cp_async_wait<ST - 2>();
    __syncthreads();
    if (t + ST - 1 < n_tiles) load_tile(t + ST - 1, (t + ST - 1) % ST);
    cp_async_commit();  // possibly empty: the group count stays one per iteration
    if (!computes) continue;

    const int st = t % ST, k0 = lo + t * BN;
    const uint32_t k_addr = smem_u32(sK + st * BN * D), v_addr = smem_u32(sV + st * BN * D);
    float s[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[nt][e] = 0.f;
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      uint32_t a[4];
      ldmatrix_x4(a, q_addr + 2u * (a_row * D + (((2 * ks + a_c) ^ x) << 3)));
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        uint32_t bk[4];
        ldmatrix_x4(bk, k_addr + 2u * ((np * 16 + b_row) * D + (((2 * ks + b_c) ^ x) << 3)));
        mma_16816<kBf16>(s[2 * np], a, bk[0], bk[1]);
        mma_16816<kBf16>(s[2 * np + 1], a, bk[2], bk[3]);
      }
    }

    // Keys a row does not take (past its causal limit, or past the split) get −inf: weight 0.
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (k0 + nt * 8 + 2 * t4 + (e & 1) >= lim[e >> 1]) s[nt][e] = -INFINITY;

    // Online softmax per row. Until a row has a visible key its max is −inf, and −inf − (−inf) is
    // NaN: shift by 0 then (every p is 0 anyway). A NaN score is skipped by fmaxf but its p is
    // NaN, so the row's sum, O and LSE become NaN — the oracle's propagation.
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      float mx = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) mx = fmaxf(mx, fmaxf(s[nt][2 * hf], s[nt][2 * hf + 1]));
      const float m_new = fmaxf(m[hf], decode_quad_max(mx));
      const float m_use = m_new == -INFINITY ? 0.f : m_new;
      const float corr = exp2f((m[hf] - m_use) * sl2);
      float sum = 0.f;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 2 * hf; e < 2 * hf + 2; ++e) {
          s[nt][e] = exp2f((s[nt][e] - m_use) * sl2);  // (s − m) first: the max key's p is exactly 1
          sum += s[nt][e];
        }
      l[hf] = l[hf] * corr + sum;  // lane-partial; summed over the quad at the end
      m[hf] = m_new;
#pragma unroll
      for (int dt = 0; dt < DT; ++dt) {
        acc[dt][2 * hf] *= corr;
        acc[dt][2 * hf + 1] *= corr;
      }
    }

    // O += P·V, P rounded to the input type; two n8 accumulator tiles are one k16 A operand.
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      uint32_t a[4];
      a[0] = pack2<kBf16>(s[2 * kk][0], s[2 * kk][1]);
      a[1] = pack2<kBf16>(s[2 * kk][2], s[2 * kk][3]);
      a[2] = pack2<kBf16>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      a[3] = pack2<kBf16>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
      for (int dp = 0; dp < DT / 2; ++dp) {
        uint32_t bv[4];
        ldmatrix_x4_trans(bv, v_addr + 2u * ((kk * 16 + v_row) * D + (((2 * dp + v_c) ^ x) << 3)));
        mma_16816<kBf16>(acc[2 * dp], a, bv[0], bv[1]);
        mma_16816<kBf16>(acc[2 * dp + 1], a, bv[2], bv[3]);
      }
    }
  }
  cp_async_wait<0>();  // no copy outlives the CTA (the last groups are empty, but say so)

  if (!computes) return;
  // The partial of each row: O / ℓ, the raw max m and log2 ℓ. ℓ = 0 only for a row that took no
  // key of this split (the empty state: m = −inf too); a NaN ℓ stays NaN in O and log2 ℓ.
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const float lt = decode_quad_sum(l[hf]);
    const float inv = lt == 0.f ? 0.f : 1.f / lt;
    const int64_t f = f0 + wr + g + 8 * hf;
    if (f >= rows) continue;
    const int64_t R = ws_row(f);
    float* const orow = ws_o + R * D;
#pragma unroll
    for (int dt = 0; dt < DT; ++dt)
      *reinterpret_cast<float2*>(orow + dt * 8 + 2 * t4) = make_float2(acc[dt][2 * hf] * inv, acc[dt][2 * hf + 1] * inv);
    if (t4 == 0) {
      ws_max[R] = lt == 0.f ? -INFINITY : m[hf];
      ws_log2l[R] = lt == 0.f ? -INFINITY : log2f(lt);
    }
  }
}

}  // namespace flashcheck::kernels
