#include "runner/harness.h"

#include <cstring>
#include <vector>

#include "runner/device.h"
#include "runner/staged_problem.h"
#include "verify/metrics.h"

namespace flashcheck {

HarnessResult run_variant(const Variant& v, const Problem& p, const Inputs& in) {
  validate(p);
  const Capabilities& caps = v.caps();
  StagedProblem st(caps.memory, p, in);
  // Outputs are poisoned in st; shared memory too, so leftovers of earlier kernels cannot pass for
  // data a kernel never loaded (not in bench: timing measures the kernel alone).
  if (caps.memory == Memory::device) device::poison_shared_memory();
  st.launch(v, p);
  if (caps.memory == Memory::device) device::synchronize();
  st.o.download();
  st.lse.download();

  HarnessResult r;
  r.oob_writes = st.o.damaged_guard_bytes() + st.lse.damaged_guard_bytes();
  r.o.resize(static_cast<size_t>(p.o_elems()));
  decode(p.dtype, st.o.payload_host(), p.o_elems(), r.o.data());
  if (caps.lse_base != LseBase::none) {
    std::vector<float> l(static_cast<size_t>(p.lse_elems()));
    std::memcpy(l.data(), st.lse.payload_host(), l.size() * 4);
    r.lse = std::move(l);
  }
  return r;
}

}  // namespace flashcheck
