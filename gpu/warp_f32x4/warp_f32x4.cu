// warp_f32x4: fp32 FlashAttention on CUDA cores (the design of seeds/004). Each query row belongs
// to a group of 16 lanes; lane g owns the float4s at dims 64c + 4g of Q, O, K and V, so every
// shared-memory access of a group is 256 contiguous bytes (conflict-free) and every global load
// is a coalesced float4. Each group carries 2 rows, sharing every K/V load between them.
//
// Scores: for 8 keys at a time, each lane forms 8 partial dot products over its dims, then a
// reduce-scatter across the 16 lanes (exchange 4, 2, 1 values, then add the pair) leaves every
// lane pair holding one key's full score: 8 shuffles for 8 keys instead of 4 per key.
#include <cuda_runtime.h>

#include <cmath>

#include "gpu/common/cp_async.cuh"
#include "gpu/common/mask.cuh"
#include "gpu/common/params.h"
#include "gpu/warp_f32x4/tile_size.h"
#include "gpu/common/launch.cuh"

namespace flashcheck {
namespace kernels {


__device__ __forceinline__ float4 fma4(float a, float4 b, float4 c) {
  return make_float4(fmaf(a, b.x, c.x), fmaf(a, b.y, c.y), fmaf(a, b.z, c.z), fmaf(a, b.w, c.w));
}
__device__ __forceinline__ float dot4(float4 a, float4 b, float c) {
  return fmaf(a.x, b.x, fmaf(a.y, b.y, fmaf(a.z, b.z, fmaf(a.w, b.w, c))));
}

template <int DP>
__global__ void __launch_bounds__(WarpF32x4Traits<DP>::kThreads, 1) warp_f32x4_kernel(FwdParams p) {
  using T = WarpF32x4Traits<DP>;
  constexpr int BC = T::kBlockKV, NC = T::kChunks, R = T::kRowsPerGroup;
  extern __shared__ __align__(16) float smem[];
  float* sP = smem + 2 * T::kStageFloats;

  const int tid = threadIdx.x, g = tid & 15, group = tid >> 4;
  const int q0 = blockIdx.x * T::kBlockQ, h = blockIdx.y, b = blockIdx.z;
  const int hk = h / (p.heads_q / p.heads_kv);
  const int dqk = p.head_dim_qk, dv = p.head_dim_v;
  const float* Q = static_cast<const float*>(p.q) + (static_cast<size_t>(b) * p.heads_q + h) * p.seq_q * dqk;
  const float* K = static_cast<const float*>(p.k) + (static_cast<size_t>(b) * p.heads_kv + hk) * p.seq_kv * dqk;
  const float* V = static_cast<const float*>(p.v) + (static_cast<size_t>(b) * p.heads_kv + hk) * p.seq_kv * dv;

  // Rows g and g + kGroups: interleaved halves, so causal work is spread evenly over the groups.
  int row[R], n_vis[R], r_local[R];
  float4 q[R][NC], o[R][NC];
  float m[R], l[R];
  // exp2 instead of exp: scale·log2(e) is folded into Q once, and each score then costs one EX2.
  const float qscale = p.scale * 1.4426950408889634f;
#pragma unroll
  for (int i = 0; i < R; ++i) {
    r_local[i] = group + i * T::kGroups;
    row[i] = q0 + r_local[i];
    n_vis[i] = row[i] < p.seq_q ? kv_visible(row[i], p.seq_q, p.seq_kv, p.causal) : 0;
    m[i] = -INFINITY;
    l[i] = 0.0f;
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      const int d = 64 * c + 4 * g;
      float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
      if (row[i] < p.seq_q && d < dqk) x = *reinterpret_cast<const float4*>(Q + static_cast<size_t>(row[i]) * dqk + d);
      q[i][c] = make_float4(x.x * qscale, x.y * qscale, x.z * qscale, x.w * qscale);
      o[i][c] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
  }

  // Every block loads keys up to its last row's visible prefix; tiles above the diagonal never load.
  const int kv_end = kv_visible(min(q0 + T::kBlockQ, p.seq_q) - 1, p.seq_q, p.seq_kv, p.causal);
  const int n_tiles = (kv_end + BC - 1) / BC;

  auto load_tile = [&](int tile, int stage) {
    float* sK = smem + stage * T::kStageFloats;
    float* sV = sK + BC * DP;
    const int k0 = tile * BC;
    for (int i = tid; i < BC * DP / 4; i += T::kThreads) {
      const int r = i / (DP / 4), d = (i % (DP / 4)) * 4;
      const bool in_kv = k0 + r < p.seq_kv;
      cp_async_16(sK + r * DP + d, in_kv && d < dqk ? K + static_cast<size_t>(k0 + r) * dqk + d : K, in_kv && d < dqk);
      cp_async_16(sV + r * DP + d, in_kv && d < dv ? V + static_cast<size_t>(k0 + r) * dv + d : V, in_kv && d < dv);
    }
    cp_async_commit();
  };

  if (n_tiles > 0) load_tile(0, 0);
  for (int t = 0; t < n_tiles; ++t) {
    if (t + 1 < n_tiles) {
      load_tile(t + 1, (t + 1) & 1);  // stream the next tile in while this one is computed
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const float* sK = smem + (t & 1) * T::kStageFloats;
    const float* sV = sK + BC * DP;
    const int k0 = t * BC;

    // Scores of this lane's four keys (one per 8-key chunk) for both rows.
    const int kk = ((g >> 3) & 1) * 4 + ((g >> 2) & 1) * 2 + ((g >> 1) & 1);  // key within a chunk
    float s[R][4];
#pragma unroll
    for (int ch = 0; ch < 4; ++ch) {
      float part[R][8];
#pragma unroll
      for (int k = 0; k < 8; ++k) {
#pragma unroll
        for (int i = 0; i < R; ++i) part[i][k] = 0.0f;
#pragma unroll
        for (int c = 0; c < NC; ++c) {
          const float4 kv = *reinterpret_cast<const float4*>(sK + (ch * 8 + k) * DP + 64 * c + 4 * g);
#pragma unroll
          for (int i = 0; i < R; ++i) part[i][k] = dot4(q[i][c], kv, part[i][k]);
        }
      }
#pragma unroll
      for (int i = 0; i < R; ++i) {
        // Reduce-scatter over the 16 lanes: at each step a lane keeps the half of its values that
        // its bit selects and adds the partner's copy of that half.
        float v4[4], v2[2];
        const bool b3 = g & 8, b2 = g & 4, b1 = g & 2;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float keep = b3 ? part[i][4 + j] : part[i][j], send = b3 ? part[i][j] : part[i][4 + j];
          v4[j] = keep + __shfl_xor_sync(0xffffffffu, send, 8);
        }
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const float keep = b2 ? v4[2 + j] : v4[j], send = b2 ? v4[j] : v4[2 + j];
          v2[j] = keep + __shfl_xor_sync(0xffffffffu, send, 4);
        }
        const float keep = b1 ? v2[1] : v2[0], send = b1 ? v2[0] : v2[1];
        float v1 = keep + __shfl_xor_sync(0xffffffffu, send, 2);
        v1 += __shfl_xor_sync(0xffffffffu, v1, 1);
        s[i][ch] = k0 + ch * 8 + kk < n_vis[i] ? v1 : -INFINITY;  // masked keys weigh exactly 0
      }
    }

    // Online softmax, per row (every lane of a group holds the same m; ℓ stays lane-partial).
#pragma unroll
    for (int i = 0; i < R; ++i) {
      float mt = fmaxf(fmaxf(s[i][0], s[i][1]), fmaxf(s[i][2], s[i][3]));
#pragma unroll
      for (int off = 8; off >= 1; off >>= 1) mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, off));
      const float m_new = fmaxf(m[i], mt);
      // A row that has seen only masked keys keeps m = -inf; (-inf) - (-inf) would be NaN, so the
      // shift uses 0 there (every p is exp2(-inf) = 0 regardless).
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;
      const float corr = exp2f(m[i] - m_use);
      float psum = 0.0f;
#pragma unroll
      for (int ch = 0; ch < 4; ++ch) {
        const float pv = exp2f(s[i][ch] - m_use);
        psum += pv;
        if (!(g & 1)) sP[r_local[i] * T::kPStride + ch * 8 + kk] = pv;  // lanes g, g^1 hold the same key
      }
      l[i] = l[i] * corr + psum;
      m[i] = m_new;
#pragma unroll
      for (int c = 0; c < NC; ++c) o[i][c] = make_float4(o[i][c].x * corr, o[i][c].y * corr, o[i][c].z * corr, o[i][c].w * corr);
    }
    __syncwarp();

