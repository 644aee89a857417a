#include "runner/case_time_limit.h"

#include <algorithm>
#include <cstdio>

namespace flashcheck {

namespace {
std::string fmt(const char* f, double a, double b = 0) {
  char buf[160];
  std::snprintf(buf, sizeof buf, f, a, b);
  return buf;
}
}  // namespace

CaseTimeLimit::CaseTimeLimit(Memory memory, TimeLimitRule rule, std::optional<double> fixed_s)
    : memory_(memory), rule_(rule), fixed_s_(fixed_s) {}

CaseTimeLimit::Limit CaseTimeLimit::for_problem(const Problem& p) const {
  if (fixed_s_) return {*fixed_s_, "--timeout"};
  const double flops = std::max(p.flops(), 1.0);
  if (passes_ == 0) {
    const double rate = memory_ == Memory::host ? rule_.host_flops : rule_.device_flops;
    return {rule_.first_s + flops / rate,
            fmt("no passing case yet: %g s plus the work at %g GFLOP/s; --timeout sets one", rule_.first_s, rate / 1e9)};
  }
  const double by_slowest = rule_.factor * slowest_s_;
  // A problem larger than any that passed gets time in proportion to its work, at the fastest
  // rate seen: small cases are dominated by fixed costs, so the fastest rate is the large cases'.
  const double by_work = flops > largest_flops_ ? rule_.factor * fastest_s_per_flop_ * flops : 0;
  const double s = std::max({rule_.floor_s, by_slowest, by_work});
  std::string basis;
  if (s == rule_.floor_s)
    basis = fmt("the floor: %g x its slowest passing case (%.3g s) is less", rule_.factor, slowest_s_);
  else if (s == by_slowest)
    basis = fmt("%g x its slowest passing case, %.3g s", rule_.factor, slowest_s_);
  else
    basis = fmt("%g x the work at its fastest passing rate, %.3g GFLOP/s", rule_.factor, 1e-9 / fastest_s_per_flop_);
  return {s, basis};
}

void CaseTimeLimit::passed(const Problem& p, double seconds) {
  const double flops = std::max(p.flops(), 1.0);
  ++passes_;
  slowest_s_ = std::max(slowest_s_, seconds);
  largest_flops_ = std::max(largest_flops_, flops);
  fastest_s_per_flop_ = std::min(fastest_s_per_flop_, std::max(seconds, 1e-9) / flops);
}

}  // namespace flashcheck
