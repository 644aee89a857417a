// identify() names the convention an output follows: outputs made by the oracle under a known
// convention other than the stated one are judged, and the reading of that convention (and not the
// stated one) must pass.
#include "verify/identify.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "reference/naive.h"
#include "testing/test_seed.h"

namespace flashcheck {
namespace {

// What a correct kernel following `as` writes: the fp64 oracle's O rounded to the output dtype, and
// its LSE as fp32 in the declared base (and +inf for empty rows where declared).
KernelOutput output_following(const Problem& as, const Inputs& in, const Declared& d, std::vector<float>& o,
                              std::vector<float>& lse) {
  const OracleResult r = naive_attention(as, in);
  o.resize(r.o.size());
  for (size_t i = 0; i < o.size(); ++i) o[i] = round_to(as.o_dtype(), static_cast<float>(r.o[i]));
  lse.resize(r.lse.size());
  for (size_t i = 0; i < lse.size(); ++i) {
    double x = r.lse[i];
    if (std::isinf(x) && x < 0 && d.empty_lse == EmptyRowLse::pos_inf) x = INFINITY;
    if (d.lse_base == LseBase::two && std::isfinite(x)) x /= kLn2;
    lse[i] = static_cast<float>(x);
  }
  KernelOutput out{o, std::nullopt, std::nullopt};
  out.lse = std::span<const float>(lse);
  return out;
}

bool passes(const std::vector<ReadingVerdict>& v, const std::string& name) {
  for (const auto& x : v)
    if (x.reading.name.rfind(name, 0) == 0) return x.pass;
  ADD_FAILURE() << "no reading named '" << name << "'";
  return false;
}

struct Scenario {
  const char* problem;         // the stated problem
  const char* kernel_problem;  // what the kernel computed ("" = as stated)
  Declared kernel_declared;    // how it writes its LSE
  const char* reading;         // the reading that must pass
};

TEST(Identify, NamesTheConventionAnOutputFollows) {
  const Declared plain;
  Declared base2 = plain, pos_inf = plain;
  base2.lse_base = LseBase::two;
  pos_inf.empty_lse = EmptyRowLse::pos_inf;
  const Scenario cases[] = {
      {"b=1 h=2 sq=40 skv=70 d=32 causal=bottom_right dtype=f32", "b=1 h=2 sq=40 skv=70 d=32 causal=top_left dtype=f32", plain,
       "causal top_left"},
      {"b=1 h=2 s=64 d=32 dtype=f32 window=8,0", "b=1 h=2 s=64 d=32 dtype=f32 window=7,0", plain, "window left exclusive"},
      {"b=1 h=2 s=64 d=32 dtype=bf16 window=5,3", "b=1 h=2 s=64 d=32 dtype=bf16 window=5,2", plain, "window right exclusive"},
      {"b=1 h=2 s=64 d=32 dtype=f32 window=8,0", "b=1 h=2 s=64 d=32 dtype=f32", plain, "window ignored"},
      {"b=1 h=4 s=48 d=32 dtype=f32 alibi=symmetric", "b=1 h=4 s=48 d=32 dtype=f32 alibi=signed", plain, "ALiBi signed"},
      {"b=1 h=2 s=48 d=32 dtype=f32 sinks=1", "b=1 h=2 s=48 d=32 dtype=f32", plain, "sinks ignored"},
      {"b=1 h=2 s=48 d=32 dtype=f32 softcap=2", "b=1 h=2 s=48 d=32 dtype=f32", plain, "softcap ignored"},
      {"b=1 h=2 s=48 d=32 dtype=f32", "", base2, "LSE base 2"},
      {"b=1 h=2 sq=50 skv=20 d=32 causal=bottom_right dtype=f32", "", pos_inf, "empty rows' LSE +inf"},
  };
  for (const Scenario& c : cases) {
    SCOPED_TRACE(std::string(c.problem) + " computed as " + (*c.kernel_problem ? c.kernel_problem : "stated"));
    const Problem stated = parse_problem(c.problem);
    const Problem as = *c.kernel_problem ? parse_problem(c.kernel_problem) : stated;
    Inputs in = make_inputs(stated, testing::seed_for(301));
    Inputs kernel_in = in;
    if (!as.sinks) kernel_in.sinks.clear();
    if (as.alibi == Alibi::none) kernel_in.alibi_slopes.clear();
    std::vector<float> o, lse;
    const KernelOutput out = output_following(as, kernel_in, c.kernel_declared, o, lse);
    const auto v = identify(stated, in, out, plain);
    EXPECT_FALSE(passes(v, "as stated")) << to_text(v);
    EXPECT_TRUE(passes(v, c.reading)) << to_text(v);
    EXPECT_NE(identification_summary(v).find(c.reading), std::string::npos) << to_text(v);
  }
}

TEST(Identify, AStatedConventionIsConfirmedAndAWrongOutputMatchesNothing) {
  const Problem p = parse_problem("b=1 h=2 s=64 d=32 dtype=bf16 window=8,0 alibi=symmetric causal=bottom_right");
  const Inputs in = make_inputs(p, testing::seed_for(302));
  std::vector<float> o, lse;
  KernelOutput out = output_following(p, in, Declared{}, o, lse);
  auto v = identify(p, in, out, Declared{});
  EXPECT_TRUE(passes(v, "as stated")) << to_text(v);
  EXPECT_EQ(identification_summary(v).rfind("the output follows the stated conventions", 0), 0u) << to_text(v);
  // Rows scaled by 1.5: no convention explains that.
  for (float& x : o) x *= 1.5f;
  v = identify(p, in, out, Declared{});
  for (const auto& x : v) EXPECT_FALSE(x.pass) << x.reading.name;
  EXPECT_EQ(identification_summary(v).rfind("no reading passes", 0), 0u);
}

}  // namespace
}  // namespace flashcheck
