// The GPU backward oracle against the CPU one: naive_attention_backward_gpu gives
// naive_attention_backward's dQ, dK, dV and sinks' gradient to fp64 rounding on every variant
// (window, softcap, ALiBi, sinks, GQA, Dqk ≠ Dv, varlen, paged, fp8), the same zeros (rows that see
// nothing, keys nobody sees), the same NaN/Inf positions for non-finite inputs, the same result
// split into many pieces, and the same bits when called twice. Skipped without a GPU; the emulated
// build (reference/gpu_oracle/emulation) runs the same kernels on the host with fewer, smaller cases.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>

#include "reference/backward_test_util.h"
#include "reference/gpu_oracle.h"
#include "reference/gpu_oracle/detail.h"
#include "reference/gpu_oracle_test_util.h"
#include "reference/inputs.h"
#include "reference/naive_backward.h"
#include "reference/sequences.h"
#include "testing/test_seed.h"

namespace flashcheck {
namespace {

using namespace gpu_oracle_test;

struct Case {
  Problem p;
  Inputs in;
  std::vector<float> d_out;
  std::string what;
};

// random_variant_problem's mix (every variant, lengths 0..20, D ≤ 32), stretched now and then so
// that rows span several 64-row tiles and keys several 64-key tiles, with head dims up to 256.
Case draw_case(uint64_t seed, bool poison) {
  std::mt19937_64 g(seed);
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(g); };
  Case c;
  c.p = random_variant_problem(g);
  const int64_t stretch = pick(0, 1) ? pick(1, kEmulated ? 5 : 14) : 1;
  if (stretch > 1 || (!kEmulated && pick(0, 3) == 0)) {
    Problem q = stretched(c.p, stretch);
    if (!kEmulated && pick(0, 3) == 0) {
      q.head_dim_qk = 8 * pick(1, 32);
      q.head_dim_v = pick(0, 1) ? q.head_dim_qk : 8 * pick(1, 32);
    }
    normalize(q);
    try {
      validate(q);
      c.p = q;
    } catch (const InvalidProblem&) {
    }
  }
  const Dist dist = kAllDists[g() % std::size(kAllDists)];
  const uint64_t input_seed = g();
  c.in = make_inputs(c.p, input_seed, dist);
  c.d_out = random_dout(c.p, input_seed ^ 0xd0);
  std::ostringstream what;
  what << "case seed " << seed << ": --problem \"" << to_string(c.p) << "\" --dist " << to_string(dist) << " --input-seed "
       << input_seed;
  if (poison) {
    const float bad[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                         -std::numeric_limits<float>::infinity()};
    std::vector<float>* tensors[] = {&c.in.q, &c.in.k, &c.in.v, &c.d_out};
    const int count = static_cast<int>(pick(1, 3));
    for (int i = 0; i < count; ++i) {
      std::vector<float>& x = *tensors[pick(0, 3)];
      if (!x.empty()) x[static_cast<size_t>(pick(0, static_cast<int64_t>(x.size()) - 1))] = bad[pick(0, 2)];
    }
    what << " with " << count << " non-finite values planted";
  }
  c.what = what.str();
  return c;
}

// How far apart two fp64 computations of the same gradient may lie: summation orders differ, and
// with large scores (|t| up to M) every exp(t − m) moves by up to ~M·2^-52 relative. Per gradient
// row of `width` elements: 1e-11·(1 + M)·(the row's largest magnitude, floored at 1e-3 of the
// tensor's), and never below 1e-13·(1 + M)·(the size of the terms the gradient sums), so a row
// that cancels to rounding noise (equal scores: dS sums to 0) is not held to its own noise. A wrong
// mask, tile or sum is off by the row's whole size. A row that must be exactly 0 (it sees nothing;
// a key nobody sees) is held to this too: the CPU may also cancel to exactly 0 by luck, and the
// GPU's exp floor leaves dust of e^−709.78 where the CPU's weights underflow.
struct Agreement {
  double worst_ratio = 0;
  std::string failure;
};

// Largest finite row norm of rows of d elements.
double max_norm(const std::vector<float>& x, int64_t d) {
  double m = 0;
  for (size_t r = 0; r + static_cast<size_t>(d) <= x.size(); r += static_cast<size_t>(d)) {
    double t = 0;
    for (int64_t c = 0; c < d; ++c) t += static_cast<double>(x[r + static_cast<size_t>(c)]) * x[r + static_cast<size_t>(c)];
    if (std::isfinite(t)) m = std::max(m, std::sqrt(t));
  }
  return m;
}

double max_descale(const Inputs& in) {
  double descale = 1;
  for (const auto* v : {&in.descale_q, &in.descale_k, &in.descale_v})
    for (float x : *v) descale = std::max(descale, static_cast<double>(x));
  return descale;
}

// The size of the terms each gradient sums: |dP|, |D| ≤ A = max‖dO‖·max‖v‖; dQ_i sums
// |scale|·|dS_ij|·‖k_j‖ with Σ_j |dS_ij| ≤ 2A; dK_j and dV_j sum over up to R rows (a key's whole
// query group), the sinks' gradient P_sink·|D| over every row of a head.
struct Terms {
  double dq = 0, dk = 0, dv = 0, dsinks = 0;
};
Terms terms(const Problem& p, const Inputs& in, const std::vector<float>& d_out) {
  const double ds = max_descale(in), a = max_norm(d_out, p.head_dim_v) * max_norm(in.v, p.head_dim_v) * ds;
  const double r = static_cast<double>(p.group() * p.total_q());
  const double sc = std::fabs(p.softmax_scale()) * ds;
  return {2 * a * sc * max_norm(in.k, p.head_dim_qk), 2 * a * sc * max_norm(in.q, p.head_dim_qk) * r,
          max_norm(d_out, p.head_dim_v) * r, a * r};
}

double score_bound(const Problem& p, const Inputs& in) {
  const double qn = max_norm(in.q, p.head_dim_qk), kn = max_norm(in.k, p.head_dim_qk);
  const double descale = max_descale(in);
  double slope = 0;
  for (float s : in.alibi_slopes) slope = std::max(slope, std::fabs(static_cast<double>(s)));
  return std::fabs(p.softmax_scale()) * qn * kn * descale * descale + slope * static_cast<double>(p.seq_kv + p.seq_q);
}

void compare(const char* name, const std::vector<double>& cpu, const std::vector<double>& gpu, int64_t width, double m,
             double terms, Agreement& a) {
  if (!a.failure.empty()) return;
  if (cpu.size() != gpu.size()) {
    a.failure = std::string(name) + ": sizes differ";
    return;
  }
  double tensor_max = 0;
  for (double x : cpu)
    if (std::isfinite(x)) tensor_max = std::max(tensor_max, std::fabs(x));
  for (size_t r0 = 0; r0 < cpu.size(); r0 += static_cast<size_t>(width)) {
    double row_max = 0;
    for (size_t x = r0; x < r0 + static_cast<size_t>(width); ++x)
      if (std::isfinite(cpu[x])) row_max = std::max(row_max, std::fabs(cpu[x]));
    const double tol = std::max(1e-11 * (1 + m) * std::max(row_max, 1e-3 * tensor_max), 1e-13 * (1 + m) * terms);
    for (size_t x = r0; x < r0 + static_cast<size_t>(width); ++x) {
      const double c = cpu[x], g = gpu[x];
      std::ostringstream at;
      at << name << "[" << x / static_cast<size_t>(width) << "][" << x % static_cast<size_t>(width) << "]: cpu " << c
         << " gpu " << g;
      if (!std::isfinite(c) || !std::isfinite(g)) {
        // Both non-finite, not necessarily the same: a key whose score is −inf (an infinite input)
        // weighs exactly 0 on the CPU, 0·Inf = NaN, and e^−709.78 on the GPU (its exp floor), a
        // tiny weight times Inf = ±Inf. NaN may stand for ±Inf, as in the forward's test.
        if (std::isfinite(c) != std::isfinite(g)) a.failure = at.str() + " (non-finite positions differ)";
      } else if (std::fabs(c - g) > tol) {
        a.failure = at.str() + " (|diff| " + std::to_string(std::fabs(c - g)) + " > " + std::to_string(tol) + ")";
      } else if (tol > 0) {
        a.worst_ratio = std::max(a.worst_ratio, std::fabs(c - g) / tol);
      }
      if (!a.failure.empty()) return;
    }
  }
}

std::vector<double> as_vector(const UninitVector<double>& v) { return {v.begin(), v.end()}; }

void compare_all(const Case& c, const BackwardResult& cpu, const BackwardResult& gpu, Agreement& a) {
  const double m = score_bound(c.p, c.in);
  const Terms t = terms(c.p, c.in, c.d_out);
  compare("dq", as_vector(cpu.dq), as_vector(gpu.dq), c.p.head_dim_qk, m, t.dq, a);
  compare("dk", as_vector(cpu.dk), as_vector(gpu.dk), c.p.head_dim_qk, m, t.dk, a);
  compare("dv", as_vector(cpu.dv), as_vector(gpu.dv), c.p.head_dim_v, m, t.dv, a);
  // One scalar per head, summed over every row of the head: width 1 with the head's own size.
  if (a.failure.empty() && cpu.dsinks.size() != gpu.dsinks.size()) a.failure = "dsinks: sizes differ";
  std::vector<double> cs(cpu.dsinks), gs(gpu.dsinks);
  if (!cs.empty()) compare("dsinks", cs, gs, 1, m, t.dsinks, a);
}

void run_cases(uint64_t salt, int n, bool poison, const char* label) {
  const uint64_t seed = flashcheck::testing::seed_for(salt);
  Agreement a;
  int done = 0;
  for (int i = 0; i < n && a.failure.empty(); ++i, ++done) {
    const Case c = draw_case(seed + static_cast<uint64_t>(i), poison);
    const BackwardResult cpu = naive_attention_backward(c.p, c.in, c.d_out);
    const BackwardResult gpu = naive_attention_backward_gpu(c.p, c.in, c.d_out);
    compare_all(c, cpu, gpu, a);
    if (!a.failure.empty()) ADD_FAILURE() << c.what << ": " << a.failure;
  }
  std::printf("%s: %d cases, worst |diff|/tolerance %.3g\n", label, done, a.worst_ratio);
}

TEST(GpuBackwardOracle, AgreesWithTheCpuOracleOnEveryVariant) {
  REQUIRE_GPU();
  run_cases(2301, cases(300, 24), false, "GPU vs CPU backward oracle");
}

TEST(GpuBackwardOracle, NonFiniteInputsReachWhatTheCpuOracleSays) {
  REQUIRE_GPU();
  run_cases(2302, cases(200, 16), true, "GPU vs CPU backward oracle, non-finite inputs");
}

// Many pieces (a tiny memory budget): a KV head's dK and dV summed over pieces on the host still
// agree; and a call repeats bit for bit.
TEST(GpuBackwardOracle, ManyPiecesAgreeAndACallRepeatsBitwise) {
  REQUIRE_GPU();
  Problem p = parse_problem(kEmulated ? "b=2 hq=4 hkv=2 sq=150,70 skv=170,90 d=32 dv=24 causal=bottom_right "
                                        "dtype=bf16 window=60,5 softcap=7 alibi=symmetric sinks=1"
                                      : "b=2 hq=8 hkv=2 sq=900,500 skv=1000,777 d=128 dv=96 causal=bottom_right "
                                        "dtype=bf16 window=300,7 softcap=7 alibi=symmetric sinks=1");
  const uint64_t seed = flashcheck::testing::seed_for(2303);
  Case c{p, make_inputs(p, seed, Dist::normal), random_dout(p, seed ^ 0xd0), "pieces, input seed " + std::to_string(seed)};
  const BackwardResult cpu = naive_attention_backward(p, c.in, c.d_out);
  const BackwardResult one = naive_attention_backward_gpu(p, c.in, c.d_out);
  const int pieces_one = gpu_oracle_detail::last_timing().pieces;
  const BackwardResult again = naive_attention_backward_gpu(p, c.in, c.d_out);
  EXPECT_EQ(0, std::memcmp(one.dq.data(), again.dq.data(), one.dq.size() * 8)) << "dq differs between two calls";
  EXPECT_EQ(0, std::memcmp(one.dk.data(), again.dk.data(), one.dk.size() * 8)) << "dk differs between two calls";
  EXPECT_EQ(0, std::memcmp(one.dv.data(), again.dv.data(), one.dv.size() * 8)) << "dv differs between two calls";
  gpu_oracle_detail::set_memory_budget(kEmulated ? (int64_t{1} << 20) : (int64_t{24} << 20));
  const BackwardResult many = naive_attention_backward_gpu(p, c.in, c.d_out);
  const int pieces_many = gpu_oracle_detail::last_timing().pieces;
  gpu_oracle_detail::set_memory_budget(0);
  EXPECT_GT(pieces_many, std::max(pieces_one, 3)) << "the small budget did not split the work";
  Agreement a;
  compare_all(c, cpu, one, a);
  compare_all(c, cpu, many, a);
  EXPECT_TRUE(a.failure.empty()) << c.what << ": " << a.failure;
}

TEST(GpuBackwardOracle, BadInputIsNamed) {
  REQUIRE_GPU();
  const Problem p = parse_problem("b=1 hq=2 hkv=1 sq=10 skv=12 d=16 dtype=f16");
  const Inputs in = make_inputs(p, 1, Dist::normal);
  std::vector<float> d_out = random_dout(p, 2);
  d_out.pop_back();
  const std::string why = thrown_message<std::invalid_argument>([&] { (void)naive_attention_backward_gpu(p, in, d_out); }, "a short dO");
  EXPECT_NE(why.find("dO"), std::string::npos) << why;
}

}  // namespace
}  // namespace flashcheck
