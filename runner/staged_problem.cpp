#include "runner/staged_problem.h"

#include <cstring>

#include "runner/device.h"
#include "verify/metrics.h"

namespace flashcheck {

namespace {

size_t bytes(int64_t elems, DType d) { return static_cast<size_t>(elems) * static_cast<size_t>(dtype_bytes(d)); }

void fill_poison(uint8_t* dst, DType d, int64_t n) {
  const uint32_t bits = poison_bits(d);
  for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * dtype_bytes(d), &bits, static_cast<size_t>(dtype_bytes(d)));
}

}  // namespace

StagedProblem::StagedProblem(Memory mem, const Problem& p, const Inputs& in)
    : q(mem, bytes(p.q_elems(), p.dtype)),
      k(mem, bytes(p.k_elems(), p.dtype)),
      v(mem, bytes(p.v_elems(), p.dtype)),
      o(mem, bytes(p.o_elems(), p.dtype)),
      lse(mem, bytes(p.lse_elems(), DType::f32)) {
  encode(p.dtype, in.q.data(), p.q_elems(), q.payload_host());
  encode(p.dtype, in.k.data(), p.k_elems(), k.payload_host());
  encode(p.dtype, in.v.data(), p.v_elems(), v.payload_host());
  fill_poison(o.payload_host(), p.dtype, p.o_elems());
  fill_poison(lse.payload_host(), DType::f32, p.lse_elems());
  for (GuardedBuffer* b : {&q, &k, &v, &o, &lse}) b->upload();
}

void StagedProblem::launch(const Variant& var, const Problem& p) {
  const bool dev = var.caps().memory == Memory::device;
  float* l = var.caps().lse_base == LseBase::none ? nullptr : static_cast<float*>(lse.kernel_ptr());
  var.forward(p, q.kernel_ptr(), k.kernel_ptr(), v.kernel_ptr(), o.kernel_ptr(), l, dev ? device::stream() : nullptr);
}

}  // namespace flashcheck
