#include "runner/bench.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "runner/device.h"
#include "runner/staged_problem.h"
#include "reference/inputs.h"

namespace flashcheck {

BenchResult bench_variant(const Variant& v, const Problem& p, int warmup, int iters) {
  validate(p);
  if (auto why = v.unsupported(p)) throw std::invalid_argument(v.name() + " does not support " + to_string(p) + ": " + *why);
  if (auto why = v.unavailable()) throw std::runtime_error(v.name() + " is unavailable: " + *why);
  const Inputs in = make_inputs(p, 12345, Dist::uniform);  // random, never zeros; cheap to draw at 1e9 elements
  const bool dev = v.caps().memory == Memory::device;
  StagedProblem st(v.caps().memory, p, in);
  auto once = [&] { st.launch(v); };
  std::vector<double> ms;
  for (int i = 0; i < warmup + iters; ++i) {
    double t;
    if (dev) {
      t = device::time_ms(once);
    } else {
      auto t0 = std::chrono::steady_clock::now();
      once();
      t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    }
    if (i >= warmup) ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  BenchResult r;
  r.iters = iters;
  r.median_ms = ms[ms.size() / 2];
  r.min_ms = ms.front();
  r.tflops = p.flops() / (r.median_ms * 1e-3) * 1e-12;
  return r;
}

}  // namespace flashcheck
