// Runs one variant on one problem with the hygiene every run gets: inputs and outputs fenced by
// NaN canaries, outputs poisoned before the launch, canaries checked after it, LSE brought to
// natural log from the variant's declared base.
#pragma once
#include <cstdint>

#include "gpu/registry.h"
#include "reference/inputs.h"
#include "verify/verdict.h"

namespace flashcheck {

struct HarnessResult {
  KernelResult result;  // all rows; o widened to fp32, lse in natural log (absent if the variant has none)
  int64_t oob_writes = 0;  // canary bytes around o and lse that changed
};

// Bytes of canary before and after every buffer.
inline constexpr size_t kGuardBytes = 4096;
// The canary: 0x7FCA repeated — a NaN read as bf16, as f16 and (0x7FCA7FCA) as f32, distinct from
// the poison; a kernel that reads past its inputs pulls NaN into its output and fails visibly.
inline constexpr uint16_t kCanary = 0x7FCA;

HarnessResult run_variant(const Variant& v, const Problem& p, const Inputs& in);

// Adds the out-of-bounds criterion to a report.
void add_oob_criterion(Report& r, int64_t oob_writes);

}  // namespace flashcheck
