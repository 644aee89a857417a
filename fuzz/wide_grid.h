// Cases whose launch grid is wider than any GPU holds at once (issue #21 item 7). A persistent
// kernel launches about as many CTAs as the GPU keeps resident and loops over the remaining tiles;
// one that forgets the grid-stride loop leaves those tiles unwritten, and passes every case whose
// grid fits (a default campaign's largest was B·Hq·ceil(Sq/128) = 2·8·3 = 48 CTAs).
#pragma once
#include <cstdint>
#include <optional>

#include "fuzz/generators.h"

namespace flashcheck {

// Wider than any GPU's resident CTAs: 148 SMs (B200) × 32 CTAs, the most an SM keeps (Hopper,
// Blackwell), is 4,736; an H100 holds 132 × 32 = 4,224.
inline constexpr int64_t kWideGridCtas = 5120;
// A wide case's q, k, v and o together, in elements: about 32 MB as fp32, so the oracle and the
// harness stay cheap on a CPU (many heads of short rows, not long ones).
inline constexpr int64_t kWideGridElements = int64_t{8} << 20;

// The CTAs of a kernel that puts one on each (batch, query head, query tile): B·Hq·ceil(Sq/block_q)
// (for a listed batch, the sum over its sequences).
int64_t grid_ctas(const Problem& p, int64_t block_q);

// c made wide: its query length folded into one tile of the kernel (Sq − 1 mod block_q, so the
// residue the generator aimed at stays), few keys, and enough batch entries that the grid passes
// kWideGridCtas, within the space (declared length limits, the work budget) and kWideGridElements.
// Everything else (dtype, head dims, heads, causal mode, variants of dense problems, the inputs'
// distribution and seed) is c's. nullopt where the space cannot hold one: a listed batch (varlen,
// paged, seqused), or lengths too long for the budget (a kernel that takes only multiples of 64
// and Sq = Skv).
std::optional<Case> wide_case(const Case& c, const ProblemSpace& s);

}  // namespace flashcheck
