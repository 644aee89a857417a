#include "verify/coverage.h"

#include <algorithm>
#include <set>

namespace flashcheck {

void Coverage::count(const Point& point, Outcome outcome) {
  Counts& c = cells[point];
  ++c.cases;
  switch (outcome) {
    case Outcome::passed: ++c.passed; break;
    case Outcome::failed: ++c.failed; break;
    case Outcome::skipped: ++c.skipped; break;
  }
}

std::vector<std::string> Coverage::all_axes() const {
  std::vector<std::string> out = axes;
  std::set<std::string> more;
  for (const auto& [axis, values] : declared) more.insert(axis);
  for (const auto& [point, counts] : cells)
    for (const auto& [axis, value] : point) more.insert(axis);
  for (const std::string& a : more)
    if (std::find(out.begin(), out.end(), a) == out.end()) out.push_back(a);
  return out;
}

std::vector<std::pair<std::string, Coverage::Counts>> Coverage::by_value(const std::string& axis) const {
  std::vector<std::pair<std::string, Counts>> out;
  auto slot = [&](const std::string& value) -> Counts& {
    for (auto& [v, c] : out)
      if (v == value) return c;
    out.emplace_back(value, Counts{});
    return out.back().second;
  };
  if (auto d = declared.find(axis); d != declared.end())
    for (const std::string& v : d->second) slot(v);
  for (const auto& [point, counts] : cells) {
    auto at = point.find(axis);
    Counts& c = slot(at == point.end() ? "(not set)" : at->second);
    c.cases += counts.cases;
    c.passed += counts.passed;
    c.failed += counts.failed;
    c.skipped += counts.skipped;
  }
  return out;
}

std::vector<Coverage::Point> Coverage::declared_combinations() const {
  std::vector<Point> out{Point{}};
  for (const std::string& axis : all_axes()) {
    auto d = declared.find(axis);
    if (d == declared.end() || d->second.empty()) continue;
    std::vector<Point> next;
    next.reserve(out.size() * d->second.size());
    for (const Point& p : out)
      for (const std::string& v : d->second) {
        Point q = p;
        q[axis] = v;
        next.push_back(std::move(q));
      }
    out = std::move(next);
  }
  if (out.size() == 1 && out.front().empty()) out.clear();
  return out;
}

bool Coverage::reached(const Point& combination) const {
  for (const auto& [point, counts] : cells) {
    if (counts.judged() == 0) continue;
    bool agrees = true;
    for (const auto& [axis, value] : combination) {
      auto at = point.find(axis);
      if (at == point.end() || at->second != value) {
        agrees = false;
        break;
      }
    }
    if (agrees) return true;
  }
  return false;
}

}  // namespace flashcheck
