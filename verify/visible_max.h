// The largest value over each query row's visible keys, rows taken in order: every mask makes a
// row's visible keys one interval [lo, hi) whose ends never decrease with the row
// (reference/mask.h), so a monotone deque answers each row in amortised O(1) — O(rows + keys) per
// head instead of O(rows × keys). make_backward_expected's noise scales take the largest key and
// value norms a row sees: the direct loops were 22 s of a (4,16,8192,128) check on the device host.
#pragma once
#include <cmath>
#include <cstdint>
#include <deque>
#include <span>

#include "reference/mask.h"

namespace flashcheck {

class VisibleMax {
 public:
  explicit VisibleMax(std::span<const double> x) : x_(x) {}
  // max(0, x[j] for j in r, NaN ignored) — std::max's rule, as `m = std::max(m, x[j])` from 0.
  // Successive calls must not decrease r.lo or r.hi (an empty range may sit anywhere in between).
  double operator()(KeyRange r) {
    for (; next_ < r.hi; ++next_) {
      const double v = x_[static_cast<size_t>(next_)];
      if (std::isnan(v)) continue;
      while (!q_.empty() && x_[static_cast<size_t>(q_.back())] <= v) q_.pop_back();
      q_.push_back(next_);
    }
    while (!q_.empty() && q_.front() < r.lo) q_.pop_front();
    if (r.empty() || q_.empty()) return 0.0;
    return std::max(0.0, x_[static_cast<size_t>(q_.front())]);
  }

 private:
  std::span<const double> x_;
  std::deque<int64_t> q_;  // indices of a decreasing run of values, the window's max first
  int64_t next_ = 0;       // first index not yet pushed
};

}  // namespace flashcheck
