// Timing of decode_paged_f16 on the decode shapes of issue 22: B = 16, Hq = 32, Hkv = 8, a cache of
// 8192 keys per sequence, D = 128 bf16, pages of 64 (and 16, 256, a dense BHSD cache, 4 speculative
// queries), and B = 1 with a 128K cache, where split-KV matters. Each row: CUDA-event median and
// minimum of --iters launches after --warmup (runner/bench.h: the staged buffers of the harness,
// random inputs, the launch alone timed — split kernel, combine, workspace poisoning included),
// and the KV bytes read per launch (every used key's K and V row of every KV head) over the median.
// mma_f16 (the FA2 forward kernel, dense caches only) is timed beside it on the dense shapes.
//
//   decode_bench [--warmup 10] [--iters 30] [--quick]     (--quick: the two issue shapes only)
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "reference/problem.h"
#include "runner/bench.h"
#include "runner/device.h"
#include "runner/registry.h"

namespace {

using namespace flashcheck;

// A decode problem of B sequences with `cache` keys each, Sq queries, bottom-right causal (the last
// query sees the whole cache); page 0: a dense BHSD cache.
Problem decode_problem(int64_t b, int64_t hq, int64_t hkv, int64_t sq, int64_t cache, int64_t d, int64_t page,
                       PageOrder order) {
  Problem p;
  p.batch = b;
  p.heads_q = hq;
  p.heads_kv = hkv;
  p.seq_q = sq;
  p.seq_kv = cache;
  p.head_dim_qk = p.head_dim_v = d;
  p.causal = Causal::bottom_right;
  p.dtype = DType::bf16;
  if (page > 0) {
    p.page_size = page;
    p.page_order = order;
    p.seqlens_kv.assign(static_cast<size_t>(b), cache);
  }
  normalize(p);
  validate(p);
  return p;
}

// K and V bytes of every used key of every KV head: what a decode kernel must read at least once.
double kv_bytes(const Problem& p) {
  double keys = 0;
  for (int64_t b = 0; b < p.batch; ++b) keys += static_cast<double>(p.skv(b));
  return keys * static_cast<double>(p.heads_kv) * static_cast<double>(p.head_dim_qk + p.head_dim_v) *
         static_cast<double>(dtype_bytes(p.dtype));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"decode_paged_f16 on issue 22's decode shapes: ms and TB/s of KV read"};
  int warmup = 10, iters = 30;
  bool quick = false;
  app.add_option("--warmup", warmup, "untimed launches first")->check(CLI::NonNegativeNumber);
  app.add_option("--iters", iters, "timed launches (the median is reported)")->check(CLI::Range(1, 100000));
  app.add_flag("--quick", quick, "only the two shapes of the issue (B=16 cache 8192 page 64; B=1 cache 128K page 64)");
  CLI11_PARSE(app, argc, argv);
  if (auto why = device::unavailable()) {
    std::fprintf(stderr, "decode_bench: %s\n", why->c_str());
    return 125;
  }
  const std::shared_ptr<Variant> decode = Registry::builtin().find("decode_paged_f16");
  const std::shared_ptr<Variant> mma = Registry::builtin().find("mma_f16");
  if (!decode) {
    std::fprintf(stderr, "decode_bench: decode_paged_f16 is not in this build\n");
    return 125;
  }
  struct Shape {
    std::string name;
    Problem p;
    bool with_mma;
  };
  std::vector<Shape> shapes{
      {"B16 cache8192 page64", decode_problem(16, 32, 8, 1, 8192, 128, 64, PageOrder::shuffled), false},
      {"B1 cache131072 page64", decode_problem(1, 32, 8, 1, 131072, 128, 64, PageOrder::shuffled), false},
  };
  if (!quick) {
    shapes.push_back({"B16 cache8192 page16", decode_problem(16, 32, 8, 1, 8192, 128, 16, PageOrder::shuffled), false});
    shapes.push_back({"B16 cache8192 page256", decode_problem(16, 32, 8, 1, 8192, 128, 256, PageOrder::shuffled), false});
    shapes.push_back({"B16 cache8192 dense", decode_problem(16, 32, 8, 1, 8192, 128, 0, PageOrder::identity), true});
    shapes.push_back({"B16 cache8192 page64 sq4", decode_problem(16, 32, 8, 4, 8192, 128, 64, PageOrder::shuffled), false});
    shapes.push_back({"B1 cache131072 dense", decode_problem(1, 32, 8, 1, 131072, 128, 0, PageOrder::identity), true});
  }
  std::printf("device: %s\n", device::name().c_str());
  std::printf("%-28s %-10s %9s %9s %8s %8s  %s\n", "shape", "kernel", "median_ms", "min_ms", "KV_GB", "TB/s", "problem");
  int rc = 0;
  for (const Shape& s : shapes) {
    std::vector<std::shared_ptr<Variant>> kernels{decode};
    if (s.with_mma && mma) kernels.push_back(mma);
    for (const auto& v : kernels) {
      try {
        const BenchResult r = bench_variant(*v, s.p, warmup, iters);
        const double gb = kv_bytes(s.p) * 1e-9;
        std::printf("%-28s %-10s %9.4f %9.4f %8.3f %8.3f  %s\n", s.name.c_str(), v->name() == "decode_paged_f16" ? "decode" : v->name().c_str(),
                    r.median_ms, r.min_ms, gb, gb / r.median_ms, to_string(s.p).substr(0, 90).c_str());
      } catch (const std::exception& e) {
        std::printf("%-28s %-10s error: %s\n", s.name.c_str(), v->name().c_str(), e.what());
        rc = 1;
      }
      std::fflush(stdout);
    }
  }
  return rc;
}
