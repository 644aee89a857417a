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
};
std::string_view to_string(Dist d);
Dist parse_dist(std::string_view s);
inline constexpr Dist kAllDists[] = {Dist::normal, Dist::uniform, Dist::large,
                                     Dist::outlier_keys, Dist::constant_rows, Dist::equal_scores};

// Values are stored as fp32 but every one is exactly representable in the problem's dtype:
// the oracles and the kernels see the very same numbers.
struct Inputs {
  std::vector<float> q, k, v;
};

Inputs make_inputs(const Problem& p, uint64_t seed, Dist dist = Dist::normal);
// Round every element to `d` in place.
void round_all(std::vector<float>& x, DType d);

}  // namespace flashcheck
