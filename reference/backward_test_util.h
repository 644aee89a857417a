// Helpers shared by the backward oracle's tests (reference/naive_backward_*_test.cpp).
#pragma once
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "reference/naive_backward.h"
#include "reference/random_variant_test_util.h"
#include "reference/rng.h"

namespace flashcheck {

// An output gradient for p: N(0, 1) floats over every row of O's logical layout, from `seed`.
inline std::vector<float> random_dout(const Problem& p, uint64_t seed) {
  const CounterRng rng(seed, 21);
  std::vector<float> g(static_cast<size_t>(p.o_elems()));
  for (size_t x = 0; x < g.size(); ++x) g[x] = static_cast<float>(rng.normal(x));
  return g;
}

// random_variant_problem (every variant in play) in f32, for tests whose inputs are perturbed
// (finite differences) or must be exact floats.
inline Problem random_f32_variant_problem(std::mt19937_64& g) {
  Problem p = random_variant_problem(g);
  p.dtype = DType::f32;
  p.out_dtype.reset();
  p.descale = Descale::none;
  validate(p);
  return p;
}

inline std::string describe(const Problem& p, uint64_t seed) { return to_string(p) + " input seed " + std::to_string(seed); }

}  // namespace flashcheck