    // O += P V: every lane reads its row's 32 weights (broadcast float4s) and its V slice.
#pragma unroll
    for (int j = 0; j < BC; j += 4) {
      float4 pw[R];
#pragma unroll
      for (int i = 0; i < R; ++i) pw[i] = *reinterpret_cast<const float4*>(sP + r_local[i] * T::kPStride + j);
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {
#pragma unroll
        for (int c = 0; c < NC; ++c) {
          const float4 vv = *reinterpret_cast<const float4*>(sV + (j + jj) * DP + 64 * c + 4 * g);
#pragma unroll
          for (int i = 0; i < R; ++i) {
            const float w = jj == 0 ? pw[i].x : jj == 1 ? pw[i].y : jj == 2 ? pw[i].z : pw[i].w;
            o[i][c] = fma4(w, vv, o[i][c]);
          }
        }
      }
    }
    __syncthreads();  // the stage just read is the one the next iteration's prefetch overwrites
  }

#pragma unroll
  for (int i = 0; i < R; ++i) {
    // ℓ: each key was counted by a lane pair; summing over lanes with the same low bit counts it once.
    float lt = l[i];
    lt += __shfl_xor_sync(0xffffffffu, lt, 8);
    lt += __shfl_xor_sync(0xffffffffu, lt, 4);
    lt += __shfl_xor_sync(0xffffffffu, lt, 2);
    if (row[i] >= p.seq_q) continue;
    const float inv = lt > 0.0f ? 1.0f / lt : 0.0f;  // no visible key: O = 0, never 0/0
    float* O = static_cast<float*>(p.o) + ((static_cast<size_t>(b) * p.heads_q + h) * p.seq_q + row[i]) * dv;
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      const int d = 64 * c + 4 * g;
      if (d < dv) *reinterpret_cast<float4*>(O + d) = make_float4(o[i][c].x * inv, o[i][c].y * inv, o[i][c].z * inv, o[i][c].w * inv);
    }
    if (p.lse && g == 0)
      p.lse[(static_cast<size_t>(b) * p.heads_q + h) * p.seq_q + row[i]] =
          lt == 0.0f ? -INFINITY : (m[i] + log2f(lt)) * 0.6931471805599453f;  // natural log; NaN stays NaN
  }
}

template <int DP>
void launch_warp_f32x4(const FwdParams& prm, void* stream) {
  using T = WarpF32x4Traits<DP>;
  launch_fwd(warp_f32x4_kernel<DP>, "warp_f32x4_kernel", T::kBlockQ, T::kThreads, T::kSmemBytes, prm, stream);
}

void launch_warp_f32x4(const FwdParams& p, void* stream) {
  void* s = stream;
  if (p.head_dim_qk <= 64)
    launch_warp_f32x4<64>(p, s);
  else if (p.head_dim_qk <= 128)
    launch_warp_f32x4<128>(p, s);
  else
    launch_warp_f32x4<256>(p, s);
}

}  // namespace kernels
}  // namespace flashcheck
