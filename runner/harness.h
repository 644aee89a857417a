// Runs one variant on one problem with the hygiene every run gets: every buffer in the problem's
// storage layout (runner/staged_problem.h) fenced by NaN canaries, inputs NaN wherever no row maps
// (padding, keys past seqused, unused pages), outputs poisoned before the launch; after it, the
// canaries, the output elements no row owns and the inputs are checked.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "reference/inputs.h"
#include "runner/registry.h"
#include "verify/backward_criteria.h"
#include "verify/judge.h"

namespace flashcheck {

// A backward case's gradients (runner/backward_harness.h), beside its forward's outputs.
struct BackwardOutputs {
  KernelGradients gradients;               // logical layouts, poison kept
  std::optional<std::string> error;        // the backward threw, returned an error or wrote an input
  int64_t oob_writes = 0;                  // canary bytes that changed during the backward's calls
  std::optional<std::string> nondeterministic;  // a deterministic backward's calls differed: where
};

struct HarnessResult {
  std::vector<float> o;                   // every row in the logical layout, widened to fp32, poison kept
  std::optional<std::vector<float>> lse;  // logical layout, as written, in the variant's declared base
  int64_t oob_writes = 0;                 // canary bytes around the buffers that changed
  // Output elements outside every row (THD padding rows and their LSE) that no longer hold the
  // poison; absent when the problem's outputs have no such element.
  std::optional<int64_t> padding_written;
  std::optional<BackwardOutputs> backward;  // backward cases only

  // What the judge reads (it converts LSE from the declared base).
  KernelOutput output() const {
    KernelOutput out{o, std::nullopt, oob_writes, padding_written};
    if (lse) out.lse = *lse;
    return out;
  }
};

// Throws InvalidProblem for a problem or side inputs that cannot be staged (cannot test), and
// std::runtime_error when the kernel failed, wrote into an input among them.
HarnessResult run_variant(const Variant& v, const Problem& p, const Inputs& in);

}  // namespace flashcheck
