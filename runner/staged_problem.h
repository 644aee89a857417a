// A problem's five kernel buffers (q, k, v, o, lse), each fenced by canaries, with the inputs
// encoded in the problem's dtype and the outputs poisoned, uploaded where the variant runs. The
// harness and the benchmark both launch through this, so a timed launch sees the same buffers a
// checked one does.
#pragma once
#include "runner/guarded_buffer.h"
#include "runner/registry.h"
#include "reference/inputs.h"

namespace flashcheck {

struct StagedProblem {
  StagedProblem(Memory mem, const Problem& p, const Inputs& in);

  // One forward call on the staged buffers (asynchronous on the device stream for device
  // variants); lse is passed only to variants that declare one.
  void launch(const Variant& v, const Problem& p);

  GuardedBuffer q, k, v, o, lse;
};

}  // namespace flashcheck
