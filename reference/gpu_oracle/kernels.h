// Launchers of the GPU oracle's kernels (defined in f64_kernels.cu and baseline_kernels.cu) and the
// description of one piece of work they share with host.cpp.
//
// A piece is a list of row tiles. A tile holds kTileRows packed query rows of one sequence and one
// KV head (the rows of several query heads of a GQA group may share a tile), and the span of keys
// its rows see: [key0, key0 + ncols), key0 and ncols multiples of the key tile. Scores are
// materialised per tile, [kTileRows][ncols] at s_off, so memory and work follow the visible keys
// (a window costs O(rows × window), a varlen batch the sum of its sequences).
//
// Layout contract (host.cpp packs, kernels rely on it, so no kernel load needs a bounds check):
//   q     [ntiles·TM][dqk_pad]   the tiles' query rows; padding rows and dims ≥ dqk are zero
//   k, v  [kv rows][dqk_pad | dv_pad]  per (sequence, KV head) of the piece, the keys its tiles
//         span; tile key k lives at packed row kv_row + (k − key0); keys past the sequence's used
//         keys and columns past dqk / dv are zero
//   rows  [ntiles·TM]            one Row per packed query row (padding rows see no key, out = −1)
//   tiles [ntiles], block0 [ntiles + 1]: the scores kernel's first block of each tile
// TM (rows per tile) and the key tile are 64 for the fp64 oracle, 128 for the baseline. Every index
// is 64-bit.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace flashcheck::gpu_oracle {

enum class Elem { f32, f16, bf16 };   // element type of the packed q, k, v (fp8 inputs travel as f16: exact)
enum class Round { f32, f16, bf16 };  // the baseline's dtype rounding (identity for f32)

inline constexpr int kOracleTile = 64;     // fp64 oracle: rows per tile and keys per key tile
inline constexpr int kBaselineTile = 128;  // baseline: rows per tile and keys per key tile

struct Row {
  int64_t i = 0;         // query row within its sequence
  int64_t lo = 0, hi = 0;  // its visible keys [lo, hi) (reference/mask.h); lo == hi: none
  int64_t out = -1;      // result row, relative to the piece's first; −1: padding
  int32_t h = 0;         // query head
  int32_t unused = 0;
};

struct Tile {
  int64_t s_off = 0;   // first score of the tile in s; the tile's pmax starts at s_off / key tile
  int64_t kv_row = 0;  // packed K/V row of key `key0`
  int64_t key0 = 0, ncols = 0;  // key span; ncols 0: no row of the tile sees a key
  int64_t b = 0;       // sequence (per-batch ALiBi slopes)
  int64_t d = 0;       // the sequence's alignment offset (reference/mask.h): ALiBi's i + d − j
  // fp8 descale factors of the tile's (sequence, KV head); 1 for other dtypes.
  float q_descale = 1, k_descale = 1, v_descale = 1;
  float qk_descale = 1;  // fp32 q_descale · k_descale (the baseline's product)
};

// What a call computes, the same for every piece.
struct Params {
  int64_t heads_q = 1;
  int64_t dqk = 0, dqk_pad = 0, dv = 0, dv_pad = 0;
  double scale = 1;
  double softcap = 0;             // > 0: s → c·tanh(s/c)
  int alibi = 0;                  // 0 none, 1 symmetric −slope·|i + d − j|, 2 signed slope·(j − i)
  int alibi_per_batch = 0;        // slopes [B, Hq] instead of [Hq]
  const float* slopes = nullptr;  // device
  const float* sinks = nullptr;   // device [Hq]; nullptr: no sinks
  int fp8 = 0;                    // inputs are fp8: dequantise with the tiles' descales
};

struct Geom {
  Params p;
  const Tile* tiles = nullptr;
  const Row* rows = nullptr;
  const int64_t* block0 = nullptr;
  int64_t ntiles = 0;
  int64_t score_blocks = 0;  // block0[ntiles]
  int64_t nout = 0;          // result rows of the piece
};

// fp64 oracle, two launches:
//  scores: S = (q kᵀ)·scale with the score modifiers (softcap, ALiBi) applied to visible keys, per
//          tile into s, and the NaN-sticky max of each row's visible scores per 64-key tile into
//          pmax; key tiles no row of the tile sees are skipped.
//  pv:     m = max(row max, sink), O = Σ exp(s − m)·v / ℓ with ℓ = Σ exp(s − m) + exp(sink − m),
//          LSE = m + log ℓ into o [nout][dv], lse [nout] (naive_attention's conventions for empty
//          and NaN rows).
// dv_pad is 32·2^k up to 256, or a multiple of 256.
// z (optional, the backward with a softcap): each score after the scale, before the modifiers.
void launch_f64_scores(Elem e, const void* q, const void* k, double* s, double* pmax, const Geom& g, cudaStream_t st,
                       double* z = nullptr);
