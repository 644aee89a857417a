// The LSE of an fp8 problem carries the fp8 tensor cores' accumulation error (Expected::score_error,
// verify/expected.h): a kernel whose scores are summed as Hopper's fp8 MMA sums them passes, and
// the LSE bugs the criterion exists for still fail under the wider limit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>
#include <vector>

#include "reference/inputs.h"
#include "reference/replica.h"
#include "testing/test_seed.h"
#include "verify/criteria.h"
#include "verify/expected.h"
#include "verify/judge.h"

namespace flashcheck {
namespace {

// One score as the model in verify/expected.h says fp8 tensor cores form it: per group of 32
// products, the exact products and the running sum aligned to the group's largest exponent and cut
// toward zero to 14 significant bits, then summed.
double truncated_dot(const float* q, const float* k, int64_t d) {
  double acc = 0;
  for (int64_t g = 0; g < d; g += 32) {
    std::vector<double> terms{acc};
    for (int64_t i = g; i < std::min(d, g + 32); ++i) terms.push_back(static_cast<double>(q[i]) * k[i]);
    int emax = INT32_MIN;
    for (double t : terms)
      if (t != 0) emax = std::max(emax, std::ilogb(t));
    if (emax == INT32_MIN) continue;
    const double quantum = std::ldexp(1.0, emax - 13);
    acc = 0;
    for (double t : terms) acc += std::trunc(t / quantum) * quantum;
    acc = static_cast<float>(acc);
  }
  return acc;
}

// The LSE of every row (b = 0, one KV head per query head, no mask) from truncated scores.
std::vector<float> truncated_lse(const Problem& p, const Inputs& in) {
  std::vector<float> lse;
  const int64_t d = p.head_dim_qk;
  for (int64_t h = 0; h < p.heads_q; ++h) {
    const double mul = p.softmax_scale() * descale_of(p, in.descale_q, 0, h) * descale_of(p, in.descale_k, 0, h);
    for (int64_t i = 0; i < p.seq_q; ++i) {
      std::vector<double> s(static_cast<size_t>(p.seq_kv));
      for (int64_t j = 0; j < p.seq_kv; ++j)
        s[static_cast<size_t>(j)] = mul * truncated_dot(&in.q[static_cast<size_t>((h * p.seq_q + i) * d)],
                                                        &in.k[static_cast<size_t>((h * p.seq_kv + j) * d)], d);
      const double m = *std::max_element(s.begin(), s.end());
      double l = 0;
      for (double x : s) l += std::exp(x - m);
      lse.push_back(static_cast<float>(m + std::log(l)));
    }
  }
  return lse;
}

struct Fp8Case {
  Problem p;
  Inputs in;
  Expected ref;
  ReplicaResult good;
  CheckOptions opt;
  Fp8Case(Problem prob, uint64_t salt) : p(std::move(prob)) {
    in = make_inputs(p, testing::seed_for(salt), Dist::normal);
    ref = make_expected(p, in);
    good = replica_attention(p, in, ReplicaConfig{});
    opt.tol = tolerance_for(p.dtype);
  }
  Report judge(std::vector<float> lse) const { return verify_output(p, ref, KernelResult{good.o, std::move(lse)}, opt); }
};

Problem fp8_problem(std::optional<double> scale) {
  Problem p{1, 3, 3, 40, 70, 256, 256, Causal::none, scale, DType::e4m3};
  p.descale = Descale::head;
  return p;
}

// Scale 2 and per-head descales: scores in the hundreds, where the truncation shows.
TEST(Fp8Lse, PassesTheTensorCoresTruncatedAccumulationThatFp32sLimitFails) {
  const Fp8Case c(fp8_problem(2.0), 901);
  ASSERT_GT(c.ref.score_error, 0.0);
  const std::vector<float> hopper = truncated_lse(c.p, c.in);
  double worst_fp32 = 0;
  for (size_t i = 0; i < hopper.size(); ++i) {
    const double limit = c.opt.tol.lse_atol + c.opt.tol.lse_rtol * (std::fabs(c.ref.oracle.lse[i]) + c.ref.score_bound[i]);
    worst_fp32 = std::max(worst_fp32, std::fabs(hopper[i] - c.ref.oracle.lse[i]) / limit);
  }
  EXPECT_GT(worst_fp32, 1.0) << "truncated accumulation within fp32's LSE limit: the test decides nothing";
  const Report r = c.judge(hopper);
  EXPECT_TRUE(r.pass()) << to_text(r);
}

// The default scale: scores of a few units and an accumulation bound a fraction of one, so an LSE
// a few units off is a bug the limit must still see. (Where scale·|q|·max|k| is in the hundreds no
// limit can: the hardware's own error is that large; verify/expected.h.)
TEST(Fp8Lse, StillFailsABase2LseAndAKeptPOffset) {
  const Fp8Case c(fp8_problem(std::nullopt), 902);
  const std::vector<float> hopper = truncated_lse(c.p, c.in);
  EXPECT_TRUE(c.judge(hopper).pass()) << to_text(c.judge(hopper));
  std::vector<float> base2 = hopper, offset = hopper;
  for (float& x : base2) x = static_cast<float>(x / std::log(2.0));
  for (float& x : offset) x = static_cast<float>(x + 8 * std::log(2.0));
  for (const auto& [name, lse] : {std::pair{"base 2", base2}, std::pair{"2^8 offset kept", offset}}) {
    const Report bad = c.judge(lse);
    const auto f = bad.failed();
    EXPECT_NE(std::find(f.begin(), f.end(), "lse"), f.end()) << name << "\n" << to_text(bad);
  }
}

}  // namespace
}  // namespace flashcheck
