// What a campaign reached of the space it drew from: cases counted per point of that space, and
// the values each axis declares. A point names one value per axis ("dtype" → "bf16", "head_dim" →
// "128", "causal" → "bottom_right", "heads" → "GQA"). An axis added later (attention variants:
// window, softcap, alibi, varlen, paged) is one more key in the points and in `declared`: nothing
// that reads a Coverage (the campaign overview page) changes for it.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace flashcheck {

struct Coverage {
  using Point = std::map<std::string, std::string>;
  struct Counts {
    int64_t cases = 0, passed = 0, failed = 0, skipped = 0;
    int64_t judged() const { return passed + failed; }
  };
  enum class Outcome { passed, failed, skipped };

  // Axes in the order they are shown; an axis met only in points comes after them.
  std::vector<std::string> axes;
  // The values the kernel declares per axis: the space drawn from. An axis without an entry is
  // open (its values are whatever was drawn).
  std::map<std::string, std::vector<std::string>> declared;
  std::map<Point, Counts> cells;

  void count(const Point& point, Outcome outcome);
  // Every axis: `axes`, then any other axis a point or `declared` names, sorted.
  std::vector<std::string> all_axes() const;
  // Counts per value of one axis: the declared values first (in their order, zero where never
  // drawn), then values drawn but not declared.
  std::vector<std::pair<std::string, Counts>> by_value(const std::string& axis) const;
  // The declared combinations (the product of every declared axis's values) and, of them, those
  // at least one judged case reached. Empty when no axis declares values.
  std::vector<Point> declared_combinations() const;
  bool reached(const Point& combination) const;  // a judged case at a point agreeing on those axes
};

}  // namespace flashcheck
