// The fp64 backward oracle's speed (reference/naive_backward.h), beside the forward oracle on the
// same shape, for the device (issue 23: every row of (4,16,8192,128) checked in < 30 s end to end).
// GFLOPS count the backward as 2.5× the forward's FLOPs over the visible pairs (Problem::flops),
// the convention FlashAttention's papers and issue 23's anchors use; the oracle itself runs seven
// GEMM-sized products per visible pair where that count assumes five (naive_backward.h says why).
//
//   backward_bench [--shapes=B,H,S,D[,causal|,wL:R];...] [Google Benchmark flags]
// Time is wall clock; CPU is the whole process's CPU time (all threads).
// Default shapes: 1,4,4096,128 and the same causal.
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "reference/blas_core.h"
#include "reference/naive.h"
#include "reference/naive_backward.h"
#include "reference/rng.h"

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

std::vector<float> dout_for(const Problem& p) {
  const flashcheck::CounterRng rng(3, 21);
  std::vector<float> g(static_cast<size_t>(p.o_elems()));
  for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(rng.normal(i));
  return g;
}

void backward(benchmark::State& state, Shape x) {
  const Problem p = problem_of(x);
  const auto in = flashcheck::make_inputs(p, 1);
  const std::vector<float> g = dout_for(p);
  for (auto _ : state) benchmark::DoNotOptimize(flashcheck::naive_attention_backward(p, in, g).dq.data());
  state.counters["GFLOPS"] =
      benchmark::Counter(2.5 * p.flops(), benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

void forward(benchmark::State& state, Shape x) {
  const Problem p = problem_of(x);
  const auto in = flashcheck::make_inputs(p, 1);
  for (auto _ : state) benchmark::DoNotOptimize(flashcheck::naive_attention(p, in).o.data());
  state.counters["GFLOPS"] = benchmark::Counter(p.flops(), benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

std::vector<Shape> parse_shapes(const std::string& spec) {
  std::vector<Shape> out;
  std::stringstream all(spec);
  for (std::string one; std::getline(all, one, ';');) {
    Shape x{};
    char tail[16] = {};
    if (std::sscanf(one.c_str(), "%ld,%ld,%ld,%ld,%15s", &x.b, &x.h, &x.s, &x.d, tail) < 4)
      throw std::invalid_argument("bad --shapes entry '" + one + "': expected B,H,S,D[,causal|,wL:R]");
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
  std::string spec = "1,4,4096,128;1,4,4096,128,causal";
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strncmp(argv[i], "--shapes=", 9) == 0)
      spec = argv[i] + 9;
    else
      args.push_back(argv[i]);
  }
  for (const Shape& x : parse_shapes(spec)) {
    const std::string name = std::to_string(x.b) + "x" + std::to_string(x.h) + "x" + std::to_string(x.s) + "x" +
                             std::to_string(x.d) + (x.causal ? "_causal" : "") +
                             (x.window.none() ? "" : "_w" + std::to_string(x.window.left) + ":" + std::to_string(x.window.right));
    for (auto* b : {benchmark::RegisterBenchmark(("backward/" + name).c_str(), backward, x),
                    benchmark::RegisterBenchmark(("forward/" + name).c_str(), forward, x)})
      b->Unit(benchmark::kMillisecond)->MeasureProcessCPUTime()->UseRealTime()->ComputeStatistics("min", [](const std::vector<double>& v) {
        return *std::min_element(v.begin(), v.end());  // on a shared machine the least-disturbed run
      });
  }
  benchmark::AddCustomContext("openblas_core", openblas_get_corename());
  benchmark::AddCustomContext("omp_threads", std::to_string(omp_get_max_threads()));
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());
  if (benchmark::ReportUnrecognizedArguments(n, args.data())) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
