#include "gpu/harness.h"

#include <cstring>
#include <stdexcept>
#include <vector>

#include "gpu/device.h"
#include "gpu/guarded_buffer.h"
#include "verify/metrics.h"
#include "verify/verdict.h"

namespace flashcheck {

namespace {

void fill_poison(uint8_t* dst, DType d, int64_t n) {
  const uint32_t bits = poison_bits(d);
  for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * dtype_bytes(d), &bits, static_cast<size_t>(dtype_bytes(d)));
}

}  // namespace

HarnessResult run_variant(const Variant& v, const Problem& p, const Inputs& in) {
  validate(p);
  const Capabilities& caps = v.caps();
  const Memory mem = caps.memory;
  const size_t eb = static_cast<size_t>(dtype_bytes(p.dtype));
  GuardedBuffer q(mem, static_cast<size_t>(p.q_elems()) * eb), k(mem, static_cast<size_t>(p.k_elems()) * eb),
      vv(mem, static_cast<size_t>(p.v_elems()) * eb), o(mem, static_cast<size_t>(p.o_elems()) * eb),
      lse(mem, static_cast<size_t>(p.lse_elems()) * 4);
  encode(p.dtype, in.q.data(), p.q_elems(), q.payload_host());
  encode(p.dtype, in.k.data(), p.k_elems(), k.payload_host());
  encode(p.dtype, in.v.data(), p.v_elems(), vv.payload_host());
  fill_poison(o.payload_host(), p.dtype, p.o_elems());
  fill_poison(lse.payload_host(), DType::f32, p.lse_elems());
  for (GuardedBuffer* b : {&q, &k, &vv, &o, &lse}) b->upload();

  const bool has_lse = caps.lse_base != LseBase::none;
  v.forward(p, q.kernel_ptr(), k.kernel_ptr(), vv.kernel_ptr(), o.kernel_ptr(),
            has_lse ? static_cast<float*>(lse.kernel_ptr()) : nullptr, mem == Memory::device ? device::stream() : nullptr);
  if (mem == Memory::device) device::synchronize();
  o.download();
  lse.download();

  HarnessResult r;
  r.oob_writes = o.damaged_guard_bytes() + lse.damaged_guard_bytes();
  r.result.o.resize(static_cast<size_t>(p.o_elems()));
  decode(p.dtype, o.payload_host(), p.o_elems(), r.result.o.data());
  if (has_lse) {
    std::vector<float> l(static_cast<size_t>(p.lse_elems()));
    std::memcpy(l.data(), lse.payload_host(), l.size() * 4);
    if (caps.lse_base == LseBase::two) lse_base2_to_natural(l);
    r.result.lse = std::move(l);
  }
  return r;
}

void add_oob_criterion(Report& r, int64_t oob_writes) {
  r.criteria.push_back({"out_of_bounds", oob_writes == 0, static_cast<double>(oob_writes), 0,
                        "canary bytes around o and lse overwritten (writes past the buffers)"});
}

}  // namespace flashcheck
