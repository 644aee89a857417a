// Runs one variant on one problem with the hygiene every run gets: inputs and outputs fenced by
// NaN canaries, outputs poisoned before the launch, canaries checked after it.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "reference/inputs.h"
#include "runner/registry.h"
#include "verify/judge.h"

namespace flashcheck {

struct HarnessResult {
  std::vector<float> o;                   // all rows [B, Hq, Sq, Dv], widened to fp32, poison kept
  std::optional<std::vector<float>> lse;  // [B, Hq, Sq] as written, in the variant's declared base
  int64_t oob_writes = 0;                 // canary bytes around o and lse that changed

  // What the judge reads (it converts LSE from the declared base).
  KernelOutput output() const {
    KernelOutput out{o, std::nullopt, oob_writes};
    if (lse) out.lse = *lse;
    return out;
  }
};

HarnessResult run_variant(const Variant& v, const Problem& p, const Inputs& in);

}  // namespace flashcheck
