#include "gpu/harness.h"

#include <cstring>
#include <stdexcept>
#include <vector>

#include "gpu/device.h"
#include "verify/metrics.h"
#include "verify/verdict.h"

namespace flashcheck {

namespace {

// A buffer in host or device memory laid out as [canary | payload | canary].
class GuardedBuffer {
 public:
  GuardedBuffer(Memory mem, size_t payload) : mem_(mem), payload_(payload), host_(payload + 2 * kGuardBytes) {
    for (size_t i = 0; i < host_.size() / 2; ++i) std::memcpy(host_.data() + 2 * i, &kCanary, 2);
    if (mem_ == Memory::device) dev_ = static_cast<uint8_t*>(device::alloc(host_.size()));
  }
  ~GuardedBuffer() {
    if (dev_) device::free(dev_);
  }
  GuardedBuffer(const GuardedBuffer&) = delete;
  GuardedBuffer& operator=(const GuardedBuffer&) = delete;

  uint8_t* payload_host() { return host_.data() + kGuardBytes; }
  void* kernel_ptr() { return (mem_ == Memory::device ? dev_ : host_.data()) + kGuardBytes; }
  void upload() {
    if (mem_ == Memory::device) device::to_device(dev_, host_.data(), host_.size());
  }
  void download() {
    if (mem_ == Memory::device) device::to_host(host_.data(), dev_, host_.size());
  }
  int64_t damaged_guard_bytes() const {
    int64_t bad = 0;
    for (size_t i = 0; i < kGuardBytes; ++i) {
      const uint8_t want = reinterpret_cast<const uint8_t*>(&kCanary)[i % 2];
      bad += host_[i] != want;
      bad += host_[kGuardBytes + payload_ + i] != reinterpret_cast<const uint8_t*>(&kCanary)[(payload_ + i) % 2];
    }
    return bad;
  }

 private:
  Memory mem_;
  size_t payload_;
  std::vector<uint8_t> host_;
  uint8_t* dev_ = nullptr;
};

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
