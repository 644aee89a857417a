// `flashcheck calibrate` (evidence for the tolerance table) and `flashcheck oracle` (one problem).
#include <chrono>
#include <cstdio>
#include <iostream>

#include <omp.h>

#include "reference/blas_core.h"
#include "reference/naive.h"
#include "tools/commands.h"
#include "tools/strict_options.h"
#include "runner/calibrate.h"

namespace flashcheck::cli {

void add_calibrate(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("calibrate", "measure error distributions of correct implementations per dtype");
  auto cases = std::make_shared<int64_t>(300);
  auto seed = std::make_shared<uint64_t>(1);
  cmd->add_option("--cases", *cases, "problems per dtype")->check(whole_number(1, 1000000000));
  cmd->add_option("--seed", *seed, "campaign seed")->check(whole_number(0, ~uint64_t{0}));
  auto boundary = std::make_shared<bool>(false);
  cmd->add_flag("--boundary-aware", *boundary,
                "draw as campaigns do (tile-boundary lengths, hostile values often) instead of the uniform draw of TOLERANCE.md");
  auto dtypes = std::make_shared<std::vector<std::string>>();
  cmd->add_option("--dtype", *dtypes, "only these dtypes (f32, f16, bf16, e4m3, e5m2); default: all");
  cmd->callback([=, &action] {
    action = [=] {
      std::vector<DType> ds;
      for (const auto& d : *dtypes) ds.push_back(parse_dtype(d));
      if (ds.empty()) calibrate(*cases, *seed, std::cout, *boundary);  // every dtype (runner/calibrate.h)
      else calibrate(*cases, *seed, std::cout, *boundary, ds);
      return 0;
    };
  });
}

void add_oracle(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("oracle", "evaluate the fp64 oracle for one problem and report its speed");
  auto problem = std::make_shared<std::string>("b=1 h=8 s=1024 d=128 causal=none dtype=bf16");
  auto seed = std::make_shared<uint64_t>(1);
  cmd->add_option("--problem", *problem, "e.g. \"b=1 hq=8 hkv=2 sq=97 skv=113 d=128 causal=bottom_right dtype=bf16\"");
  cmd->add_option("--input-seed", *seed, "seed of the portable input generator")->check(whole_number(0, ~uint64_t{0}));
  cmd->callback([=, &action] {
    action = [=] {
      const Problem p = parse_problem(*problem);
      const Inputs in = make_inputs(p, *seed);
      const auto t0 = std::chrono::steady_clock::now();
      const OracleResult r = naive_attention(p, in);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("%s: fp64 oracle %.3f s, %.2f GFLOPS, lse[0] = %.17g (OpenBLAS %s kernels, %d threads)\n", to_string(p).c_str(), s,
                  p.flops() / s * 1e-9, r.lse[0], blas_core().c_str(), omp_get_max_threads());
      return 0;
    };
  });
}

}  // namespace flashcheck::cli
