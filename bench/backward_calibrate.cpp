// backward_calibrate: what correct backward kernels reach under the gradient criteria, per dtype
// (verify/TOLERANCE.md, "Backward"). Each case draws a problem with every variant in play
// (reference/random_variant_test_util.h, half of the dense ones widened to 300 rows and head dims
// up to 128), inputs from every finite distribution and a dO, and runs a "kernel": the forward and
// backward replicas with other tiles (4..128, as the tests' correct kernels), exp or exp2 and the −2^30 fill or −inf, against the
// judge's baseline (the default replicas) and the fp64 oracle. It prints per dtype the median, p99
// and max over every judged gradient of 1 − cosine, rel_l2, max|g − r| / max|baseline − r| and the
// k each case needs with the table's atol, then how many correct runs the current policy fails,
// with a reproducing line for the first few.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <span>
#include <tuple>
#include <string>
#include <vector>

#include "reference/random_variant_test_util.h"
#include "reference/rng.h"
#include "verify/backward_criteria.h"
#include "verify/backward_report.h"
#include "verify/criteria.h"
#include "verify/metrics.h"

using namespace flashcheck;

namespace {

Problem draw(std::mt19937_64& g, DType d) {
  Problem p = random_variant_problem_in(g, d);
  const bool dense = p.seqlens_q.empty() && p.seqlens_kv.empty() && p.seqused_kv.empty() && !p.paged();
  if (dense && g() % 2) {  // longer sums: the rounding of P and dS adds up over more terms
    p.seq_q = 1 + static_cast<int64_t>(g() % 300);
    p.seq_kv = 1 + static_cast<int64_t>(g() % 300);
    const int64_t dims[] = {16, 32, 40, 64, 96, 128};
    p.head_dim_qk = dims[g() % 6];
    p.head_dim_v = g() % 2 ? p.head_dim_qk : dims[g() % 6];
    if (!p.window.none()) p.window = {p.window.left < 0 ? -1 : static_cast<int64_t>(g() % 200), p.window.right < 0 ? -1 : static_cast<int64_t>(g() % 200)};
    p.scale.reset();
  }
  validate(p);
  return p;
}

struct Stat {
  std::vector<double> v;
  std::string worst;
  double max = -1;
  void add(double x, const std::string& where) {
    if (!std::isfinite(x)) return;
    v.push_back(x);
    if (x > max) max = x, worst = where;
  }
  std::string text() {
    if (v.empty()) return "n/a";
    std::sort(v.begin(), v.end());
    auto at = [&](double q) { return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))]; };
    char b[200];
    std::snprintf(b, sizeof b, "%.2g / %.2g / %.2g (worst: %s)", at(0.5), at(0.99), v.back(), worst.c_str());
    return b;
  }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Measure correct backward replicas against the gradient criteria (verify/TOLERANCE.md, Backward)"};
  int cases = 300;
  uint64_t seed = 3;
  std::vector<std::string> dtypes{"f32", "f16", "bf16", "e4m3", "e5m2"};
  app.add_option("--cases", cases, "problems per dtype")->check(CLI::Range(1, 1000000));
  app.add_option("--seed", seed, "seed of the draw");
  app.add_option("--dtype", dtypes, "input dtypes (f32, f16, bf16, e4m3, e5m2)");
  CLI11_PARSE(app, argc, argv);
  try {
    for (const std::string& dn : dtypes) {
      const DType d = parse_dtype(dn);
      std::mt19937_64 g(seed * 1000003 + static_cast<uint64_t>(d));
      std::map<std::string, Stat> stats;
      int failed = 0, judged = 0, noise = 0, unresolved = 0;
      for (int n = 0; n < cases; ++n) {
        const Problem p = draw(g, d);
        const uint64_t in_seed = g();
        const Dist dist = kAllDists[g() % std::size(kAllDists)];
        const Inputs in = make_inputs(p, in_seed, dist);
        const std::vector<float> dout = make_d_out(p, in_seed);
        const BackwardExpected ex = make_backward_expected(p, in, dout);
        const int64_t tiles[] = {4, 8, 16, 32, 64, 128};
        ReplicaConfig fc;
        fc.block_q = tiles[g() % 6], fc.block_kv = tiles[g() % 6];
        fc.use_exp2 = g() % 2, fc.finite_neg_inf = g() % 2;
        BackwardReplicaConfig bc;
        bc.block_q = tiles[g() % 6], bc.block_kv = tiles[g() % 6], bc.use_exp2 = g() % 2;
        const ReplicaResult fwd = replica_attention(p, in, fc);
        const ReplicaGradients k = replica_attention_backward(p, in, fwd.o, fwd.lse, dout, bc);
        const BackwardReport r = verify_backward(p, ex, {k.dq, k.dk, k.dv, p.sinks ? std::optional(k.dsinks) : std::nullopt});
        const std::string line = to_string(p) + " --dist " + std::string(to_string(dist)) + " --input-seed " + std::to_string(in_seed);
        const BackwardTolerance& tol = backward_tolerance_for(p.dtype);
        for (const GradientVerdict& v : r.gradients) {
          if (v.compared == 0) continue;
          ++judged;
          const std::string where = v.name + " of " + line;
          // cosine and rel_l2 where they are judged (not where the gradient cancels to noise)
          bool direction = false;
          for (const Criterion& c : v.criteria) direction |= c.name == "rel_l2" && c.role == Criterion::Role::judged;
          if (direction) {
            stats["1 - cosine"].add(1 - v.cosine, where);
            stats["rel_l2"].add(v.rel_l2, where);
          } else {
            ++noise;
          }
          if (v.baseline_max_abs > 0) stats["max_abs / baseline_max_abs"].add(v.max_abs / v.baseline_max_abs, where);
          stats["max_abs / max|r|"].add(v.max_ref > 0 ? v.max_abs / v.max_ref : 0, where);
          const double excess = v.max_abs - tol.baseline_atol * v.atol_ref;
          stats["k needed (with the atol)"].add(excess <= 0 ? 0 : v.baseline_max_abs > 0 ? excess / v.baseline_max_abs : INFINITY, where);
          if (v.name != "dsinks") stats["row_k needed (with the atol)"].add(v.row_k_needed, where);
          if (v.unresolved) ++unresolved;
        }
        // The ulp criterion (issue 23's "ULP fraction"), where it may judge: not cancelling to noise
        // (cosine judges), enough distinct pairs. What fixed limit each needs: its share unless the
        // 2x-baseline loosening already holds it.
        for (const GradientVerdict& v : r.gradients) {
          bool eligible = false;
          for (const Criterion& c : v.criteria) eligible |= c.name == "rel_l2" && c.role == Criterion::Role::judged;
          if (!eligible || v.ulp_distinct < static_cast<double>(kMinDistinctPairsUlp)) continue;
          const std::string where = v.name + " of " + line;
          stats["ulp: share"].add(v.ulp_share, where);
          stats["ulp: baseline's share"].add(v.ulp_baseline_share, where);
          stats["ulp: fixed limit needed"].add(v.ulp_share <= 2 * v.ulp_baseline_share ? 0.0 : v.ulp_share, where);
        }
        if (!r.pass()) {
          if (++failed <= 5) std::printf("  correct run failed: %s", to_text(r).c_str());
        }
      }
      std::printf("%s (%d cases, %d gradients judged, %d of them cancelling to noise, %d with unresolved rows): median / p99 / max\n",
                  dn.c_str(), cases, judged, noise, unresolved);
      for (auto& [name, s] : stats) std::printf("  %-28s %s\n", name.c_str(), s.text().c_str());
      std::printf("  correct runs the policy fails: %d of %d\n", failed, cases);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "backward_calibrate: %s\n", e.what());
    return 125;
  }
  return 0;
}
