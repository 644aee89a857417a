// How long one case of a kernel may run before it is failed as a hang: learned from the kernel's
// own passing cases, so a hang is reported in seconds while a slow kernel is never cut short.
#pragma once
#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "reference/conventions.h"
#include "reference/problem.h"

namespace flashcheck {

struct TimeLimitRule {
  // A kernel with no passing case yet: first_s plus the problem's work at a pessimistic rate (the
  // blocked replica on one core does ~1 GFLOP/s; any GPU kernel 100). A campaign's first case of a
  // hanging kernel is failed after ~first_s.
  double first_s = 15;
  double host_flops = 1e9, device_flops = 1e11;
  // Once cases passed: `factor` times the slowest of them, and for a larger problem `factor` times
  // its work at the fastest rate seen, never below floor_s (a loaded machine stretches small cases).
  double floor_s = 5;
  double factor = 10;
};

class CaseTimeLimit {
 public:
  explicit CaseTimeLimit(Memory memory = Memory::host, TimeLimitRule rule = {}, std::optional<double> fixed_s = std::nullopt);

  struct Limit {
    double seconds = 0;
    std::string basis;  // why this long, for the verdict: "--timeout", "no passing case yet: ...", ...
  };
  Limit for_problem(const Problem& p) const;
  // A case that passed, and the seconds its kernel call took (the span the limit applies to).
  void passed(const Problem& p, double seconds);
  int64_t passes() const { return passes_; }

 private:
  Memory memory_;
  TimeLimitRule rule_;
  std::optional<double> fixed_s_;
  int64_t passes_ = 0;
  double slowest_s_ = 0, largest_flops_ = 0;
  double fastest_s_per_flop_ = std::numeric_limits<double>::infinity();
};

}  // namespace flashcheck
