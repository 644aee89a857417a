#include "gpu/bench.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "gpu/device.h"
#include "reference/inputs.h"

namespace flashcheck {

BenchResult bench_variant(const Variant& v, const Problem& p, int warmup, int iters) {
  validate(p);
  if (auto why = v.unsupported(p)) throw std::invalid_argument(v.name() + " does not support " + to_string(p) + ": " + *why);
  if (auto why = v.unavailable()) throw std::runtime_error(v.name() + " is unavailable: " + *why);
  const Inputs in = make_inputs(p, 12345, Dist::uniform);  // random, never zeros; cheap to draw at 1e9 elements
  const size_t eb = static_cast<size_t>(dtype_bytes(p.dtype));
  std::vector<uint8_t> hq(static_cast<size_t>(p.q_elems()) * eb), hk(static_cast<size_t>(p.k_elems()) * eb),
      hv(static_cast<size_t>(p.v_elems()) * eb), ho(static_cast<size_t>(p.o_elems()) * eb);
  std::vector<float> hl(static_cast<size_t>(p.lse_elems()));
  encode(p.dtype, in.q.data(), p.q_elems(), hq.data());
  encode(p.dtype, in.k.data(), p.k_elems(), hk.data());
  encode(p.dtype, in.v.data(), p.v_elems(), hv.data());
  const bool dev = v.caps().memory == Memory::device;
  void *q = hq.data(), *k = hk.data(), *vv = hv.data(), *o = ho.data();
  float* l = hl.data();
  if (dev) {
    q = device::alloc(hq.size());
    k = device::alloc(hk.size());
    vv = device::alloc(hv.size());
    o = device::alloc(ho.size());
    l = static_cast<float*>(device::alloc(hl.size() * 4));
    device::to_device(q, hq.data(), hq.size());
    device::to_device(k, hk.data(), hk.size());
    device::to_device(vv, hv.data(), hv.size());
  }
  float* lse = v.caps().lse_base == LseBase::none ? nullptr : l;
  auto once = [&] { v.forward(p, q, k, vv, o, lse, dev ? device::stream() : nullptr); };
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
  if (dev) {
    for (void* ptr : {q, k, vv, o, static_cast<void*>(l)}) device::free(ptr);
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
