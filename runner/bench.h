// `flashcheck bench`: a variant's speed on given shapes (CUDA events, warm-up, median of many).
#pragma once
#include "runner/registry.h"

namespace flashcheck {

struct BenchResult {
  double median_ms = 0, min_ms = 0;
  double tflops = 0;  // Problem::flops() / median
  int iters = 0;
};

// Inputs are random normals (never zeros: zeros run faster than real data). Host variants are timed
// with the wall clock.
BenchResult bench_variant(const Variant& v, const Problem& p, int warmup, int iters);

}  // namespace flashcheck
