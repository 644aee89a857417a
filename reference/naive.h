// Oracle 1: softmax(Q Kᵀ · scale) V computed in fp64, step by step, as the definition reads.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "reference/inputs.h"
#include "reference/problem.h"

namespace flashcheck {

struct OracleResult {
  // Query rows evaluated (ascending, the same for every (batch, head)); empty means all seq_q rows.
  std::vector<int64_t> rows;
  int64_t num_rows = 0;     // rows.size(), or seq_q when rows is empty
  std::vector<double> o;    // [B, Hq, num_rows, Dv]
  std::vector<double> lse;  // [B, Hq, num_rows], natural log

  int64_t row_at(int64_t r) const { return rows.empty() ? r : rows[static_cast<size_t>(r)]; }
};

// Exact up to fp64 rounding: S = Q Kᵀ and O = P V are BLAS fp64 GEMMs over inputs widened from
// their dtype, the softmax is max-shifted in fp64. Conventions, stated once:
//  - a row that sees no key gets O = 0 and LSE = -inf;
//  - a NaN anywhere in a row's visible scores or values propagates to that row (IEEE semantics);
//    the oracle never hides a NaN.
// Memory is O(row_block × seq_kv) per thread plus the widened K/V of one head: seq 131072 at
// D=128 stays well under 1 GiB. `rows` (optional, each in [0, seq_q)) restricts evaluation to those
// query rows of every (batch, head): this is how huge shapes are checked by sampling.
OracleResult naive_attention(const Problem& p, const Inputs& in, std::span<const int64_t> rows = {});

}  // namespace flashcheck