void launch_f64_pv(Elem e, const double* s, const double* pmax, const void* v, double* o, double* lse, const Geom& g,
                   cudaStream_t st);

// The fp64 backward (host_backward.cpp), over the same tiles (kOracleTile) with every row of the
// problem. A region is the K/V rows of one (sequence, KV head) in a piece: tiles [t0, t1) of the
// piece, whose spans lie in its keys [key0, key0 + nkeys) at packed rows kv_row ..; its key tiles
// are blocks block0 .. of the key-side launches (× column blocks).
struct Region {
  int64_t t0 = 0, t1 = 0;
  int64_t kv_row = 0, key0 = 0, nkeys = 0;  // nkeys a multiple of the key tile
  int64_t block0 = 0;
};
// Six launches per piece:
//  scores: launch_f64_scores with z when there is a softcap.
//  dp:     dP = dO·Vᵀ per tile, dO as fp32 rows [ntiles·TM][dv_pad] (kPlain scores).
//  ds:     per row, from s, pmax (and z): P = exp(t − m)/ℓ written over s, D = Σ P·dP, dS = P (dP − D)
//          (× the cap's derivative) written over dp; both exactly 0 outside the row's visible keys
//          (padding rows: the whole span); sinkpart [nout] = −P_sink·D (0 without a sink).
//  dq:     dQ = scale · dS·K into dq [nout][g.p.dv] (the caller's Geom has Dqk as dv, dv_pad).
//  keys:   per key tile of a region, over the rows of every tile that spans it: dV = Pᵀ·dO and
//          dK = scale · dSᵀ·Q into [kv rows][d_out] (d_out Dv or Dqk, ld the padded width of b).
// Where a stage of the right-hand operand (K, dO, Q) holds Inf or NaN, the products are taken one by
// one over visible pairs only, as the forward's P·V does: a masked pair adds nothing, even 0·Inf.
void launch_f64_dp(Elem e, const float* d_out, const void* v, double* dp, const Geom& g, cudaStream_t st);
void launch_f64_ds(double* s, double* dp, const double* pmax, const double* z, double* sinkpart, const Geom& g,
                   cudaStream_t st);
void launch_f64_dq(Elem e, const double* ds, const void* k, double* dq, const Geom& g, cudaStream_t st);
// b: Q (Elem e, ld dqk_pad, times q_descale) for dK, or dO (fp32, ld dv_pad) for dV.
void launch_f64_keys(Elem e, bool b_is_q, const double* x, const void* b, double* out, const Region* regions,
                     int64_t nregions, int64_t key_blocks, double mul, const Geom& g, cudaStream_t st);

// Same-dtype baseline, three launches:
//  scores: s = baseline_score(Σ_d q·k in order, unfused) as fp32 (kernels' baseline_score: the
//          dtype roundings, scale, softcap, ALiBi), per-128-key-tile max of visible scores
//          (std::max's NaN-ignoring rule) into pmax.
//  stats:  per row m = max(row max, sink), ℓ = Σ_j exp(s_j − m) in key order + exp(sink − m).
//  pv:     o = rd(Σ_j rd(exp(s_j − m)/ℓ)·v_j, in key order, unfused) into o [nout][dv].
// dv_pad is 32, 64 or a multiple of 128.
void launch_baseline_scores(Elem e, Round r, const void* q, const void* k, float* s, float* pmax, const Geom& g,
                            cudaStream_t st);
void launch_baseline_stats(const float* s, const float* pmax, float* m, float* l, const Geom& g, cudaStream_t st);
void launch_baseline_pv(Elem e, Round r, const float* s, const float* m, const float* l, const void* v, float* o,
                        const Geom& g, cudaStream_t st);

// DeviceInputs' kernels (input_kernels.cu), over 16-bit patterns of Elem f16 or bf16:
//  gather:    dst [n][width_pad] with row r = source row src_row[r] of src [..][width], each element
//             narrow(widen(x)) (a signalling NaN quieted, as the host's packing does), columns
//             past width zero; src_row[r] < 0: a zero row. The piece's q, k, v of kernels.h's layout.
//  nonfinite: *first = min(*first, index of every NaN or ±Inf among x[0, n)).
//  norms:     out[r] = sqrt(Σ_c widen(x[r][c])²) in fp64, column order.
void launch_gather_rows(Elem e, const uint16_t* src, int64_t width, const int64_t* src_row, int64_t n,
                        int64_t width_pad, uint16_t* dst, cudaStream_t st);
void launch_first_nonfinite(Elem e, const uint16_t* x, int64_t n, unsigned long long* first, cudaStream_t st);
void launch_row_norms(Elem e, const uint16_t* x, int64_t rows, int64_t width, double* out, cudaStream_t st);

// Kernel images for this device exist (false: e.g. a GPU older than sm_80).
bool kernels_loadable(cudaError_t* why);

}  // namespace flashcheck::gpu_oracle
