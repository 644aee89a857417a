// Which BLAS, which kernels, which block height: the fp64 oracle's two GEMM shapes timed on any
// CBLAS library loaded at run time (issue 11: the oracle must reach torch's CPU SDPA speed, and the
// answer depends on the machine's BLAS choices more than on our code).
//
//   blas_sweep --lib PATH [--seq 4096] [--dim 128] [--blocks 64,128,256,512] [--seconds 1.5]
//
// Every OpenMP thread runs the oracle's inner step on its own row block, independently, as the
// oracle does: S = Q·Kᵀ (rb × seq × dim, "NT") then O = S·V (rb × dim × seq, "NN"). Inside the
// parallel region the BLAS runs single-threaded (OpenBLAS's and BLIS's OpenMP builds both do), so
// this is the ceiling of the oracle's blocked design on this machine. One line per block height:
// GFLOPS over all threads (4·rb·seq·dim per step). OPENBLAS_CORETYPE and OMP_NUM_THREADS are read
// by the libraries themselves.
#include <dlfcn.h>
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "reference/rng.h"

namespace {

// The CBLAS enums have the same values in every implementation (the CBLAS standard fixes them).
constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;
using Dgemm = void (*)(int, int, int, int, int, int, double, const double*, int, const double*, int, double, double*, int);

std::vector<long> parse_list(const char* s) {
  std::vector<long> out;
  for (const char* p = s; *p;) {
    char* end = nullptr;
    const long v = std::strtol(p, &end, 10);
    if (end == p || v <= 0) {
      std::fprintf(stderr, "blas_sweep: bad number list '%s'\n", s);
      std::exit(2);
    }
    out.push_back(v);
    p = *end == ',' ? end + 1 : end;
  }
  return out;
}

std::string library_kernels(void* lib) {
  if (auto core = reinterpret_cast<const char* (*)()>(dlsym(lib, "openblas_get_corename"))) return std::string("OpenBLAS ") + core();
  auto query = reinterpret_cast<int (*)()>(dlsym(lib, "bli_arch_query_id"));
  auto name = reinterpret_cast<const char* (*)(int)>(dlsym(lib, "bli_arch_string"));
  if (query && name) return std::string("BLIS ") + name(query());
  return "unknown library";
}

}  // namespace

int main(int argc, char** argv) {
  const char* lib_path = nullptr;
  long seq = 4096, dim = 128;
  double seconds = 1.5;
  std::vector<long> blocks{64, 128, 256, 512};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--lib") lib_path = argv[i + 1];
    else if (a == "--seq") seq = std::atol(argv[i + 1]);
    else if (a == "--dim") dim = std::atol(argv[i + 1]);
    else if (a == "--seconds") seconds = std::atof(argv[i + 1]);
    else if (a == "--blocks") blocks = parse_list(argv[i + 1]);
    else {
      std::fprintf(stderr, "blas_sweep: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  if (!lib_path || seq <= 0 || dim <= 0 || seconds <= 0) {
    std::fprintf(stderr, "usage: blas_sweep --lib PATH [--seq N] [--dim D] [--blocks a,b,..] [--seconds S]\n");
    return 2;
  }
  void* lib = dlopen(lib_path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    std::fprintf(stderr, "blas_sweep: cannot load %s: %s\n", lib_path, dlerror());
    return 125;
  }
  auto dgemm = reinterpret_cast<Dgemm>(dlsym(lib, "cblas_dgemm"));
  if (!dgemm) {
    std::fprintf(stderr, "blas_sweep: %s has no cblas_dgemm\n", lib_path);
    return 125;
  }
  const int threads = omp_get_max_threads();
  std::printf("%s | %s | %d threads | seq %ld dim %ld\n", lib_path, library_kernels(lib).c_str(), threads, seq, dim);

  // Shared K and V (every thread reads them, as the oracle's tasks of one head do); random, never
  // zeros, which some kernels shortcut.
  const flashcheck::CounterRng rng(11, 0);
  std::vector<double> k(static_cast<size_t>(seq * dim)), v(static_cast<size_t>(seq * dim));
  for (size_t i = 0; i < k.size(); ++i) k[i] = rng.normal(i), v[i] = rng.normal(k.size() + i);
  for (const long rb : blocks) {
    double flops = 0;
    const auto t0 = std::chrono::steady_clock::now();
    double wall = 0;
#pragma omp parallel reduction(+ : flops)
    {
      std::vector<double> q(static_cast<size_t>(rb * dim)), s(static_cast<size_t>(rb * seq)), o(static_cast<size_t>(rb * dim));
      for (size_t i = 0; i < q.size(); ++i) q[i] = rng.normal(2 * k.size() + i);
      const auto start = std::chrono::steady_clock::now();
      while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < seconds) {
        dgemm(kRowMajor, kNoTrans, kTrans, int(rb), int(seq), int(dim), 0.088, q.data(), int(dim), k.data(), int(dim), 0.0, s.data(), int(seq));
        dgemm(kRowMajor, kNoTrans, kNoTrans, int(rb), int(dim), int(seq), 1.0, s.data(), int(seq), v.data(), int(dim), 0.0, o.data(), int(dim));
        flops += 4.0 * double(rb) * double(seq) * double(dim);
      }
    }
    wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("  rows %4ld: %8.1f GFLOPS\n", rb, flops / wall / 1e9);
  }
  return 0;
}
