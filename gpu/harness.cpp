#include "gpu/harness.h"

#include <cstring>
#include <stdexcept>
#include <vector>

#include "gpu/device.h"
#include "gpu/staged_problem.h"
#include "verify/metrics.h"
#include "verify/verdict.h"

namespace flashcheck {

HarnessResult run_variant(const Variant& v, const Problem& p, const Inputs& in) {
  validate(p);
  const Capabilities& caps = v.caps();
  StagedProblem st(caps.memory, p, in);
  st.launch(v, p);
  if (caps.memory == Memory::device) device::synchronize();
  st.o.download();
  st.lse.download();

  HarnessResult r;
  r.oob_writes = st.o.damaged_guard_bytes() + st.lse.damaged_guard_bytes();
  r.result.o.resize(static_cast<size_t>(p.o_elems()));
  decode(p.dtype, st.o.payload_host(), p.o_elems(), r.result.o.data());
  if (caps.lse_base != LseBase::none) {
    std::vector<float> l(static_cast<size_t>(p.lse_elems()));
    std::memcpy(l.data(), st.lse.payload_host(), l.size() * 4);
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
