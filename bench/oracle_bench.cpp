// The fp64 oracle's speed against raw Eigen fp64 GEMM on this machine (issue: oracle ≥ 0.7 × GEMM).
// FLOPs: 4·Sq·Skv·D per head (two GEMMs); the raw GEMM runs the same two products for one head.
#include <benchmark/benchmark.h>

#include <Eigen/Dense>

#include "reference/naive.h"

namespace {

using flashcheck::Problem;

void BM_NaiveOracle(benchmark::State& state) {
  const int64_t s = state.range(0), d = state.range(1), h = state.range(2);
  Problem p{1, h, h, s, s, d, d, flashcheck::Causal::none, {}, flashcheck::DType::bf16};
  const auto in = flashcheck::make_inputs(p, 1);
  for (auto _ : state) benchmark::DoNotOptimize(flashcheck::naive_attention(p, in).o.data());
  state.counters["GFLOPS"] =
      benchmark::Counter(4.0 * s * s * d * h, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

// S = Q Kᵀ then O = S V at the oracle's sizes, Eigen's own OpenMP parallel GEMM.
void BM_EigenGemm(benchmark::State& state) {
  const int64_t s = state.range(0), d = state.range(1), h = state.range(2);
  using M = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  M q = M::Random(s, d), k = M::Random(s, d), v = M::Random(s, d), sc(s, s), o(s, d);
  for (auto _ : state) {
    for (int64_t i = 0; i < h; ++i) {
      sc.noalias() = q * k.transpose();
      o.noalias() = sc * v;
    }
    benchmark::DoNotOptimize(o.data());
  }
  state.counters["GFLOPS"] =
      benchmark::Counter(4.0 * s * s * d * h, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

}  // namespace

BENCHMARK(BM_NaiveOracle)->Args({4096, 128, 1})->Args({4096, 128, 2})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_EigenGemm)->Args({4096, 128, 1})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_MAIN();
