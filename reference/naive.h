// Oracle 1: softmax(Q Kᵀ · scale) V computed in fp64, step by step, as the definition reads.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "reference/big_vector.h"
#include "reference/inputs.h"
#include "reference/problem.h"
#include "reference/rows.h"

namespace flashcheck {

struct OracleResult {
  RowSet rows;              // the query rows evaluated, per sequence (reference/rows.h)
  UninitVector<double> o;   // [rows.index(b, h, r, Hq)][Dv] (sized without a zero pass: big_vector.h)
  std::vector<double> lse;  // [rows.index(b, h, r, Hq)], natural log

  // Problem model 1's view, for dense problems evaluated on the same rows in every sequence:
  // results are [B, Hq, num_rows()], row r of every (b, h) being row_at(r).
  int64_t num_rows() const { return rows.batch() ? rows.count(0) : 0; }
  int64_t row_at(int64_t r) const { return rows.row(0, r); }
};

// Exact up to fp64 rounding: S = Q Kᵀ and O = P V are BLAS fp64 GEMMs over inputs widened from
// their dtype (and multiplied by their fp8 descale, exactly), every variant applied in fp64 in the
// order reference/problem.h states: scale, softcap, mask, ALiBi bias, softmax with the sink
// logit in the denominator. Conventions, stated once:
//  - a row that sees no key gets O = 0 and LSE = -inf (with or without a sink);
//  - a NaN anywhere in a row's visible scores or values propagates to that row (IEEE semantics);
//    the oracle never hides a NaN. Keys a row does not see never reach it, whatever they hold.
// Cost follows the visible work: each block of rows computes only the keys its rows see (a window
// costs O(Sq·window)), the masked corners of its strip cut down to a few percent of the pairs by
// smaller GEMMs (reference/strip_plan.h), each sequence of a varlen batch its own lengths. Memory is
// O(row_block × seq_kv) per thread plus the widened K/V of a few heads: seq 131072 at D=128 stays
// well under 1 GiB. `rows` restricts evaluation to those query rows (sampling for huge shapes).
OracleResult naive_attention(const Problem& p, const Inputs& in, const RowSet& rows);
// Every row, or the same rows (ascending, unique) in every sequence (empty: every row).
OracleResult naive_attention(const Problem& p, const Inputs& in, std::span<const int64_t> rows = {});
// With the given strip planning (reference/strip_plan.h) instead of StripSplit::oracle_default():
// StripSplit::none() is one GEMM over each block's whole strip, for tests and benchmarks that
// compare the two.
struct StripSplit;
OracleResult naive_attention(const Problem& p, const Inputs& in, const RowSet& rows, const StripSplit& split);

}  // namespace flashcheck
