// The variant kernels' masks as types (mma_f16's and wgmma_f16's). Each answers three questions for one q-tile of one sequence:
//   trip<BN>(q0, q_last)  which KV tiles the q-tile visits (its trip count): whole tiles outside are
//                         never loaded nor computed (left of a window as right of the diagonal),
//                         and the keys every row of the q-tile sees whole;
//   edge<BN>(k0, ...)     whether a visited tile needs masking at all (only edge tiles do);
//   row(r), hidden(row, key)  a row's visible keys, and whether `key` is outside them.
// The mainloop takes the mask as a template parameter: a plain problem compiles exactly the
// prefix mask it always had, a window problem the window mask, with no run-time switch between them.
//
// Written apart from reference/mask.h on purpose: if a kernel and the oracle shared this code, a
// bug here would pass every check.
#pragma once
#include <type_traits>

#include "gpu/common/mask.cuh"
#include "gpu/common/var_params.h"

namespace flashcheck::kernels {

struct TileRange {
  int begin, count;    // KV tiles [begin, begin + count), count >= 0
  int all_lo, all_hi;  // keys every row of the q-tile sees: a tile inside [all_lo, all_hi) needs no mask
};

// No mask or a causal mode (problem model 1): row r sees the prefix [0, n) of the sequence's keys.
struct PrefixMask {
  struct Row {
    int n;
  };
  int sq, skv, causal;  // the sequence's queries, keys used, causal mode (0 none, 1 top_left, 2 bottom_right)

  __device__ __forceinline__ PrefixMask(int sq_, int skv_, int causal_) : sq(sq_), skv(skv_), causal(causal_) {}

  // Every row sees at least the keys of the q-tile's first row.
  template <int BN>
  __device__ __forceinline__ TileRange trip(int q0, int q_last) const {
    const int kv_end = kv_visible(q_last, sq, skv, causal);  // tiles past this never load
    const int first_row_keys = kv_visible(q0, sq, skv, causal);
    return {0, (kv_end + BN - 1) / BN, 0, first_row_keys};
  }
  // The sequence's tail tile, and tiles crossing the causal diagonal.
  template <int BN>
  __device__ __forceinline__ static bool edge(int k0, int skv, int /*all_lo*/, int all_hi) {
    return k0 + BN > skv || k0 + BN > all_hi;
  }
  __device__ __forceinline__ Row row(int r) const { return {r < sq ? kv_visible(r, sq, skv, causal) : 0}; }
  __device__ __forceinline__ static bool hidden(Row r, int key) { return key >= r.n; }
};

// A sliding window (left, right), inclusive, any causal mode: row r sees keys
//   [r + d − left, r + d + right] ∩ [0, skv),  d = 0 (top_left) or skv − sq (otherwise),
// −1 unbounded on its side; under a causal mode the host has already capped right at 0. Both
// bounds are non-decreasing in r, so a q-tile's keys are [lo(q0), hi(q_last)) and the keys every
// row of it sees whole are [lo(q_last), hi(q0)).
struct WindowMask {
  struct Row {
    int lo, n;  // keys [lo, lo + n)
  };
  int sq, skv, d, left, right;

  __device__ __forceinline__ WindowMask(int sq_, int skv_, int causal, int left_, int right_)
      : sq(sq_), skv(skv_), d(causal == 1 ? 0 : skv_ - sq_), left(left_), right(right_) {}

  // In 64 bits: a position plus a bound may pass 2^31 before the clamp to [0, skv].
  __device__ __forceinline__ int lo(int r) const {
    if (left < 0) return 0;
    const long long x = static_cast<long long>(r) + d - left;
    return x < 0 ? 0 : x > skv ? skv : static_cast<int>(x);
  }
  __device__ __forceinline__ int hi(int r) const {
    if (right < 0) return skv;
    const long long x = static_cast<long long>(r) + d + right + 1;
    return x < 0 ? 0 : x > skv ? skv : static_cast<int>(x);
  }

  template <int BN>
  __device__ __forceinline__ TileRange trip(int q0, int q_last) const {
    const int first = lo(q0), last = hi(q_last);
    // No row of the q-tile sees a key (the window lies past the sequence's keys, or before them):
    // nothing is loaded, and the epilogue writes O = 0, LSE = −inf.
    if (last <= first) return {0, 0, 0, 0};
    const int begin = first / BN;
    return {begin, (last + BN - 1) / BN - begin, lo(q_last), hi(q0)};
  }
  // A tile that some row's window starts after, or ends before (the tail tile included: hi ≤ skv).
  template <int BN>
  __device__ __forceinline__ static bool edge(int k0, int /*skv*/, int all_lo, int all_hi) {
    return k0 < all_lo || k0 + BN > all_hi;
  }
  __device__ __forceinline__ Row row(int r) const {
    if (r >= sq) return {0, 0};
    const int l = lo(r), h = hi(r);
    return {l, h > l ? h - l : 0};
  }
  // key ∉ [lo, lo + n) in one unsigned compare: key − lo wraps to a huge value below lo.
  __device__ __forceinline__ static bool hidden(Row r, int key) {
    return static_cast<unsigned>(key - r.lo) >= static_cast<unsigned>(r.n);
  }
};

// What a kernel's policy types are built from: the plain FwdParams or a variant's VarParams.
__device__ __forceinline__ const FwdParams& fwd_of(const FwdParams& p) { return p; }
__device__ __forceinline__ const FwdParams& fwd_of(const VarParams& p) { return p.base; }

// Mask type `M` for a sequence of sq queries and skv keys used (a window only exists in VarParams).
template <class M, class Params>
__device__ __forceinline__ M make_mask(const Params& p, int sq, int skv) {
  if constexpr (std::is_same_v<M, WindowMask>)
    return WindowMask(sq, skv, fwd_of(p).causal, p.window_left, p.window_right);
  else
    return PrefixMask(sq, skv, fwd_of(p).causal);
}

}  // namespace flashcheck::kernels
