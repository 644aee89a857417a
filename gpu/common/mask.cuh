// The kernels' mask. Written apart from reference/mask.h on purpose: if a kernel and the oracle
// shared this code, a bug here would pass every check.
#pragma once

namespace flashcheck::kernels {

// Keys [0, n) are visible to query `row`; n may be 0 (bottom_right with seq_q > seq_kv).
__device__ __forceinline__ int kv_visible(int row, int seq_q, int seq_kv, int causal) {
  if (causal == 0) return seq_kv;
  long long last = causal == 1 ? row : static_cast<long long>(row) + seq_kv - seq_q;  // last visible key
  if (last < 0) return 0;
  return last + 1 < seq_kv ? static_cast<int>(last + 1) : seq_kv;
}

}  // namespace flashcheck::kernels
