// Campaigns reach non-finite inputs (issue #21 item 7): a kernel that does not declare otherwise
// gets cases with one NaN or Inf in q, k or v (Dist::nonfinite), which it must propagate exactly
// as the oracle does. A kernel that squashes NaN to a number hides bad data and fails; correct
// kernels (the replica, the example plugin) pass every such case, every variant included.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <sstream>
#include <string>

#include "runner/campaign.h"
#include "reference/mask.h"
#include "reference/naive.h"
#include "reference/sequences.h"
#include "runner/registry.h"
#include "testing/test_seed.h"

namespace flashcheck {
namespace {

std::shared_ptr<Variant> kernel_of(const std::string& lib, const std::string& name) {
  for (auto& v : load_plugin(lib))
    if (v->name() == name) return v;
  ADD_FAILURE() << "no kernel " << name << " in " << lib;
  return nullptr;
}

int64_t nonfinite_count(const std::vector<float>& x) {
  int64_t n = 0;
  for (float e : x) n += !std::isfinite(e);
  return n;
}

// One case in about ten carries a NaN or Inf, exactly one, in q, k and v alike, NaN and Inf alike
// (a plain kernel's campaign; the replica's, with every variant, draws them too); none where the
// kernel declares it does not propagate them, nor in fp8 cases.
TEST(NonFinite, CampaignsDrawThemUnlessTheKernelDeclaresOtherwise) {
  const Capabilities caps;  // declares nothing: plain attention, every non-fp8 dtype
  ASSERT_TRUE(caps.propagates_nonfinite);
  ASSERT_TRUE(Registry::builtin().find("replica")->caps().propagates_nonfinite);
  const ProblemSpace space = space_for(caps, CampaignOptions{});
  const uint64_t seed = testing::seed_for(0x4a4);
  std::map<std::string, int64_t> where;
  int64_t drawn = 0;
  const int64_t n = 1000;
  for (int64_t i = 0; i < n; ++i) {
    const Case c = campaign_case(space, seed, i);
    if (c.dist != Dist::nonfinite) continue;
    ++drawn;
    EXPECT_FALSE(is_fp8(c.problem.dtype)) << to_string(c.problem);
    const Inputs in = make_inputs(c.problem, c.seed, c.dist);
    const int64_t q = nonfinite_count(in.q), k = nonfinite_count(in.k), v = nonfinite_count(in.v);
    EXPECT_EQ(q + k + v, 1) << "campaign seed " << seed << " case " << i << ": " << to_string(c.problem);
    for (const auto& [name, x] : {std::pair{"q", &in.q}, {"k", &in.k}, {"v", &in.v}})
      for (float e : *x)
        if (!std::isfinite(e)) ++where[std::string(name) + (std::isnan(e) ? " NaN" : " Inf")];
  }
  EXPECT_GE(drawn, n / 20) << "campaign seed " << seed;
  EXPECT_LE(drawn, n / 5) << "campaign seed " << seed;
  for (const char* w : {"q NaN", "k NaN", "v NaN", "q Inf", "k Inf", "v Inf"})
    EXPECT_GE(where[w], 1) << w << " never drawn in " << drawn << " cases (campaign seed " << seed << ")";

  Capabilities finite = caps;
  finite.propagates_nonfinite = false;
  const ProblemSpace none = space_for(finite, CampaignOptions{});
  for (int64_t i = 0; i < 300; ++i) EXPECT_NE(campaign_case(none, seed, i).dist, Dist::nonfinite);
}

// A kernel whose epilogue turns NaN and Inf into 0 passes every finite case: only the cases that
// carry one catch it. Declared (FC_LIMIT_FINITE_INPUTS) it is drawn none, and passes.
// A backward case plants its value only where no masked pair meets it (reference/
// nonfinite_inputs.h): in q at a row that sees every key of its sequence, in k or v only when every
// row of the sequence sees every key, or nowhere; the forward's placement on the same cases reaches
// the other places too (the difference is what the backward's needs).
TEST(NonFinite, ABackwardCaseMeetsNoMaskedPair) {
  Capabilities caps;
  caps.windows = true;  // sliding windows too: rows that see no key, or only some
  caps.layouts = {Layout::bhsd, Layout::thd};
  const ProblemSpace space = space_for(caps, CampaignOptions{});
  const uint64_t seed = testing::seed_for(0x4a5);
  int64_t planted = 0, finite = 0, forward_elsewhere = 0;
  for (int64_t i = 0; i < 1500; ++i) {
    const Case c = campaign_case(space, seed, i);
    if (c.dist != Dist::nonfinite) continue;
    const Problem& p = c.problem;
    const Inputs in = make_inputs(p, c.seed, c.dist, /*backward=*/true);
    const Sequences seqs(p);
    bool found = false;
    auto sees_all = [&](int64_t b, int64_t row) {
      const KeyRange r = visible_range(p, b, row);
      return p.skv(b) > 0 && r.lo == 0 && r.hi == p.skv(b);
    };
    for (int64_t b = 0; b < p.batch; ++b) {
      bool unmasked = true;
      for (int64_t row = 0; row < p.sq(b); ++row) unmasked = unmasked && sees_all(b, row);
      for (int64_t h = 0; h < p.heads_q; ++h)
        for (int64_t row = 0; row < p.sq(b); ++row)
          for (int64_t d = 0; d < p.head_dim_qk; ++d)
            if (!std::isfinite(in.q[static_cast<size_t>(seqs.q_row(b, h, row) + d)])) {
              found = true;
              EXPECT_TRUE(sees_all(b, row)) << "q row " << row << " of sequence " << b << " does not see every key: "
                                            << to_string(p) << " (campaign seed " << seed << " case " << i << ")";
            }
      for (int64_t hk = 0; hk < p.heads_kv; ++hk)
        for (int64_t j = 0; j < p.skv(b); ++j) {
          bool bad = false;
          for (int64_t d = 0; d < p.head_dim_qk; ++d) bad = bad || !std::isfinite(in.k[static_cast<size_t>(seqs.k_row(b, hk, j) + d)]);
          for (int64_t d = 0; d < p.head_dim_v; ++d) bad = bad || !std::isfinite(in.v[static_cast<size_t>(seqs.v_row(b, hk, j) + d)]);
          if (!bad) continue;
          found = true;
          EXPECT_TRUE(unmasked) << "k or v of key " << j << " in a sequence with a masked pair: " << to_string(p)
                                << " (campaign seed " << seed << " case " << i << ")";
        }
    }
    (found ? planted : finite) += 1;
    // The forward's placement of the same case, for contrast: it may use a masked row or key.
    const Inputs fwd = make_inputs(p, c.seed, c.dist);
    forward_elsewhere += fwd.q != in.q || fwd.k != in.k || fwd.v != in.v;
  }
  EXPECT_GE(planted, 10) << "campaign seed " << seed;  // most drawn cases still carry one
  EXPECT_GE(forward_elsewhere, 1) << "campaign seed " << seed;
  std::printf("backward placement: %lld planted, %lld left finite, %lld placed apart from the forward's\n",
              static_cast<long long>(planted), static_cast<long long>(finite), static_cast<long long>(forward_elsewhere));
}

TEST(NonFinite, AKernelThatSquashesNaNFails) {
  CampaignOptions opt;
  opt.cases = 80;
  opt.seed = testing::seed_for(0x5a5);
  opt.max_seq = 64;
  opt.shrink = false;
  opt.progress = false;
  auto squash = kernel_of(FLASHCHECK_BROKEN_VARIANT_PLUGINS, "broken_nan_squash");
  ASSERT_TRUE(squash);
  EXPECT_TRUE(squash->caps().propagates_nonfinite);
  std::ostringstream log;
  const VariantSummary s = run_campaign(*squash, opt, log);
  EXPECT_GT(s.failed, 0) << "campaign seed " << opt.seed << "\n" << log.str();
  EXPECT_GT(s.failed_by.count("nan_inf_positions"), 0u) << log.str();
  EXPECT_EQ(s.skipped, 0) << log.str();

  auto declared = kernel_of(FLASHCHECK_BROKEN_VARIANT_PLUGINS, "variant_nan_squash_declared");
  ASSERT_TRUE(declared);
  EXPECT_FALSE(declared->caps().propagates_nonfinite);
  std::ostringstream log2;
  opt.cases = 30;
  const VariantSummary d = run_campaign(*declared, opt, log2);
  EXPECT_EQ(d.failed, 0) << log2.str();
  EXPECT_EQ(d.passed, opt.cases) << log2.str();
}

// Correct kernels pass every non-finite case their campaigns draw (variants, layouts, GQA, Dv ≠
// Dqk, causal modes), and the NaN or Inf does reach their outputs: the oracle's propagation is
// what a correct kernel computes, so the criterion that judges it raises no false alarm.
TEST(NonFinite, CorrectKernelsPassEveryCaseThatCarriesOne) {
  std::vector<std::pair<std::shared_ptr<Variant>, std::string>> kernels{
      {Registry::builtin().find("replica"), ""},
      {kernel_of(FLASHCHECK_EXAMPLE_PLUGIN, "example_cpu_plugin"), FLASHCHECK_EXAMPLE_PLUGIN}};
  CampaignOptions opt;
  opt.max_seq = 128;
  opt.max_work = 4e6;
  const uint64_t seed = testing::seed_for(0x6a6);
  for (const auto& [v, plugin] : kernels) {
    ASSERT_TRUE(v);
    SCOPED_TRACE(v->name() + ", campaign seed " + std::to_string(seed));
    const ProblemSpace space = space_for(v->caps(), opt);
    int64_t judged = 0;
    for (int64_t i = 0; judged < 25 && i < 2000; ++i) {
      const Case c = campaign_case(space, seed, i);
      if (c.dist != Dist::nonfinite) continue;
      const CaseOutcome o = run_case(*v, c, 4096, plugin);
      ASSERT_FALSE(o.skipped) << *o.skipped;
      EXPECT_TRUE(o.passed) << "case " << i << "\n" << to_text(o.report);
      ++judged;
      // The oracle's output has the NaN or Inf (the kernel's then too: positions must match): it is
      // planted where some row looks.
      const OracleResult truth = naive_attention(c.problem, make_inputs(c.problem, c.seed, c.dist));
      bool any = false;
      for (double x : truth.o) any |= !std::isfinite(x);
      bool sees = false;  // some row sees a key (seqused_k = 0 everywhere: none does)
      for (int64_t b = 0; b < c.problem.batch; ++b)
        for (int64_t r = 0; r < c.problem.sq(b) && !sees; ++r) sees = !visible_range(c.problem, b, r).empty();
      EXPECT_EQ(any, sees) << "case " << i << ": " << to_string(c.problem) << " --input-seed " << c.seed;
    }
    EXPECT_EQ(judged, 25);
  }
}

// ABI 2.1's limits reach the campaign: a kernel declaring Sq = Skv in multiples of 16, and taking
// nothing else, declines no case.
TEST(NonFinite, DeclaredLimitsReachTheCampaignThroughTheAbi) {
  auto v = kernel_of(FLASHCHECK_BROKEN_VARIANT_PLUGINS, "variant_limits");
  ASSERT_TRUE(v);
  EXPECT_TRUE(v->caps().equal_lengths);
  EXPECT_EQ(v->caps().seq_multiple, 16);
  CampaignOptions opt;
  opt.cases = 40;
  opt.seed = testing::seed_for(0x7a7);
  opt.max_seq = 96;
  opt.shrink = false;
  opt.progress = false;
  std::ostringstream log;
  const VariantSummary s = run_campaign(*v, opt, log);
  EXPECT_EQ(s.skipped, 0) << "campaign seed " << opt.seed << "\n" << log.str();
  EXPECT_EQ(s.passed, opt.cases) << log.str();
}

}  // namespace
}  // namespace flashcheck
