// Shrinking variants (issue 20, item 4): what a failure does not need leaves the problem, a varlen
// batch shrinks to its failing sequence, a window to the smallest that still fails; and `run
// --variants` / `--require` choose what campaigns draw.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <functional>
#include <random>

#include "fuzz/generators.h"
#include "runner/campaign.h"
#include "runner/shrink_candidates.h"
#include "runner/variant_selection.h"
#include "testing/test_seed.h"

namespace flashcheck {
namespace {

// A kernel that computes every variant, as campaigns see its declaration.
Capabilities everything() {
  Capabilities c;
  c.dtypes = {DType::f32, DType::f16, DType::bf16, DType::e4m3};
  c.windows = c.softcap = c.sinks = c.seqused = c.paged = c.alibi_per_batch = true;
  c.alibi = {Alibi::symmetric, Alibi::signed_};
  c.layouts = {Layout::bhsd, Layout::bshd, Layout::thd};
  c.descales = {Descale::tensor, Descale::head};
  return c;
}

// The shrinker's loop with a predicate for "still fails": the first failing candidate is taken,
// until none fails or `budget` candidates were tried (the campaign's shrinker counts every
// candidate it runs, passing ones included). Returns the last failing problem and the steps it
// took; `tried` gets the candidates run.
std::pair<Problem, int> shrink_with(Problem p, const std::function<bool(const Problem&)>& fails, const Capabilities& caps,
                                    int budget = 1 << 30, int* tried = nullptr) {
  int steps = 0, runs = 0;
  for (bool improved = true; improved && steps < 1000 && runs < budget;) {
    improved = false;
    for (const Problem& q : smaller_problems(p, caps)) {
      if (++runs > budget) break;
      if (fails(q)) {
        p = q;
        ++steps;
        improved = true;
        break;
      }
    }
  }
  if (tried) *tried = runs;
  return {p, steps};
}

RC_GTEST_PROP(ShrinkCandidates, AreValidProblemsOtherThanTheFailingOne, ()) {
  ProblemSpace space = space_for(everything(), CampaignOptions{});
  const Case c = *gen_case(space);
  RC_TAG(to_string(c.problem.layout));
  for (const Problem& q : smaller_problems(c.problem, everything())) {
    RC_ASSERT(q != c.problem);
    try {
      validate(q);
    } catch (const InvalidProblem& e) {
      RC_FAIL(to_string(q) + ": " + e.what());
    }
  }
}

// A failure every candidate keeps: the loop ends (no candidate undoes another) at a problem with
// one sequence, one head and no variant left but those that cannot go (varlen, fp8).
RC_GTEST_PROP(ShrinkCandidates, AFailureThatAlwaysFailsEndsAtAMinimalProblem, ()) {
  ProblemSpace space = space_for(everything(), CampaignOptions{});
  const Case c = *gen_case(space);
  const auto [p, steps] = shrink_with(c.problem, [](const Problem&) { return true; }, everything());
  RC_LOG() << "from " << to_string(c.problem) << "\nto " << to_string(p) << " in " << steps << " steps\n";
  RC_ASSERT(steps < 1000);
  RC_ASSERT(p.batch == 1);
  RC_ASSERT(p.heads_q == 1);
  RC_ASSERT(p.window.none());
  RC_ASSERT(p.softcap == 0.0);
  RC_ASSERT(p.alibi == Alibi::none);
  RC_ASSERT(!p.sinks);
  RC_ASSERT(!p.paged());
  RC_ASSERT(p.layout != Layout::bshd);
}

TEST(ShrinkCandidates, AVarlenFailureShrinksToTheFailingSequence) {
  std::mt19937_64 g(testing::seed_for(1301));
  std::vector<std::pair<int64_t, int64_t>> lens = {{5, 9}, {17, 29}, {0, 4}, {33, 33}, {1, 40}};
  std::shuffle(lens.begin(), lens.end(), g);
  std::string sq, skv;
  for (auto [a, b] : lens) {
    sq += (sq.empty() ? "" : ",") + std::to_string(a);
    skv += (skv.empty() ? "" : ",") + std::to_string(b);
  }
  const Problem start = parse_problem("b=5 hq=4 hkv=2 sq=" + sq + " skv=" + skv +
                                      " d=64 causal=bottom_right layout=thd window=20,0 softcap=15 dtype=bf16");
  // The bug: a sequence of 17 queries over 29 keys (say, a tail-tile path) goes wrong.
  auto fails = [](const Problem& p) {
    for (int64_t b = 0; b < p.batch; ++b)
      if (p.sq(b) == 17 && p.skv(b) == 29) return true;
    return false;
  };
  const auto [p, steps] = shrink_with(start, fails, everything());
  SCOPED_TRACE(to_string(start) + " -> " + to_string(p));
  EXPECT_EQ(p.batch, 1);
  EXPECT_EQ(p.seqlens_q, std::vector<int64_t>{17});
  EXPECT_EQ(p.seqlens_kv, std::vector<int64_t>{29});
  EXPECT_TRUE(p.window.none());
  EXPECT_EQ(p.softcap, 0.0);
  EXPECT_EQ(p.heads_q, 1);
}

TEST(ShrinkCandidates, AWindowShrinksToTheSmallestThatStillFails) {
  std::mt19937_64 g(testing::seed_for(1302));
  const int64_t left = std::uniform_int_distribution<int64_t>(100, 300)(g), needed = 9;
  const Problem start = parse_problem("b=2 h=2 sq=200 skv=260 d=32 window=" + std::to_string(left) + ",7 dtype=f16");
  // Fails while the window reaches at least 9 keys back (an edge-tile bug, say).
  auto fails = [&](const Problem& p) { return !p.window.none() && p.window.left >= needed && p.seq_kv > 20; };
  const auto [p, steps] = shrink_with(start, fails, everything());
  SCOPED_TRACE(to_string(start) + " -> " + to_string(p));
  EXPECT_GE(p.window.left, needed);
  EXPECT_LT(p.window.left, 2 * needed) << "halving stops within a factor 2 of the smallest failing window";
  EXPECT_EQ(p.window.right, 0);
}

// A top-left causal tail bug (the last key dropped) shows only while some row sees that key, i.e.
// while Sq >= Skv: halving Sq alone always hides it. The lengths still shrink to a few rows and
// keys within the campaign's budget, from any start.
RC_GTEST_PROP(ShrinkCandidates, ATopLeftTailBugShrinksToAFewRowsWithinTheBudget, ()) {
  const int64_t skv = *rc::gen::inRange<int64_t>(2, 2049);
  const int64_t sq = *rc::gen::inRange<int64_t>(skv, 4097);
  const Problem start = parse_problem("b=2 hq=4 hkv=1 sq=" + std::to_string(sq) + " skv=" + std::to_string(skv) +
                                      " d=16 causal=top_left dtype=f32");
  RC_TAG(sq > 2 * skv ? "Sq > 2 Skv" : "Sq <= 2 Skv");
  auto fails = [](const Problem& p) { return p.causal == Causal::top_left && p.seq_kv > 1 && p.seq_q >= p.seq_kv; };
  int tried = 0;
  const auto [p, steps] = shrink_with(start, fails, everything(), 200, &tried);
  RC_LOG() << to_string(start) << " -> " << to_string(p) << " in " << steps << " steps, " << tried << " candidates\n";
  RC_ASSERT(fails(p));
  RC_ASSERT(p.seq_q <= 4);
  RC_ASSERT(p.seq_kv <= 4);
  RC_ASSERT(tried < 200);
}

TEST(ShrinkCandidates, PagingAndOtherVariantsGoWhenTheyAreNotTheCause) {
  const Problem start =
      parse_problem("b=3 hq=4 hkv=1 sq=5 skv=70,33,90 d=64 page=16 pages=shuffled alibi=signed slopes=batch sinks=1 softcap=12 dtype=bf16");
  auto fails = [](const Problem& p) { return p.softcap > 0 && p.softcap < 13; };  // the cap is the bug
  const auto [p, steps] = shrink_with(start, fails, everything());
  SCOPED_TRACE(to_string(start) + " -> " + to_string(p));
  EXPECT_FALSE(p.paged());
  EXPECT_EQ(p.alibi, Alibi::none);
  EXPECT_FALSE(p.sinks);
  EXPECT_EQ(p.softcap, 12.0);
  EXPECT_EQ(p.batch, 1);
}

// ---- run --variants / --require

TEST(VariantSelection, NamesParseAndUnknownOnesAreNamed) {
  EXPECT_EQ(parse_variant_list("window,softcap"), (std::set<VariantName>{VariantName::window, VariantName::softcap}));
  EXPECT_TRUE(parse_variant_list("none").empty());
  EXPECT_EQ(parse_variant_list("all").size(), std::size(kAllVariantNames));
  for (VariantName v : kAllVariantNames) EXPECT_EQ(parse_variant_name(to_string(v)), v);
  try {
    parse_variant_list("window,sliding");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'sliding'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_variant_list("window,"), std::invalid_argument);
}

TEST(VariantSelection, NoneDrawsPlainProblemsOnly) {
  CampaignOptions opt;
  opt.variants.allowed = std::set<VariantName>{};
  const ProblemSpace space = space_for(everything(), opt);
  for (int64_t i = 0; i < 300; ++i) {
    const Problem p = campaign_case(space, testing::seed_for(1303), i, opt.variants).problem;
    EXPECT_TRUE(p.plain()) << to_string(p);
  }
}

TEST(VariantSelection, DeclaredVariantsAreDrawnAndRequiredOnesAlways) {
  CampaignOptions opt;
  const ProblemSpace all = space_for(everything(), opt);
  std::map<VariantName, int> seen;
  for (int64_t i = 0; i < 400; ++i) {
    const Problem p = campaign_case(all, testing::seed_for(1304), i, opt.variants).problem;
    for (VariantName v : kAllVariantNames) seen[v] += has_variant(p, v);
  }
  for (VariantName v : kAllVariantNames) EXPECT_GT(seen[v], 10) << to_string(v) << " is declared and should be drawn";

  opt.variants.required = {VariantName::window, VariantName::varlen, VariantName::alibi};
  const ProblemSpace some = space_for(everything(), opt);
  for (int64_t i = 0; i < 100; ++i) {
    const Case a = campaign_case(some, testing::seed_for(1305), i, opt.variants);
    EXPECT_TRUE(opt.variants.meets(a.problem)) << to_string(a.problem);
    // The same case in every shard.
    EXPECT_EQ(a.problem, campaign_case(some, testing::seed_for(1305), i, opt.variants).problem);
  }
}

TEST(VariantSelection, ARequiredVariantAKernelLacksMakesItUnavailable) {
  Capabilities plain;
  VariantSelection sel;
  sel.required = {VariantName::paged, VariantName::softcap};
  const auto why = sel.refusal(plain);
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("paged"), std::string::npos) << *why;
  EXPECT_NE(why->find("softcap"), std::string::npos) << *why;
  EXPECT_FALSE(sel.refusal(everything()).has_value());
}

}  // namespace
}  // namespace flashcheck
