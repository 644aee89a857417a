// Range maxima in O(1) per query after an O(n log n) build (a sparse table): a row's visible keys
// are an interval, which need not start at key 0 once a window bounds it on the left, and the
// expected-value builders (verify/expected.cpp, verify/backward_expected.cpp) ask for the largest
// key norm over every row's interval — O(rows × keys) when scanned, minutes at production sizes.
#pragma once
#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace flashcheck {

class RangeMax {
 public:
  explicit RangeMax(std::vector<double> x) {
    levels_.push_back(std::move(x));
    const size_t n = levels_[0].size();
    for (size_t w = 1; 2 * w <= n; w *= 2) {
      const std::vector<double>& prev = levels_.back();
      std::vector<double> next(n - 2 * w + 1);
      for (size_t i = 0; i < next.size(); ++i) next[i] = std::max(prev[i], prev[i + w]);
      levels_.push_back(std::move(next));
    }
  }
  double operator()(int64_t lo, int64_t hi) const {  // max over [lo, hi), hi > lo
    const size_t n = static_cast<size_t>(hi - lo);
    const int k = std::bit_width(n) - 1;
    const size_t w = size_t{1} << k;
    return std::max(levels_[static_cast<size_t>(k)][static_cast<size_t>(lo)], levels_[static_cast<size_t>(k)][static_cast<size_t>(hi) - w]);
  }

 private:
  std::vector<std::vector<double>> levels_;
};

}  // namespace flashcheck
