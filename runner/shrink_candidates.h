// The smaller problems a failing case is tried on while shrinking (runner/campaign.cpp's
// shrink_failure), most reduction first. Every candidate is a valid problem; the kernel may still
// decline it (then it is skipped, not counted as passing).
#pragma once
#include <vector>

#include "gpu/kernel.h"
#include "reference/problem.h"

namespace flashcheck {

// Variants the failure may not need are dropped one at a time (paging → a contiguous cache,
// softcap, ALiBi, sinks, seqused_k, a strided layout → BHSD, fp8 descales), a window narrows toward
// the smallest that still fails, a varlen or paged batch is cut to each single sequence (so a
// failure in one sequence shrinks to it) and to its halves; then fewer heads, shorter sequences
// and smaller head dims among those `caps` declares. Every candidate lies inside `caps` (lengths
// brought to its declared multiple, Sq and Skv shortened together where it declares them equal).
std::vector<Problem> smaller_problems(const Problem& p, const Capabilities& caps);

}  // namespace flashcheck
