// A built-in kernel's backward pass timed on issue 23's shapes: bf16 (1,16,4096,128) and
// (4,16,8192,128), causal and not (and D = 64 beside them). Each row: CUDA-event median and
// minimum of --iters backward calls after --warmup, on random normal inputs (never zeros) with O
// and LSE from the kernel's own forward, and TFLOPS counting the backward as 2.5× the forward's
// FLOPs over the visible pairs (Problem::flops), the convention of FlashAttention's papers and of
// the anchors (SDPA flash 285 / 214 TFLOPS on an H100). The forward is timed beside it.
//
//   kernel_backward_bench [--kernel mma_f16] [--warmup 5] [--iters 20] [--shapes B,H,S,D[,causal];...]
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "reference/dtype.h"
#include "reference/problem.h"
#include "runner/contiguous_args.h"
#include "runner/device.h"

namespace {

using namespace flashcheck;

struct Buffer {
  void* p;
  explicit Buffer(size_t bytes) : p(device::alloc(bytes)) {}
  ~Buffer() { device::free(p); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
};

// N(0,1) bf16 bits, uploaded.
std::unique_ptr<Buffer> random_bf16(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd;
  std::vector<uint16_t> h(static_cast<size_t>(n));
  for (auto& x : h) x = f32_to_bf16_bits(nd(rng));
  auto b = std::make_unique<Buffer>(h.size() * 2);
  device::to_device(b->p, h.data(), h.size() * 2);
  return b;
}

double median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"a built-in kernel's backward pass: ms and TFLOPS (2.5x the forward's FLOPs)"};
  std::string kernel = "mma_f16", shapes = "1,16,4096,128;1,16,4096,128,causal;4,16,8192,128;4,16,8192,128,causal;"
                                            "1,16,4096,64;1,16,4096,64,causal";
  int warmup = 5, iters = 20;
  app.add_option("--kernel", kernel, "a built-in kernel with a backward pass");
  app.add_option("--shapes", shapes, "B,H,S,D[,causal] separated by ';' (bf16, Hq = Hkv, Sq = Skv)");
  app.add_option("--warmup", warmup, "untimed calls first")->check(CLI::NonNegativeNumber);
  app.add_option("--iters", iters, "timed calls (the median is reported)")->check(CLI::Range(1, 100000));
  CLI11_PARSE(app, argc, argv);
  if (auto why = device::unavailable()) {
    std::fprintf(stderr, "kernel_backward_bench: %s\n", why->c_str());
    return 125;
  }
  const KernelDef* def = nullptr;
  for (const KernelDef& d : registered_kernels())
    if (d.name == kernel) def = &d;
  if (!def || !def->backward) {
    std::fprintf(stderr, "kernel_backward_bench: %s is not a built-in kernel with a backward pass\n", kernel.c_str());
    return 125;
  }
  // The default mode (atomics allowed), and beside it the deterministic mode where the kernel has one.
  const bool has_det = def->backward_caps.deterministic;
  std::printf("%-26s %10s %10s %9s %10s %9s %9s %9s\n", "shape (bf16)", "fwd ms", "fwd TF", "bwd ms", "bwd min", "bwd TF", "det ms",
              "det TF");
  std::stringstream list(shapes);
  std::string item;
  uint64_t seed = 1;
  while (std::getline(list, item, ';')) {
    if (item.empty()) continue;
    Problem p;
    std::vector<std::string> f;
    std::stringstream fs(item);
    for (std::string x; std::getline(fs, x, ',');) f.push_back(x);
    if (f.size() < 4 || f.size() > 5 || (f.size() == 5 && f[4] != "causal")) {
      std::fprintf(stderr, "kernel_backward_bench: bad shape '%s' (B,H,S,D[,causal])\n", item.c_str());
      return 125;
    }
    p.batch = std::stoll(f[0]);
    p.heads_q = p.heads_kv = std::stoll(f[1]);
    p.seq_q = p.seq_kv = std::stoll(f[2]);
    p.head_dim_qk = p.head_dim_v = std::stoll(f[3]);
    p.causal = f.size() == 5 ? Causal::bottom_right : Causal::none;
    p.dtype = DType::bf16;
    validate(p);
    auto q = random_bf16(p.q_elems(), ++seed), k = random_bf16(p.k_elems(), ++seed), v = random_bf16(p.v_elems(), ++seed);
    auto dout = random_bf16(p.o_elems(), ++seed);
    Buffer o(static_cast<size_t>(p.o_elems()) * 2), lse(static_cast<size_t>(p.batch * p.heads_q * p.seq_q) * 4);
    Buffer dq(static_cast<size_t>(p.q_elems()) * 2), dk(static_cast<size_t>(p.k_elems()) * 2), dv(static_cast<size_t>(p.v_elems()) * 2);
    const KernelArgs a = contiguous_kernel_args(p, q->p, k->p, v->p, o.p, lse.p, device::stream());
    BackwardArgs g = contiguous_backward_args(p, dout->p, dq.p, dk.p, dv.p);
    BackwardArgs gd = g;
    gd.deterministic = true;
    std::vector<float> fwd, bwd, det;
    for (int i = 0; i < warmup + iters; ++i) {
      const float f = device::time_ms([&] { def->launch2(p, a); });
      const float b = device::time_ms([&] { def->backward(p, a, g); });
      const float d = has_det ? device::time_ms([&] { def->backward(p, a, gd); }) : 0.0f;
      if (i >= warmup) fwd.push_back(f), bwd.push_back(b), det.push_back(d);
    }
    const double flops = p.flops();
    std::printf("%-26s %10.3f %10.1f %9.3f %10.3f %9.1f %9.3f %9.1f\n", item.c_str(), median(fwd), flops / median(fwd) / 1e9,
                median(bwd), *std::min_element(bwd.begin(), bwd.end()), 2.5 * flops / median(bwd) / 1e9, median(det),
                has_det ? 2.5 * flops / median(det) / 1e9 : 0.0);
  }
  return 0;
}
