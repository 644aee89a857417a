#include "runner/harness.h"

#include <stdexcept>
#include <string>

#include "runner/device.h"
#include "runner/staged_problem.h"

namespace flashcheck {

HarnessResult run_variant(const Variant& v, const Problem& p, const Inputs& in) {
  const Capabilities& caps = v.caps();
  StagedProblem st(caps.memory, p, in);  // validates the problem and its inputs (InvalidProblem)
  // Outputs are poisoned in st; shared memory too, so leftovers of earlier kernels cannot pass for
  // data a kernel never loaded (not in bench: timing measures the kernel alone).
  if (caps.memory == Memory::device) device::poison_shared_memory();
  st.launch(v);
  if (caps.memory == Memory::device) device::synchronize();
  return finish_run(st, caps);
}

HarnessResult finish_run(StagedProblem& st, const Capabilities& caps) {
  int64_t oob = 0;
  for (auto& b : st.buf)
    if (b) {
      b->download();  // inputs too: they are compared with what was staged
      oob += b->damaged_guard_bytes();
    }
  // Inputs are the caller's data (a real caller's q may be its KV cache): a kernel that writes one
  // fails, naming where. Isolated host kernels fault on such a write (their inputs are mapped
  // read-only); this catches it in-process and on the device, at the cost of one comparison.
  for (int b = 0; b < kStagedBuffers; ++b) {
    if (is_output_buffer(b) || is_gradient_buffer(b) || !st.buf[static_cast<size_t>(b)]) continue;
    const int64_t at = st.staging.changed_byte(b, st.buffer(b).payload_host());
    if (at >= 0)
      throw std::runtime_error("it wrote into its input " + std::string(staged_buffer_name(b)) + " at byte " + std::to_string(at) +
                               " (inputs are read-only)");
  }
  HarnessResult r = st.staging.collect(st.buffer(kBufO).payload_host(), st.buffer(kBufLse).payload_host(),
                                       caps.lse_base != LseBase::none);
  r.oob_writes = oob;
  return r;
}

}  // namespace flashcheck
