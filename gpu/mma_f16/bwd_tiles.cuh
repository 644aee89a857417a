// The backward's shared-memory tiles: loads into them and small register/shared helpers. A tile is
// rows of D 16-bit values, 16-byte chunk c of row r stored at chunk c ^ (r % 8) (the forward's
// swizzle: the 8 rows an ldmatrix phase reads fall in 8 bank groups); bwd_warp_gemm.cuh reads them.
#pragma once
#include <cstddef>
#include <cstdint>

#include "gpu/common/cp_async.cuh"
#include "gpu/common/mask.cuh"
#include "gpu/common/var_params.h"
#include "gpu/common/bwd_params.h"
#include "gpu/mma_f16/mma.cuh"

namespace flashcheck::kernels::bwd {

// Row 0 of head h of sequence b (RowStrides3: elements).
__device__ __forceinline__ const uint16_t* row0_of(const void* t, const RowStrides3& s, int b, int h) {
  return static_cast<const uint16_t*>(t) + static_cast<int64_t>(b) * s.outer + static_cast<int64_t>(h) * s.head;
}

// Rows [r0, r0 + kRows) of a tensor whose row i starts at g + i·ld elements, into a swizzled
// tile; rows at or past `len` become zeros without being read. A thread copies one 16-byte chunk
// column c of rows r, r + kStep, ...: with kStep a multiple of 8 its rows share r % 8, so its shared
// addresses are one base plus immediates and its global ones one pointer plus a stride (the
// generic x / kChunks, x % kChunks per copy cost ~15 instructions each, a tenth of a step's).
// kUntestedWhole: a tile wholly inside the sequence (all but the last) copies without tests, its
// pointer stepped by one 64-bit add. Measured per kernel (PERF.md session 13, call 6, one H100):
// the deterministic mode's passes 4% faster with it, the default dK/dV pass (255 registers, atomic
// dQ) 1.3% slower, so that one keeps the tested form.
template <int D, int kThreads, int kRows = 64, bool kUntestedWhole = true>
__device__ __forceinline__ void load_rows(uint16_t* tile, const uint16_t* g, int64_t ld, int r0, int len, int tid) {
  constexpr int kChunks = D / 8, kStep = kThreads / kChunks;
  static_assert(kThreads % kChunks == 0 && kStep % 8 == 0 && kRows % kStep == 0, "whole rows per pass, rows 8 apart");
  const int r = tid / kChunks, c = tid % kChunks;
  const uint32_t s = smem_u32(tile + r * D + ((c ^ (r & 7)) << 3));
  const uint16_t* src = g + static_cast<int64_t>(r0 + r) * ld + c * 8;
  if constexpr (kUntestedWhole) {
    if (r0 + kRows <= len) {
      const int64_t step = kStep * ld;
#pragma unroll
      for (int i = 0; i < kRows / kStep; ++i, src += step) cp_async_16(s + i * kStep * D * 2, src);
      return;
    }
  }
#pragma unroll
  for (int i = 0; i < kRows / kStep; ++i) {
    const bool ok = r0 + r + i * kStep < len;
    cp_async_16(s + i * kStep * D * 2, ok ? src + i * kStep * ld : g, ok);
  }
}

// LSE (base e) and D of rows [m0, m0 + kRows) of query head h into lse_to and del_to by cp.async
// (zeros past seq_q): a plain load stored to shared memory would hold its threads, and at the next
// barrier every warp, for a global latency on every step. Both kernels' dK/dV passes.
template <int kRows, int kThreads>
__device__ __forceinline__ void load_row_stats(float* lse_to, float* del_to, const BwdParams& p, int b, int h, int m0, int tid) {
  const float* lse = p.lse + static_cast<int64_t>(b) * p.slse_.outer + static_cast<int64_t>(h) * p.slse_.head;
  for (int r = tid; r < kRows; r += kThreads) {
    const int i = m0 + r;
    const bool ok = i < p.seq_q;
    cp_async_4(lse_to + r, ok ? lse + static_cast<int64_t>(i) * p.slse_.seq : p.lse, ok);
    cp_async_4(del_to + r, ok ? p.delta + (static_cast<int64_t>(b) * p.heads_q + h) * p.seq_q + i : p.delta, ok);
  }
}

// The backward's mask, both passes: row i sees keys [0, kv_visible(i)) (gpu/common/mask.cuh, the
// forward kernels' rule). A step of query rows [m0, m0 + bm) and keys [n0, n0 + bn) needs the test
// only where a mask reaches it: keys past seq_kv, rows past seq_q, or a causal diagonal crossing it.
struct BwdMask {
  int seq_q, seq_kv, causal;
  int off;  // row i's last visible key is i + off (causal)
  __device__ __forceinline__ explicit BwdMask(const BwdParams& p)
      : seq_q(p.seq_q), seq_kv(p.seq_kv), causal(p.causal), off(p.causal == 2 ? p.seq_kv - p.seq_q : 0) {}
  __device__ __forceinline__ int visible(int row) const { return kv_visible(row, seq_q, seq_kv, causal); }
  __device__ __forceinline__ bool edge(int m0, int bm, int n0, int bn) const {
    return n0 + bn > seq_kv || m0 + bm > seq_q || (causal && m0 + off < n0 + bn - 1);
  }
  __device__ __forceinline__ bool hidden(int row, int key) const { return row >= seq_q || key >= visible(row); }
};

__device__ __forceinline__ void st_shared_u32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v));
}

// An accumulator pair of n8 tiles (c[2kk], c[2kk + 1], rows of 16, columns 16·kk..) as the A
// fragment of the next GEMM, rounded to the input type: P or dS kept in registers between GEMMs.
template <bool kBf16>
__device__ __forceinline__ void acc_to_a(uint32_t (&a)[4], const float (&c0)[4], const float (&c1)[4]) {
  a[0] = pack2<kBf16>(c0[0], c0[1]);
  a[1] = pack2<kBf16>(c0[2], c0[3]);
  a[2] = pack2<kBf16>(c1[0], c1[1]);
  a[3] = pack2<kBf16>(c1[2], c1[3]);
}

}  // namespace flashcheck::kernels::bwd
