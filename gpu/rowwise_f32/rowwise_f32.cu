// rowwise_f32: one thread per query row (the design of seeds/001). Grid (q-tiles, heads, batch);
// the block's Q, K and V tiles sit in shared memory and each thread runs the online softmax of its
// own row. Deliberately simple: it is the second opinion the faster kernels are compared with.
#include <cuda_runtime.h>

#include <cmath>

#include "gpu/common/mask.cuh"
#include "gpu/common/params.h"
#include "gpu/rowwise_f32/tile_size.h"
#include "gpu/common/launch.cuh"

namespace flashcheck {
namespace kernels {


__global__ void __launch_bounds__(RowwiseTraits::kBlockQ) rowwise_f32_kernel(FwdParams p) {
  constexpr int BR = RowwiseTraits::kBlockQ, BC = RowwiseTraits::kBlockKV;
  extern __shared__ float smem[];
  const int dqk = p.head_dim_qk, dv = p.head_dim_v;
  // Row strides padded by one float: thread t reads sQ[t][d], and an odd stride spreads the 32
  // threads of a warp over 32 banks instead of one.
  const int q_stride = dqk + 1, o_stride = dv + 1;
  float* sQ = smem;
  float* sK = sQ + BR * q_stride;
  float* sV = sK + BC * dqk;
  float* sO = sV + BC * dv;

  const int t = threadIdx.x, q0 = blockIdx.x * BR, h = blockIdx.y, b = blockIdx.z;
  const int hk = h / (p.heads_q / p.heads_kv);
  const float* Q = static_cast<const float*>(p.q) + (static_cast<size_t>(b) * p.heads_q + h) * p.seq_q * dqk;
  const float* K = static_cast<const float*>(p.k) + (static_cast<size_t>(b) * p.heads_kv + hk) * p.seq_kv * dqk;
  const float* V = static_cast<const float*>(p.v) + (static_cast<size_t>(b) * p.heads_kv + hk) * p.seq_kv * dv;

  for (int i = t; i < BR * dqk; i += BR) {  // coalesced: consecutive threads, consecutive floats
    const int r = i / dqk, c = i % dqk;
    sQ[r * q_stride + c] = q0 + r < p.seq_q ? Q[static_cast<size_t>(q0 + r) * dqk + c] : 0.0f;
  }
  float* o_row = sO + t * o_stride;
  for (int c = 0; c < dv; ++c) o_row[c] = 0.0f;

  const int row = q0 + t;
  const int n_vis = row < p.seq_q ? kv_visible(row, p.seq_q, p.seq_kv, p.causal) : 0;
  // Tiles wholly past the last row's visible keys are never loaded.
  const int kv_end = kv_visible(min(q0 + BR, p.seq_q) - 1, p.seq_q, p.seq_kv, p.causal);
  float m = -INFINITY, l = 0.0f;

  for (int k0 = 0; k0 < kv_end; k0 += BC) {
    __syncthreads();  // the previous tile is no longer read
    for (int i = t; i < BC * dqk; i += BR) {
      const int r = i / dqk, c = i % dqk;
      sK[i] = k0 + r < p.seq_kv ? K[static_cast<size_t>(k0 + r) * dqk + c] : 0.0f;
    }
    for (int i = t; i < BC * dv; i += BR) {
      const int r = i / dv, c = i % dv;
      sV[i] = k0 + r < p.seq_kv ? V[static_cast<size_t>(k0 + r) * dv + c] : 0.0f;
    }
    __syncthreads();
    if (k0 >= n_vis) continue;  // this row sees nothing here (still takes part in the barriers)

    float s[BC];
    float m_new = m;
#pragma unroll
    for (int j = 0; j < BC; ++j) {
      if (k0 + j < n_vis) {
        float dot = 0.0f;
        for (int c = 0; c < dqk; ++c) dot = fmaf(sQ[t * q_stride + c], sK[j * dqk + c], dot);
        s[j] = dot * p.scale;
        m_new = fmaxf(m_new, s[j]);
      } else {
        s[j] = -INFINITY;
      }
    }
    // m starts at -inf: exp(-inf - m_new) = 0 rescales the empty accumulator, and m_new is finite
    // here (this tile has a visible key), so -inf - (-inf) never happens.
    const float corr = __expf(m - m_new);
    l *= corr;
    for (int c = 0; c < dv; ++c) o_row[c] *= corr;
#pragma unroll
    for (int j = 0; j < BC; ++j) {
      if (k0 + j >= n_vis) continue;
      const float pj = __expf(s[j] - m_new);
      l += pj;
      for (int c = 0; c < dv; ++c) o_row[c] = fmaf(pj, sV[j * dv + c], o_row[c]);
    }
    m = m_new;
  }
  if (row >= p.seq_q) return;
  float* O = static_cast<float*>(p.o) + ((static_cast<size_t>(b) * p.heads_q + h) * p.seq_q + row) * dv;
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;  // a row with no visible key: O = 0, never 0/0
  for (int c = 0; c < dv; ++c) O[c] = o_row[c] * inv;
  // -inf only for a row that saw no key (l = 0): a NaN sum (NaN or +Inf inputs) stays NaN.
  if (p.lse) p.lse[(static_cast<size_t>(b) * p.heads_q + h) * p.seq_q + row] = l == 0.0f ? -INFINITY : m + logf(l);
}

void launch_rowwise_f32(const FwdParams& p, void* stream) {
  using T = RowwiseTraits;
  const size_t smem = sizeof(float) * (T::kBlockQ * (p.head_dim_qk + 1) + T::kBlockKV * (p.head_dim_qk + p.head_dim_v) +
                                       T::kBlockQ * (p.head_dim_v + 1));
  launch_fwd(rowwise_f32_kernel, "rowwise_f32_kernel", T::kBlockQ, T::kBlockQ, smem, p, stream);
}

}  // namespace kernels
}  // namespace flashcheck
