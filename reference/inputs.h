// Input tensors for a problem, drawn from named distributions by the portable PRNG.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "reference/problem.h"

namespace flashcheck {

// The value distributions the fuzzers and goldens draw from. Beyond N(0,1) they are the ones that
// break kernels: huge magnitudes overflow an un-shifted exp, outlier keys make one score dominate,
// constant rows and equal scores make every max a tie.
enum class Dist {
  normal,         // N(0,1)
  uniform,        // U(-1,1)
  large,          // N(0,1) * 1e4 (f16: * 1e2): scores near 1e8·scale, the softmax is one-hot
  outlier_keys,   // N(0,1), with about 1 key row in 16 scaled by 256
  constant_rows,  // every row of q, k and v is one repeated value
  equal_scores,   // every key row identical: all scores of a row tie, softmax is uniform
  // N(0,1) with one NaN or Inf in q, k or v, placed where the oracle's propagation is every correct
  // kernel's (reference/nonfinite_inputs.h). Drawn for kernels that do not declare otherwise
  // (Capabilities::propagates_nonfinite); not in kAllDists, the finite distributions.
  nonfinite,
};
std::string_view to_string(Dist d);
Dist parse_dist(std::string_view s);
// The finite distributions (properties that need finite inputs draw from these).
inline constexpr Dist kAllDists[] = {Dist::normal, Dist::uniform, Dist::large,
                                     Dist::outlier_keys, Dist::constant_rows, Dist::equal_scores};

// Values are stored as fp32 but every one is exactly representable in the problem's dtype:
// the oracles and the kernels see the very same numbers.
//
// q, k and v are in the logical layout (reference/sequences.h): per sequence b, [H, S_b, D] blocks
// one after another, only the queries and the used keys; a dense problem's logical layout is
// BHSD. Where a kernel's buffers differ (BSHD, THD with padding, a paged cache, strided views) the
// storage layer converts (reference/storage.h): the oracle never sees padding or unused pages.
struct Inputs {
  std::vector<float> q, k, v;
  // ALiBi slopes: [Hq], or [B, Hq] with Problem::alibi_per_batch. fp32, as kernels take them.
  std::vector<float> alibi_slopes;
  // Attention sinks: one logit per query head [Hq], in the units of the scaled (and capped) scores;
  // −inf is a sink that takes no weight.
  std::vector<float> sinks;
  // fp8 descale factors: [1] (Descale::tensor) or [B, Hkv] (Descale::head); empty without descale.
  // The value a kernel computes with is x · descale (for q: the descale of the query head's KV head).
  std::vector<float> descale_q, descale_k, descale_v;
  // Paged KV cache: block_table [B, max_pages] of page indices into a cache of num_pages pages.
  // Entries past a sequence's last page (and every page no sequence uses) point at pages the
  // harness poisons; the logical k and v above are what the table gathers.
  std::vector<int32_t> block_table;
  int64_t num_pages = 0;
  // block_table's row length (0 without a paged cache).
  int64_t max_pages(int64_t batch) const { return batch > 0 ? static_cast<int64_t>(block_table.size()) / batch : 0; }
};

// Throws InvalidProblem naming the field when the side tensors do not fit the problem: slopes of
// the wrong length, NaN/Inf slopes or descales, descale <= 0, block_table entries out of
// [0, num_pages) or negative, a sink that is NaN or +inf.
void validate_side_inputs(const Problem& p, const Inputs& in);

// Inputs for a problem: q, k, v from the distribution, and the side inputs the problem's variants
// need (slopes, sinks, descales, block table), all from the same seed.
// Dist::nonfinite plants its value where every correct kernel agrees with the oracle: a forward's
// (default), or also its backward's (`backward`: reference/nonfinite_inputs.h). Other dists ignore it.
Inputs make_inputs(const Problem& p, uint64_t seed, Dist dist = Dist::normal, bool backward = false);
// A backward's output gradient dO for p, as goldens and calibration draw it: N(0,1) over every row
// of O's logical layout (Problem::o_elems()) from its own stream of `seed`, rounded to o's dtype
// (the dtype a kernel is handed dO in).
std::vector<float> make_d_out(const Problem& p, uint64_t seed);
// The dequantized value of element x of q/k/v (fp8 problems), exact in double: x · descale.
double descale_of(const Problem& p, const std::vector<float>& descale, int64_t b, int64_t kv_head);
// Round every element to `d` in place.
void round_all(std::vector<float>& x, DType d);

}  // namespace flashcheck
