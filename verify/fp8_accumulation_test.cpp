// The LSE of an fp8 problem carries the fp8 tensor cores' accumulation error (Expected::score_error,
// verify/expected.h): a kernel whose scores are summed as Hopper's fp8 MMA sums them passes, and
// the LSE bugs the criterion exists for still fail under the wider limit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
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

TEST(Fp8Lse, CarriesTheTensorCoresTruncatedAccumulation) {
  Problem p{1, 3, 3, 40, 70, 256, 256, Causal::none, 2.0, DType::e4m3};
  p.descale = Descale::head;
  const Inputs in = make_inputs(p, testing::seed_for(901), Dist::normal);
  const Expected ref = make_expected(p, in);
  ASSERT_GT(ref.score_error, 0.0);
  const ReplicaResult good = replica_attention(p, in, ReplicaConfig{});
  CheckOptions opt;
  opt.tol = tolerance_for(p.dtype);
  auto judge = [&](std::vector<float> lse) { return verify_output(p, ref, KernelResult{good.o, std::move(lse)}, opt); };

  const std::vector<float> hopper = truncated_lse(p, in);
  // Without the accumulation term some row lies past the limit: the case is one the term decides.
  double worst_fp32 = 0;
  for (size_t i = 0; i < hopper.size(); ++i) {
    const double limit = opt.tol.lse_atol + opt.tol.lse_rtol * (std::fabs(ref.oracle.lse[i]) + ref.score_bound[i]);
    worst_fp32 = std::max(worst_fp32, std::fabs(hopper[i] - ref.oracle.lse[i]) / limit);
  }
  EXPECT_GT(worst_fp32, 1.0) << "truncated accumulation within fp32's LSE limit: the test decides nothing";
  const Report r = judge(hopper);
  EXPECT_TRUE(r.pass()) << to_text(r);

  // A natural-log LSE reported in base 2, and one that keeps FlashAttention 3's 2^8 P offset.
  std::vector<float> base2 = hopper, offset = hopper;
  for (float& x : base2) x = static_cast<float>(x / std::log(2.0));
  for (float& x : offset) x = static_cast<float>(x + 8 * std::log(2.0));
  for (const auto& [name, lse] : {std::pair{"base 2", base2}, std::pair{"2^8 offset kept", offset}}) {
    const Report bad = judge(lse);
    EXPECT_FALSE(bad.pass()) << name << "\n" << to_text(bad);
    const auto f = bad.failed();
    EXPECT_NE(std::find(f.begin(), f.end(), "lse"), f.end()) << name;
  }
}

}  // namespace
}  // namespace flashcheck
