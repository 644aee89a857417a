// Launchers of the GPU oracle's kernels (defined in f64_kernels.cu and baseline_kernels.cu) and the
// geometry of one piece of work they share with host.cpp.
//
// Layout contract (host.cpp packs, kernels rely on it, so no kernel load needs a bounds check):
//   q  [nbh][nr_pad][dqk_pad]      the piece's query rows, rows ≥ nr and dims ≥ dqk are zero
//   k  [nkv][skv_pad][dqk_pad]     keys ≥ seq_kv and dims ≥ dqk are zero
//   v  [nkv][skv_pad][dv_pad]      keys ≥ seq_kv and columns ≥ dv are zero
//   rows [nr_pad]                  global query row of each piece row; rows ≥ nr repeat the last
// nr_pad and skv_pad are multiples of 128, dqk_pad of 16. Every index is 64-bit.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace flashcheck::gpu_oracle {

enum class Elem { f32, f16, bf16 };  // element type of the packed q, k, v
enum class Round { f32, f16, bf16 };  // the baseline's dtype rounding (identity for f32)

struct Geom {
  int64_t nbh = 0;      // (batch, head) pairs in the piece
  int64_t bh0 = 0;      // global index of the first
  int64_t bkv0 = 0;     // global (batch, kv head) index of k/v's first head
  int64_t heads_q = 0, heads_kv = 0;
  int64_t nr = 0, nr_pad = 0;  // query rows of the piece
  int64_t seq_q = 0, seq_kv = 0, skv_pad = 0;
  int64_t dqk = 0, dqk_pad = 0, dv = 0, dv_pad = 0;
  int causal = 0;  // 0 none, 1 top_left, 2 bottom_right
  double scale = 1;
};

// fp64 oracle, two launches:
//  scores: S = (q kᵀ)·scale into s [nbh][nr_pad][skv_pad] (64×64 tiles that some row sees), and the
//          NaN-sticky max of each row's visible scores per 64-key tile into pmax [nbh][nr_pad][skv_pad/64].
//  pv:     m = max over the row's tiles, O = Σ exp(s − m)·v / Σ exp(s − m), LSE = m + log ℓ into
//          o [nbh][nr][dv], lse [nbh][nr] (the conventions of naive_attention for empty and NaN rows).
// dv_pad is 32·2^k up to 256, or a multiple of 256.
void launch_f64_scores(Elem e, const void* q, const void* k, const int64_t* rows, double* s, double* pmax,
                       const Geom& g, cudaStream_t st);
void launch_f64_pv(Elem e, const double* s, const double* pmax, const void* v, const int64_t* rows, double* o,
                   double* lse, const Geom& g, cudaStream_t st);

// Same-dtype baseline, three launches mirroring verify/baseline.cpp operation by operation:
//  scores: s = rd(rd(Σ_d q·k, in order, unfused)·scale) as fp32 into s [nbh][nr_pad][skv_pad], the
//          per-128-key-tile max (std::max's NaN-ignoring rule) into pmax [nbh][nr_pad][skv_pad/128].
//  stats:  per row m, and ℓ = Σ_j exp(s_j − m) summed in key order, into m, l [nbh][nr_pad].
//  pv:     o = rd(Σ_j rd(exp(s_j − m)/ℓ)·v_j, in key order, unfused) into o [nbh][nr][dv].
// dv_pad is 32, 64 or a multiple of 128.
void launch_baseline_scores(Elem e, Round r, const void* q, const void* k, const int64_t* rows, float* s,
                            float* pmax, const Geom& g, cudaStream_t st);
void launch_baseline_stats(const float* s, const float* pmax, const int64_t* rows, float* m, float* l,
                           const Geom& g, cudaStream_t st);
void launch_baseline_pv(Elem e, Round r, const float* s, const float* m, const float* l, const void* v,
                        const int64_t* rows, float* o, const Geom& g, cudaStream_t st);

// Kernel images for this device exist (false: e.g. a GPU older than sm_80).
bool kernels_loadable(cudaError_t* why);

}  // namespace flashcheck::gpu_oracle
