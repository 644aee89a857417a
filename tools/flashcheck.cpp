// flashcheck: the command line. Exit codes follow `git bisect run`: 0 pass, 1 mismatch, 125 cannot test.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>

#include "reference/naive.h"
#include "reference/replica.h"

namespace fc = flashcheck;

int main(int argc, char** argv) {
  CLI::App app{"flashcheck: reference-and-verification testbed for FlashAttention forward kernels"};
  app.require_subcommand(0, 1);  // no subcommand: the default job

  auto* oracle = app.add_subcommand("oracle", "evaluate the fp64 oracle for one problem and report its time");
  std::string problem_text = "b=1 h=8 s=1024 d=128 causal=none dtype=bf16";
  uint64_t input_seed = 1;
  oracle->add_option("--problem", problem_text, "problem, e.g. \"b=1 hq=8 hkv=2 sq=97 skv=113 d=128 causal=bottom_right dtype=bf16\"");
  oracle->add_option("--input-seed", input_seed, "seed of the portable input generator");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 125;
  }
  try {
    fc::Problem p = fc::parse_problem(problem_text);
    auto in = fc::make_inputs(p, input_seed);
    auto t0 = std::chrono::steady_clock::now();
    auto r = fc::naive_attention(p, in);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%s: fp64 oracle %.3f s, %.2f GFLOPS\n", fc::to_string(p).c_str(), s, p.flops() / s * 1e-9);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flashcheck: %s\n", e.what());
    return 125;
  }
}
