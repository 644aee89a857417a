// The fp64 oracle's speed against raw BLAS fp64 GEMM on this machine (issue 11: oracle ≥ 0.9 × GEMM),
// and the same-dtype eager baseline that `check` computes beside it.
// FLOPs: 4·Sq·Skv·D per head (two GEMMs); the raw GEMM runs the same two products per head on whole
// matrices with OpenBLAS's own threading, the best case the oracle's blocked calls can approach.
//
//   oracle_bench [--shapes=B,H,S,D[,causal|,wL:R];...] [--compare-unsplit] [Google Benchmark flags]
// wL:R is a sliding window (left, right) (problem model 2): GFLOPS then count the visible pairs
// only, so a window's figure is comparable with the dense causal one (issue 20: a (1024, 0)
// window at Sq = 32768 ≥ 10× faster than dense causal, GFLOPS within 20%).
// Time is wall clock, CPU is the whole process's CPU time (all threads): on a shared machine
// flops / CPU time is the fairer per-core figure.
// Default shapes: 1,1,4096,128 and 1,4,4096,128 (the shape torch's CPU SDPA is timed on).
// A window shape with the dense causal shape of the same B,H,S,D in the same run ends with a
// summary line: the window's speed-up and its GFLOPS as a share of the dense causal figure (median
// and best of the runs by wall clock, and the median by process CPU time, which a shared machine's
// other jobs disturb less). --compare-unsplit also times the oracle with one GEMM over each block's
// whole strip (reference/strip_plan.h: StripSplit::none(), the oracle before the split) as
// oracle_unsplit/..., so before and after come from one binary, one host, interleaved.
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "reference/blas_core.h"
#include "reference/naive.h"
#include "reference/rng.h"
#include "reference/strip_plan.h"
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

// Wall and process CPU seconds of every iteration of every oracle benchmark, by name, for the
// closing summary. On a dedicated host the wall figures are the ones; on a shared one (other jobs
// taking the cores) the CPU figures follow the work more closely.
struct Seconds {
  std::vector<double> wall, cpu;
};
std::map<std::string, Seconds>& seconds_of() {
  static std::map<std::string, Seconds> m;
  return m;
}
double cpu_now() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

void oracle(benchmark::State& state, Shape x, const flashcheck::StripSplit* split, std::string name) {
  const Problem p = problem_of(x);
  const auto in = flashcheck::make_inputs(p, 1);
  const flashcheck::RowSet rows = flashcheck::RowSet::all(p);
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = cpu_now();
    benchmark::DoNotOptimize(flashcheck::naive_attention(p, in, rows, *split).o.data());
    seconds_of()[name].cpu.push_back(cpu_now() - c0);
    seconds_of()[name].wall.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  set_flops(state, p);
}

std::string shape_name(const Shape& x) {
  const bool windowed = !x.window.none();
  return std::to_string(x.b) + "x" + std::to_string(x.h) + "x" + std::to_string(x.s) + "x" + std::to_string(x.d) +
         (x.causal ? "_causal" : "") + (windowed ? "_w" + std::to_string(x.window.left) + ":" + std::to_string(x.window.right) : "");
}

// Issue 20's goals for each window shape against the dense causal shape of the same B,H,S,D:
// ≥ 10× faster, GFLOPS (visible pairs) within 20% of the dense figure. Median and best of the runs.
void summarize(const std::vector<Shape>& shapes, std::FILE* to) {
  auto stats = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return std::pair{v[v.size() / 2], v.front()};  // (median, best)
  };
  for (const Shape& w : shapes) {
    if (w.window.none()) continue;
    Shape c = w;
    c.window = {};
    c.causal = true;
    const auto dense = seconds_of().find("oracle/" + shape_name(c));
    if (dense == seconds_of().end()) continue;
    const auto [dmed, dbest] = stats(dense->second.wall);
    const double dcpu = stats(dense->second.cpu).first;
    const double dflops = problem_of(c).flops(), wflops = problem_of(w).flops();
    std::fprintf(to, "summary %s: dense causal %.3f s (%.1f GFLOPS), best %.3f s, CPU %.3f s\n", shape_name(c).c_str(), dmed,
                 dflops / dmed / 1e9, dbest, dcpu);
    for (const char* kind : {"oracle/", "oracle_unsplit/"}) {
      const auto win = seconds_of().find(kind + shape_name(w));
      if (win == seconds_of().end()) continue;
      const auto [wmed, wbest] = stats(win->second.wall);
      const double wcpu = stats(win->second.cpu).first;
      const double share = (wflops / wmed) / (dflops / dmed), share_best = (wflops / wbest) / (dflops / dbest);
      // The ≥ 10× goal is judged where the visible work is ≥ 12× less (at equal GFLOPS it could not
      // be met otherwise); the GFLOPS share everywhere.
      const double less = dflops / wflops, speedup = dmed / wmed;
      const std::string goal = less >= 12 ? std::string(" (goal >= 10x: ") + (speedup >= 10 ? "met)" : "missed)") : "";
      std::fprintf(to,
                   "summary %s%s: %.3f s (%.1f GFLOPS), %.1fx faster than dense causal for %.1fx less visible work%s, GFLOPS %.0f%% "
                   "of dense causal (goal >= 80%%: %s); best runs: %.1fx, %.0f%%; by process CPU time (median): %.0f%%\n",
                   kind, shape_name(w).c_str(), wmed, wflops / wmed / 1e9, speedup, less, goal.c_str(), 100 * share,
                   share >= 0.8 ? "met" : "missed", dbest / wbest, 100 * share_best, 100 * (wflops / wcpu) / (dflops / dcpu));
    }
  }
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
  bool unsplit = false, console = true;
  for (int i = 0; i < argc; ++i) {
    if (std::strncmp(argv[i], "--shapes=", 9) == 0)
      spec = argv[i] + 9;
    else if (std::strcmp(argv[i], "--compare-unsplit") == 0)
      unsplit = true;
    else
      args.push_back(argv[i]);
    if (std::strncmp(argv[i], "--benchmark_format=", 19) == 0) console = std::strcmp(argv[i] + 19, "console") == 0;
  }
  static const flashcheck::StripSplit none = flashcheck::StripSplit::none();
  const std::vector<Shape> shapes = parse_shapes(spec);
  for (const Shape& x : shapes) {
    const bool windowed = !x.window.none();
    const std::string name = shape_name(x);
    std::vector<benchmark::internal::Benchmark*> bs{
        benchmark::RegisterBenchmark(("oracle/" + name).c_str(), oracle, x, &flashcheck::StripSplit::oracle_default(), "oracle/" + name)};
    if (unsplit)
      bs.push_back(benchmark::RegisterBenchmark(("oracle_unsplit/" + name).c_str(), oracle, x, &none, "oracle_unsplit/" + name));
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
  benchmark::AddCustomContext("oracle_split_min_rows", std::to_string(flashcheck::StripSplit::oracle_default().min_rows));
  __builtin_cpu_init();
  benchmark::AddCustomContext("cpu_avx2_fma", __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? "yes" : "no");
  benchmark::AddCustomContext("cpu_avx512f", __builtin_cpu_supports("avx512f") ? "yes" : "no");
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());
  if (benchmark::ReportUnrecognizedArguments(n, args.data())) return 1;
  benchmark::RunSpecifiedBenchmarks();
  std::fflush(stdout);
  summarize(shapes, console ? stdout : stderr);  // JSON or CSV on stdout stays parseable
  benchmark::Shutdown();
  return 0;
}
