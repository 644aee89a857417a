// The criteria's pieces that the verdict (criteria.cpp) and the error maps (error_maps.cpp) share:
// where a flat row lies, how an LSE and an unresolved row's element are classified, the LSE limit.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "reference/mask.h"
#include "verify/criteria.h"
#include "verify/element_pass.h"
#include "verify/metrics.h"

namespace flashcheck::criteria_detail {

// How an output element stands before any error is measured: element_pass.h's classify_output, the
// one the device pass uses. The criteria and the error maps both classify through it, so the page
// shows exactly what the verdict counted.
inline MapFlag classify_o(DType dt, float k, double o, bool empty_row) { return classify_output(dt, k, o, empty_row); }

inline MapFlag classify_lse(float k, double o, bool empty_row, EmptyRowLse empty_lse) {
  if (is_poison(DType::f32, k)) return MapFlag::unwritten;
  if (empty_row) return k == (empty_lse == EmptyRowLse::neg_inf ? -INFINITY : INFINITY) ? MapFlag::empty_row_ok
                                                                                        : MapFlag::empty_row_nonzero;
  return nonfinite_status_matches(k, o) ? (std::isfinite(k) ? MapFlag::ok : MapFlag::nonfinite_match) : MapFlag::nan_mismatch;
}

// A row's LSE tolerance: it carries the scores' absolute rounding, so it grows with the row's
// largest |score| (score_bound), not only with |LSE|; for fp8 inputs also with the tensor cores'
// accumulation error of the scores (Expected::score_error).
inline double lse_limit(const Tolerance& tol, double lse, double score_bound, double score_error) {
  return tol.lse_atol + tol.lse_rtol * (std::fabs(lse) + score_bound) + score_error * score_bound;
}

inline bool is_flagged(MapFlag f) {
  return f == MapFlag::unwritten || f == MapFlag::nan_mismatch || f == MapFlag::empty_row_nonzero ||
         f == MapFlag::outside_contenders;
}

// Where flat row g of a result over a RowSet lies (reference/rows.h: [b][h][r], sequence b's block
// starting at first(b)·Hq): its sequence, query head and query row, and what that row sees. Dense
// problems have every sequence alike; varlen batches and seqused_k give each its own rows and keys,
// so whether a row is empty, and which KV tile holds its last key, is asked of its own sequence.
class FlatRows {
 public:
  FlatRows(const Problem& p, const RowSet& rows) : p_(p), rows_(rows) {
    start_.reserve(static_cast<size_t>(rows.batch()) + 1);
    for (int64_t b = 0; b <= rows.batch(); ++b) start_.push_back(b < rows.batch() ? rows.first(b) * p.heads_q : rows.total() * p.heads_q);
  }
  int64_t total() const { return start_.back(); }
  struct Place {
    int64_t b, h, ri, row;
    KeyRange keys;
  };
  Place at(int64_t g) const {
    // The last sequence starting at or before g: sequences without rows share their start with
    // the next, which holds g.
    const auto it = std::upper_bound(start_.begin(), start_.end() - 1, g);
    const int64_t b = static_cast<int64_t>(it - start_.begin()) - 1;
    const int64_t local = g - start_[static_cast<size_t>(b)], n = rows_.count(b);
    Place pl{b, local / n, local % n, rows_.row(b, local % n), {}};
    pl.keys = visible_range(p_, b, pl.row);
    return pl;
  }

 private:
  const Problem& p_;
  const RowSet& rows_;
  std::vector<int64_t> start_;
};

// Each checked row's entry in Expected::unresolved, or null: built once, asked per row.
class UnresolvedLookup {
 public:
  UnresolvedLookup(const Expected& ref, int64_t all_rows) : ref_(ref) {
    if (ref.unresolved.empty()) return;
    at_.assign(static_cast<size_t>(all_rows), -1);
    for (size_t u = 0; u < ref.unresolved.size(); ++u) at_[static_cast<size_t>(ref.unresolved[u].index)] = static_cast<int32_t>(u);
  }
  const Expected::UnresolvedRow* operator()(int64_t row) const {
    if (at_.empty() || at_[static_cast<size_t>(row)] < 0) return nullptr;
    return &ref_.unresolved[static_cast<size_t>(at_[static_cast<size_t>(row)])];
  }

 private:
  const Expected& ref_;
  std::vector<int32_t> at_;
};

// An element of a row fp32 cannot resolve: any softmax weights over its contenders give a value in
// [lo, hi]; the slack covers the output's rounding and P rounded to 16 bits before P·V (Σ of the
// rounded weights is 1 only to 2^-8 in bf16). P rounded to fp8 (fp8 inputs) moves Σ of the weights
// by up to 2^-4 (e4m3) or 2^-3 (e5m2): twice that, relative, is added.
inline MapFlag classify_unresolved(const Problem& p, float k, const Expected::UnresolvedRow& u, int64_t c) {
  const double lo = u.lo[static_cast<size_t>(c)], hi = u.hi[static_cast<size_t>(c)];
  const double mag = std::max(std::fabs(lo), std::fabs(hi));
  const double p_rounding = p.dtype == DType::e4m3 ? 0x1p-3 : p.dtype == DType::e5m2 ? 0x1p-2 : 0.0;
  const double slack = 4 * ulp_at(p.o_dtype(), mag) + p_rounding * mag;
  return k >= lo - slack && k <= hi + slack ? MapFlag::unresolved_ok : MapFlag::outside_contenders;
}


// The element-by-element maps behind the HTML page (error_maps.cpp).
ErrorMaps error_maps(const Problem& p, const Expected& ref, std::span<const float> kernel_o,
                     const std::optional<std::vector<float>>& kernel_lse, const CheckOptions& opt, const Report& r,
                     double unit);

}  // namespace flashcheck::criteria_detail
