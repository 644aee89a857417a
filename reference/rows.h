// The query rows an oracle evaluates and a criterion judges, per sequence. Results over a RowSet
// are laid out [b][h][r][...]: entry (b, h, r) at first(b)·Hq + h·count(b) + r. With every row of
// every sequence that is the logical layout itself (reference/sequences.h: BHSD for dense
// problems); with the same rows in every sequence of a dense problem it is [B, Hq, rows].
#pragma once
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "reference/problem.h"

namespace flashcheck {

class RowSet {
 public:
  RowSet() = default;
  // Every row of every sequence.
  static RowSet all(const Problem& p) {
    RowSet s;
    s.all_ = true;
    s.begin_.assign(1, 0);
    for (int64_t b = 0; b < p.batch; ++b) {
      const int64_t n = p.sq(b);
      for (int64_t i = 0; i < n; ++i) s.rows_.push_back(i);
      s.begin_.push_back(s.begin_.back() + n);
    }
    return s;
  }
  // The given rows (ascending, unique) in every sequence, each kept where it lies below the
  // sequence's length; an empty list means every row.
  static RowSet same(const Problem& p, std::span<const int64_t> rows) {
    if (rows.empty()) return all(p);
    RowSet s;
    s.begin_.assign(1, 0);
    for (int64_t b = 0; b < p.batch; ++b) {
      const int64_t n = p.sq(b);
      for (int64_t r : rows)
        if (r < n) s.rows_.push_back(r);
      s.begin_.push_back(static_cast<int64_t>(s.rows_.size()));
    }
    s.check(p);
    s.all_ = s.rows_.size() == static_cast<size_t>(p.total_q());
    return s;
  }
  // Rows per sequence, each list ascending and unique within [0, sq(b)).
  static RowSet per_sequence(const Problem& p, const std::vector<std::vector<int64_t>>& rows) {
    if (static_cast<int64_t>(rows.size()) != p.batch) throw std::invalid_argument("RowSet: one row list per sequence");
    RowSet s;
    s.begin_.assign(1, 0);
    for (const auto& r : rows) {
      s.rows_.insert(s.rows_.end(), r.begin(), r.end());
      s.begin_.push_back(static_cast<int64_t>(s.rows_.size()));
    }
    s.check(p);
    s.all_ = s.rows_.size() == static_cast<size_t>(p.total_q());
    return s;
  }

  int64_t batch() const { return static_cast<int64_t>(begin_.size()) - 1; }
  int64_t count(int64_t b) const { return begin_[static_cast<size_t>(b) + 1] - begin_[static_cast<size_t>(b)]; }
  int64_t first(int64_t b) const { return begin_[static_cast<size_t>(b)]; }
  int64_t total() const { return begin_.empty() ? 0 : begin_.back(); }  // rows over all sequences (per head)
  // The query row of sequence b's r-th evaluated row.
  int64_t row(int64_t b, int64_t r) const { return rows_[static_cast<size_t>(first(b) + r)]; }
  // Where (b, h, r) lies in a result over this set.
  int64_t index(int64_t b, int64_t h, int64_t r, int64_t heads) const { return first(b) * heads + h * count(b) + r; }
  std::span<const int64_t> rows_of(int64_t b) const {
    return {rows_.data() + first(b), static_cast<size_t>(count(b))};
  }
  // Every row of every sequence: results then share the logical layout of the outputs.
  bool is_all() const { return all_; }
  bool operator==(const RowSet&) const = default;

 private:
  void check(const Problem& p) const {
    for (int64_t b = 0; b < p.batch; ++b) {
      const auto r = rows_of(b);
      for (size_t i = 0; i < r.size(); ++i) {
        if (r[i] < 0 || r[i] >= p.sq(b))
          throw std::out_of_range("row " + std::to_string(r[i]) + " of sequence " + std::to_string(b) + " is outside [0, " +
                                  std::to_string(p.sq(b)) + ")");
        if (i && r[i] <= r[i - 1])
          throw std::invalid_argument("rows must be ascending and unique (row " + std::to_string(r[i]) + " follows " +
                                      std::to_string(r[i - 1]) + ")");
      }
    }
  }
  bool all_ = false;
  std::vector<int64_t> begin_{0};
  std::vector<int64_t> rows_;
};

}  // namespace flashcheck
