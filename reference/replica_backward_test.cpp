// The backward replica (reference/replica_backward.h) against the fp64 backward oracle over fresh
// random problems of every variant and dtype, its exact zeros, and its determinism.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "reference/backward_test_util.h"
#include "reference/mask.h"
#include "reference/naive_backward.h"
#include "reference/replica.h"
#include "reference/replica_backward.h"
#include "reference/sequences.h"
#include "testing/test_seed.h"

namespace flashcheck {
namespace {

// A backward case: inputs, dO in the output dtype, and the forward replica's O and LSE (what a
// kernel's backward is handed).
struct BackwardCase {
  Problem p;
  uint64_t seed = 0;
  Inputs in;
  std::vector<float> dout;
  ReplicaResult fwd;
};
BackwardCase make_case(const Problem& p, uint64_t seed, Dist dist = Dist::normal) {
  BackwardCase c{p, seed, make_inputs(p, seed, dist), random_dout(p, seed), {}};
  round_all(c.dout, p.o_dtype());
  c.fwd = replica_attention(p, c.in);
  return c;
}

ReplicaGradients replica_of(const BackwardCase& c, const BackwardReplicaConfig& cfg = {}) {
  return replica_attention_backward(c.p, c.in, c.fwd.o, c.fwd.lse, c.dout, cfg);
}

// How far the replica may be from the truth, per gradient: max|g − r| ≤ allowance·u·max(max|r|, F),
// u the gradient dtype's unit roundoff. F is the size of the terms the gradient sums, from the inputs
// alone: with A = max_i ‖dO_i‖₁ · max|v| bounding every |dP_ij| and |D_i|, dQ sums P·(dP − D)·k·scale
// (F = |scale|·max|k|·A), dK the same with q, dV sums P·dO (F = max|dO|), the sinks' gradient P·D
// over a head's rows (F = A·rows). F matters where the gradient cancels: with one visible key P = 1
// and dS = P·(dP − D) is exactly 0 in the truth, while fp32 leaves dP − D at a few ulp of A. The
// replica's own errors are P and dS rounded (u each), D from the rounded O, the output's rounding
// and fp32 sums; in f32, which rounds nothing else, P's error grows with the largest score in the
// exponent's units (|s|·log2 e·2^-24: a softcap of 30 puts it near 43). fp8 problems compute in
// bf16/f16 but take the O of an fp8 forward, whose P was rounded to fp8 (2^-4, 2^-3): D = dO·O
// carries that, so their factor is larger. Calibrated
// (2026-11-26, seeds 1-40 × 60 problems per dtype, default tiles): the worst run used 0.21 of it for f32, 0.17
// for f16 and bf16, 0.23 for fp8 (the test prints the share it used).
double allowance(DType input) {
  if (input == DType::f32) return 256;
  return is_fp8(input) ? 128 : 8;
}

struct Scales {
  double dq = 0, dk = 0, dv = 0, dsinks = 0;
};
Scales term_scales(const Problem& p, const Inputs& in, const std::vector<float>& dout) {
  auto max_abs = [](const std::vector<float>& x, double mul) {
    double m = 0;
    for (float v : x) m = std::max(m, std::fabs(static_cast<double>(v)) * mul);
    return m;
  };
  auto max_descale = [](const std::vector<float>& d) {
    double m = 1;
    if (!d.empty()) m = *std::max_element(d.begin(), d.end());
    return m;
  };
  const double q = max_abs(in.q, max_descale(in.descale_q)), k = max_abs(in.k, max_descale(in.descale_k)),
               v = max_abs(in.v, max_descale(in.descale_v));
  double row1 = 0;
  for (size_t r = 0; r * static_cast<size_t>(p.head_dim_v) < dout.size(); ++r) {
    double s = 0;
    for (int64_t c = 0; c < p.head_dim_v; ++c) s += std::fabs(dout[r * static_cast<size_t>(p.head_dim_v) + static_cast<size_t>(c)]);
    row1 = std::max(row1, s);
  }
  const double a = row1 * v, scale = std::fabs(p.softmax_scale());
  return {scale * k * a, scale * q * a, max_abs(dout, 1), a * static_cast<double>(p.total_q())};
}

// Checks one gradient against its oracle; returns the share of the allowance it used.
template <typename O>
double expect_close(const char* name, const std::vector<float>& g, const O& r, DType input, DType gd, double terms) {
  EXPECT_EQ(g.size(), r.size()) << name;
  double dmax = 0, rmax = 0;
  for (size_t e = 0; e < g.size() && e < r.size(); ++e) {
    dmax = std::max(dmax, std::fabs(static_cast<double>(g[e]) - r[e]));
    rmax = std::max(rmax, std::fabs(static_cast<double>(r[e])));
  }
  const double limit = allowance(input) * unit_roundoff(gd) * std::max(rmax, terms);
  if (limit == 0) {
    EXPECT_EQ(dmax, 0) << name;
    return 0;
  }
  EXPECT_LE(dmax, limit) << name << ": max|g - r| " << dmax << " past " << limit << " (max|r| " << rmax << ", terms " << terms << ")";
  return dmax / limit;
}

TEST(ReplicaBackward, MatchesTheOracleInEveryDtypeAndVariant) {
  std::mt19937_64 g(testing::seed_for(2301));
  for (DType d : {DType::f32, DType::f16, DType::bf16, DType::e4m3, DType::e5m2}) {
    double worst = 0;
    for (int n = 0; n < 150; ++n) {
      const Problem p = random_variant_problem_in(g, d);
      const uint64_t seed = g();
      const Dist dist = n % 2 ? Dist::uniform : Dist::normal;
      // Tiles smaller than these sequences (up to 20), so the blocked sums are exercised.
      BackwardReplicaConfig cfg;
      cfg.block_q = 1 + static_cast<int64_t>(g() % 16), cfg.block_kv = 1 + static_cast<int64_t>(g() % 16);
      cfg.use_exp2 = g() % 2;
      SCOPED_TRACE(describe(p, seed) + " --dist " + std::string(to_string(dist)) + " tiles " + std::to_string(cfg.block_q) + "x" +
                   std::to_string(cfg.block_kv) + (cfg.use_exp2 ? " exp2" : " exp"));
      const BackwardCase c = make_case(p, seed, dist);
      const ReplicaGradients r = replica_of(c, cfg);
      const BackwardResult o = naive_attention_backward(p, c.in, c.dout);
      const DType gd = gradient_dtype(p);
      const Scales f = term_scales(p, c.in, c.dout);
      worst = std::max(worst, expect_close("dq", r.dq, o.dq, d, gd, f.dq));
      worst = std::max(worst, expect_close("dk", r.dk, o.dk, d, gd, f.dk));
      worst = std::max(worst, expect_close("dv", r.dv, o.dv, d, gd, f.dv));
      if (p.sinks) worst = std::max(worst, expect_close("dsinks", r.dsinks, o.dsinks, d, gd, f.dsinks));
      if (HasFailure()) return;
    }
    std::printf("%s: worst share of the allowance used: %.3f\n", std::string(to_string(d)).c_str(), worst);
  }
}

// The allowance is not vacuous: each deliberate fault, and P left unrounded in a 16-bit problem
// whose scores are spread, lands past it on some problem.
TEST(ReplicaBackward, TheAllowanceSeesEachFault) {
  std::mt19937_64 g(testing::seed_for(2302));
  for (BackwardFault f : {BackwardFault::dq_unscaled, BackwardFault::dk_not_summed, BackwardFault::softcap_derivative_dropped}) {
    bool seen = false;
    double most = 0;
    for (int n = 0; n < 200 && !seen; ++n) {
      Problem p = random_variant_problem_in(g, DType::bf16);
      if (f == BackwardFault::dk_not_summed && p.group() == 1) continue;
      if (f == BackwardFault::softcap_derivative_dropped) p.softcap = 0.5;  // a cap the scores reach
      const BackwardCase c = make_case(p, g());
      BackwardReplicaConfig cfg;
      cfg.fault = f;
      const ReplicaGradients r = replica_of(c, cfg);
      const BackwardResult o = naive_attention_backward(p, c.in, c.dout);
      const Scales sc = term_scales(p, c.in, c.dout);
      for (auto [got, want, terms] : {std::tuple{&r.dq, &o.dq, sc.dq}, {&r.dk, &o.dk, sc.dk}}) {
        double d = 0, big = 0;
        for (size_t e = 0; e < got->size(); ++e) {
          d = std::max(d, std::fabs((*got)[e] - (*want)[e]));
          big = std::max(big, std::fabs((*want)[e]));
        }
        const double ratio = d / (allowance(DType::bf16) * unit_roundoff(DType::bf16) * std::max(big, terms));
        most = std::max(most, ratio);
        seen |= ratio > 1;
      }
    }
    EXPECT_TRUE(seen) << "fault " << static_cast<int>(f) << " never left the allowance (at most " << most << " of it)";
  }
}

// Rows with no visible key have dQ exactly 0 and keys no row sees have dK = dV = 0, in any dtype.
TEST(ReplicaBackward, EmptyRowsAndUnseenKeysGetExactZeros) {
  std::mt19937_64 g(testing::seed_for(2303));
  int64_t empty_rows = 0, unseen_keys = 0;
  for (int n = 0; n < 150; ++n) {
    const Problem p = random_variant_problem_in(g, static_cast<DType>(g() % 5));
    const uint64_t seed = g();
    SCOPED_TRACE(describe(p, seed));
    const BackwardCase c = make_case(p, seed);
    const ReplicaGradients r = replica_of(c);
    const Sequences s(p);
    for (int64_t b = 0; b < p.batch; ++b) {
      std::vector<char> seen(static_cast<size_t>(s.skv(b)), 0);
      for (int64_t i = 0; i < s.sq(b); ++i) {
        const KeyRange v = visible_range(p, b, i);
        for (int64_t j = v.lo; j < v.hi; ++j) seen[static_cast<size_t>(j)] = 1;
        if (!v.empty()) continue;
        for (int64_t h = 0; h < p.heads_q; ++h, ++empty_rows)
          for (int64_t x = 0; x < p.head_dim_qk; ++x) ASSERT_EQ(r.dq[static_cast<size_t>(s.q_row(b, h, i) + x)], 0.0f);
      }
      for (int64_t j = 0; j < s.skv(b); ++j) {
        if (seen[static_cast<size_t>(j)]) continue;
        for (int64_t hk = 0; hk < p.heads_kv; ++hk, ++unseen_keys) {
          for (int64_t x = 0; x < p.head_dim_qk; ++x) ASSERT_EQ(r.dk[static_cast<size_t>(s.k_row(b, hk, j) + x)], 0.0f);
          for (int64_t x = 0; x < p.head_dim_v; ++x) ASSERT_EQ(r.dv[static_cast<size_t>(s.v_row(b, hk, j) + x)], 0.0f);
        }
      }
    }
  }
  EXPECT_GT(empty_rows, 0) << "no problem drew a row that sees no key";
  EXPECT_GT(unseen_keys, 0) << "no problem drew a key no row sees";
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// Bitwise the same on 1 thread and on several, and on a second run: every sum has one owner and a
// fixed order (dQ over KV tiles ascending, dK/dV over the group's heads ascending).
TEST(ReplicaBackward, IsBitwiseDeterministic) {
  std::mt19937_64 g(testing::seed_for(2304));
  const int threads = omp_get_max_threads();
  for (int n = 0; n < 40; ++n) {
    Problem p = random_variant_problem_in(g, static_cast<DType>(g() % 5));
    p.heads_kv = 2, p.heads_q = 2 * static_cast<int64_t>(1 + g() % 3);  // several tasks, GQA groups
    validate(p);
    const uint64_t seed = g();
    SCOPED_TRACE(describe(p, seed));
    const BackwardCase c = make_case(p, seed);
    BackwardReplicaConfig cfg;
    cfg.block_q = 1 + static_cast<int64_t>(g() % 8), cfg.block_kv = 1 + static_cast<int64_t>(g() % 8);
    omp_set_num_threads(1);
    const ReplicaGradients one = replica_of(c, cfg);
    omp_set_num_threads(std::max(threads, 4));
    const ReplicaGradients many = replica_of(c, cfg), again = replica_of(c, cfg);
    omp_set_num_threads(threads);
    for (const ReplicaGradients* x : {&many, &again}) {
      EXPECT_TRUE(same_bits(one.dq, x->dq)) << "dq";
      EXPECT_TRUE(same_bits(one.dk, x->dk)) << "dk";
      EXPECT_TRUE(same_bits(one.dv, x->dv)) << "dv";
      EXPECT_TRUE(same_bits(one.dsinks, x->dsinks)) << "dsinks";
    }
    if (HasFailure()) return;
  }
}

// The same on problems large enough to run their KV heads in parallel (small ones run on one
// thread: replica_backward.cpp).
TEST(ReplicaBackward, IsBitwiseDeterministicInParallel) {
  std::mt19937_64 g(testing::seed_for(2306));
  const int threads = omp_get_max_threads();
  for (const char* line : {"b=2 hq=4 hkv=2 sq=300 skv=260 dqk=64 dv=32 causal=bottom_right dtype=bf16 softcap=20 sinks=1",
                           "b=3 hq=2 hkv=2 sq=170 skv=190 dqk=32 dv=64 causal=none dtype=f16 window=40,7 alibi=symmetric"}) {
    const Problem p = parse_problem(line);
    const uint64_t seed = g();
    SCOPED_TRACE(describe(p, seed));
    const BackwardCase c = make_case(p, seed);
    BackwardReplicaConfig cfg;
    cfg.block_q = 64, cfg.block_kv = 32;
    omp_set_num_threads(1);
    const ReplicaGradients one = replica_of(c, cfg);
    omp_set_num_threads(std::max(threads, 4));
    const ReplicaGradients many = replica_of(c, cfg);
    omp_set_num_threads(threads);
    EXPECT_TRUE(same_bits(one.dq, many.dq)) << "dq";
    EXPECT_TRUE(same_bits(one.dk, many.dk)) << "dk";
    EXPECT_TRUE(same_bits(one.dv, many.dv)) << "dv";
    EXPECT_TRUE(same_bits(one.dsinks, many.dsinks)) << "dsinks";
  }
}

TEST(ReplicaBackward, RefusesMismatchedSizesNamingTheTensor) {
  std::mt19937_64 g(testing::seed_for(2305));
  Problem p = random_variant_problem_in(g, DType::bf16);
  while (p.o_elems() == 0) p = random_variant_problem_in(g, DType::bf16);
  const BackwardCase c = make_case(p, g());
  std::vector<float> short_do(c.dout.begin(), c.dout.end() - 1);
  try {
    replica_attention_backward(p, c.in, c.fwd.o, c.fwd.lse, short_do);
    FAIL() << "a short dO was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("dO"), std::string::npos) << e.what();
  }
  BackwardReplicaConfig cfg;
  cfg.block_kv = 0;
  EXPECT_THROW(replica_of(c, cfg), std::invalid_argument);
}

}  // namespace
}  // namespace flashcheck
