// The fp64 oracle's speed against raw BLAS fp64 GEMM on this machine (issue 11: oracle ≥ 0.9 × GEMM),
// and the same-dtype eager baseline that `check` computes beside it.
// FLOPs: 4·Sq·Skv·D per head (two GEMMs); the raw GEMM runs the same two products per head on whole
// matrices with OpenBLAS's own threading, the best case the oracle's blocked calls can approach.
//
//   oracle_bench [--shapes=B,H,S,D[,causal|,wL:R];...] [Google Benchmark flags]
// wL:R is a sliding window (left, right) (problem model 2): GFLOPS then count the visible pairs
// only, so a window's figure is comparable with the dense causal one (issue 20: a (1024, 0)
// window at Sq = 32768 ≥ 10× faster than dense causal, GFLOPS within 20%).
// Time is wall clock, CPU is the whole process's CPU time (all threads): on a shared machine
// flops / CPU time is the fairer per-core figure.
// Default shapes: 1,1,4096,128 and 1,4,4096,128 (the shape torch's CPU SDPA is timed on).
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "reference/blas_core.h"
#include "reference/naive.h"
#include "reference/rng.h"
#include "verify/baseline.h"

namespace {

using flashcheck::Problem;

struct Shape {
  int64_t b, h, s, d;
  bool causal;
  flashcheck::Window window;
};

Problem problem_of(const Shape& x) {
  Problem p{x.b, x.h, x.h, x.s, x.s, x.d, x.d, x.causal ? flashcheck::Causal::top_left : flashcheck::Causal::none, {},
            flashcheck::DType::bf16};
  p.window = x.window;
  return p;
}

void set_flops(benchmark::State& state, const Problem& p) {
  state.counters["GFLOPS"] = benchmark::Counter(p.flops(), benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

void oracle(benchmark::State& state, Shape x) {
  const Problem p = problem_of(x);
  const auto in = flashcheck::make_inputs(p, 1);
  for (auto _ : state) benchmark::DoNotOptimize(flashcheck::naive_attention(p, in).o.data());
  set_flops(state, p);
}

// S = Q Kᵀ then O = S V for every head, whole matrices, OpenBLAS's OpenMP threading (this runs
// outside any parallel region, so each call uses all threads). Non-causal shapes only: it is the
// ceiling for the non-causal oracle.
void blas_gemm(benchmark::State& state, Shape x) {
  const int n = static_cast<int>(x.s), d = static_cast<int>(x.d);
  const size_t sd = static_cast<size_t>(n) * static_cast<size_t>(d);
  std::vector<double> q(sd), k(sd), v(sd), s(static_cast<size_t>(n) * static_cast<size_t>(n)), o(sd);
  uint64_t idx = 0;  // random, never zeros: zeros can run faster than real data
  const flashcheck::CounterRng rng(7, 0);
  for (auto* m : {&q, &k, &v})
    for (double& e : *m) e = rng.normal(idx++);
  for (auto _ : state) {
    for (int64_t i = 0; i < x.b * x.h; ++i) {
      cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, d, 1.0, q.data(), d, k.data(), d, 0.0, s.data(), n);
      cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, d, n, 1.0, s.data(), n, v.data(), d, 0.0, o.data(), d);
    }
    benchmark::DoNotOptimize(o.data());
  }
  Problem p = problem_of(x);
  p.causal = flashcheck::Causal::none;
  set_flops(state, p);
}

void baseline(benchmark::State& state, Shape x) {
  const Problem p = problem_of(x);
  const auto in = flashcheck::make_inputs(p, 1);
  for (auto _ : state) benchmark::DoNotOptimize(flashcheck::dtype_baseline(p, in).data());
  set_flops(state, p);
}

std::vector<Shape> parse_shapes(const std::string& spec) {
  std::vector<Shape> out;
  std::stringstream all(spec);
  for (std::string one; std::getline(all, one, ';');) {
    Shape x{};
    char tail[16] = {};
    if (std::sscanf(one.c_str(), "%ld,%ld,%ld,%ld,%15s", &x.b, &x.h, &x.s, &x.d, tail) < 4)
      throw std::invalid_argument("bad --shapes entry '" + one + "': expected B,H,S,D[,causal]");
    x.causal = std::strcmp(tail, "causal") == 0;
    if (tail[0] == 'w' && std::sscanf(tail + 1, "%ld:%ld", &x.window.left, &x.window.right) != 2)
      throw std::invalid_argument("bad --shapes entry '" + one + "': a window is wLEFT:RIGHT");
    out.push_back(x);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  flashcheck::restart_with_better_blas_core(argv);
  std::string spec = "1,1,4096,128;1,4,4096,128";
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strncmp(argv[i], "--shapes=", 9) == 0)
      spec = argv[i] + 9;
    else
      args.push_back(argv[i]);
  }
  for (const Shape& x : parse_shapes(spec)) {
    const bool windowed = !x.window.none();
    const std::string name = std::to_string(x.b) + "x" + std::to_string(x.h) + "x" + std::to_string(x.s) + "x" +
                             std::to_string(x.d) + (x.causal ? "_causal" : "") +
                             (windowed ? "_w" + std::to_string(x.window.left) + ":" + std::to_string(x.window.right) : "");
    std::vector<benchmark::internal::Benchmark*> bs{benchmark::RegisterBenchmark(("oracle/" + name).c_str(), oracle, x)};
    if (!x.causal && !windowed) bs.push_back(benchmark::RegisterBenchmark(("blas_gemm/" + name).c_str(), blas_gemm, x));
    bs.push_back(benchmark::RegisterBenchmark(("baseline_bf16/" + name).c_str(), baseline, x));
    for (auto* b : bs)
      b->Unit(benchmark::kMillisecond)->MeasureProcessCPUTime()->UseRealTime()->ComputeStatistics("min", [](const std::vector<double>& v) {
        return *std::min_element(v.begin(), v.end());  // on a shared machine the least-disturbed run
      });
  }
  benchmark::AddCustomContext("openblas_core", openblas_get_corename());
  benchmark::AddCustomContext("openblas_config", openblas_get_config());
  benchmark::AddCustomContext("omp_threads", std::to_string(omp_get_max_threads()));
  __builtin_cpu_init();
  benchmark::AddCustomContext("cpu_avx2_fma", __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? "yes" : "no");
  benchmark::AddCustomContext("cpu_avx512f", __builtin_cpu_supports("avx512f") ? "yes" : "no");
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());
  if (benchmark::ReportUnrecognizedArguments(n, args.data())) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
