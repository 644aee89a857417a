// `flashcheck run --backward`: campaigns of a kernel's backward pass (issue 23). Each case is drawn
// from the kernel's backward space (gpu/kernel.h: backward_space) as a forward case is, its
// inputs alike; the kernel's own forward runs first and its O and LSE feed its backward, as in
// training; dO comes from the case's seed (reference/inputs.h: make_d_out). The forward's
// output is judged as in a forward campaign and the gradients with the backward criteria
// (verify/backward_criteria.h), apart. A kernel that declares a deterministic backward has two
// modes, and each case runs one of them, chosen by its seed (deterministic_mode): the
// deterministic mode kDeterminismCalls times, which must give the same bits, or the default
// mode (atomics allowed) once; a kernel's fast default path is judged as much as its
// deterministic one, and a repro re-runs the same mode. Failures shrink and re-run through the
// forward campaign's machinery (runner/campaign.h: CaseRunner).
#pragma once
#include <cstdint>
#include <string>

#include "runner/campaign.h"

namespace flashcheck {

// One backward case (skipped, with the reason, outside the backward's space or when the kernel's
// supports() refuses it). error_maps: the forward's and the gradients' error maps for an HTML page
// (`run --backward --html`).
CaseOutcome run_backward_case(const Variant& v, const Case& c, int64_t max_rows, const std::string& plugin = "",
                              KernelWorker* worker = nullptr, const WaitingFn& waiting = {},
                              OracleChoice oracle = OracleChoice::automatic, bool error_maps = false);

// Whether case `c` runs the deterministic mode of a backward with these caps: never for a kernel
// that does not declare one; for one that does, half the seeds (a bit of a mix of the seed, so it
// does not follow the seed's low bits other choices read).
bool deterministic_mode(const Case& c, const BackwardCaps& caps);

// The first seed from `from` on whose cases run the given mode of a backward declared
// deterministic: for tests and fixed checks that must cover each mode.
uint64_t seed_in_mode(uint64_t from, bool deterministic);

// The campaign's runner of backward cases, over backward_space(v.caps(), *v.backward_caps()).
// Throws CannotTest when the kernel has no backward pass.
CaseRunner backward_runner(const Variant& v, const CampaignOptions& opt);

// Why `run --backward` cannot honour these options (a message for exit 125), or empty.
std::optional<std::string> backward_campaign_refusal(const CampaignOptions& opt);

}  // namespace flashcheck
