// The instrumented ("perturbed") build of the built-in kernels: what the host hands a perturbed
// launch. Compiled only with -DFLASHCHECK_PERTURB (CMake option FLASHCHECK_PERTURB, which builds
// the kernels a second time into flashcheck_perturbed.so); in the normal build this header is empty
// and FwdParams has no such field, so the normal kernels carry none of it.
//
// Why: an async-proxy race (a consumer releasing a TMA ring slot before the wgmma reading it has
// completed, a missing wgmma wait) almost never corrupts a result, because the TMA refill is slower
// than the wgmma still reading (issue #21 item 8). The perturbed build makes such a race fail:
//  * kTrack   — each consumer warpgroup keeps the wgmma groups it committed and waited for, and
//               which group last used each accumulator and ring slot; releasing a slot, or touching
//               an accumulator, whose last user may still run is reported and fails the launch.
//               Deterministic: it needs no unlucky timing.
//  * kPoison  — a released slot is overwritten with NaN (all-ones) the moment it is released, before
//               the refill is issued (the producer, fenced for the async proxy): a reader still
//               reading it reads NaN rather than the next tile's plausible values.
//  * kStretch — extra wgmmas ahead of a GEMM's own (exact: they write what the GEMM then overwrites),
//               so the GEMM reads its slot later after being issued: a wider window for the above.
//  * kDelay   — seeded sleeps at hand-offs and warpgroup turns: other interleavings.
// None of these can change a correct kernel's result (tools/mutate/MUTATION.md, "Perturbed build").
#pragma once
#ifdef FLASHCHECK_PERTURB
#include <cstdint>

#include "gpu/common/perturb_settings.h"  // the Mechanism bits

namespace flashcheck::kernels::perturb {

// What a violation left in the report buffer (device memory, zeroed before each launch).
enum Violation : uint32_t { kNoViolation = 0, kEarlyRelease = 1, kEarlyAccess = 2 };
enum ReportWord : int { kRepViolation, kRepResource, kRepBlockX, kRepBlockY, kRepBlockZ, kRepWarpgroup, kRepGroup, kRepDone,
                        kReportWords };

// Resources the tracker follows: the consumer's accumulators and A fragments, and ring slots
// (K and V of each stage) identified by their shared-memory address.
enum Resource : uint32_t { kResS = 0, kResO = 1, kResP = 2, kResSlot0 = 3 };
constexpr int kMaxStages = 4;
constexpr int kResources = kResSlot0 + 2 * kMaxStages;
// (constexpr: usable on both sides, nvcc builds the kernels with --expt-relaxed-constexpr)
constexpr uint32_t slot_resource(int stage, bool is_v) { return kResSlot0 + 2 * stage + (is_v ? 1 : 0); }

struct Config {
  uint32_t seed;        // this launch's: the run's seed mixed with the problem's shape
  uint32_t mechanisms;  // Mechanism bits
  uint32_t* report;     // kReportWords device words
};

}  // namespace flashcheck::kernels::perturb
#endif
