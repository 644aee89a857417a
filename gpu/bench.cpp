#include "gpu/bench.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "gpu/device.h"
#include "gpu/guarded_buffer.h"
#include "reference/inputs.h"

namespace flashcheck {

BenchResult bench_variant(const Variant& v, const Problem& p, int warmup, int iters) {
  validate(p);
  if (auto why = v.unsupported(p)) throw std::invalid_argument(v.name() + " does not support " + to_string(p) + ": " + *why);
  if (auto why = v.unavailable()) throw std::runtime_error(v.name() + " is unavailable: " + *why);
  const Inputs in = make_inputs(p, 12345, Dist::uniform);  // random, never zeros; cheap to draw at 1e9 elements
  const size_t eb = static_cast<size_t>(dtype_bytes(p.dtype));
  const Memory mem = v.caps().memory;
  const bool dev = mem == Memory::device;
  GuardedBuffer q(mem, static_cast<size_t>(p.q_elems()) * eb), k(mem, static_cast<size_t>(p.k_elems()) * eb),
      vv(mem, static_cast<size_t>(p.v_elems()) * eb), o(mem, static_cast<size_t>(p.o_elems()) * eb),
      l(mem, static_cast<size_t>(p.lse_elems()) * 4);
  encode(p.dtype, in.q.data(), p.q_elems(), q.payload_host());
  encode(p.dtype, in.k.data(), p.k_elems(), k.payload_host());
  encode(p.dtype, in.v.data(), p.v_elems(), vv.payload_host());
  for (GuardedBuffer* buf : {&q, &k, &vv}) buf->upload();
  float* lse = v.caps().lse_base == LseBase::none ? nullptr : static_cast<float*>(l.kernel_ptr());
  auto once = [&] {
    v.forward(p, q.kernel_ptr(), k.kernel_ptr(), vv.kernel_ptr(), o.kernel_ptr(), lse, dev ? device::stream() : nullptr);
  };
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
