// Campaigns spend every case (issue #21 item 7): a case is drawn only inside the space its kernel
// declares, so no case is skipped for a problem the kernel said it would refuse (wgmma_f16 skipped
// 98 of 300 cases for (Dqk, Dv) pairs it does not compile).
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "runner/campaign.h"
#include "runner/registry.h"
#include "runner/shrink_candidates.h"
#include "testing/test_seed.h"

namespace flashcheck {
namespace {

struct Declaration {
  std::string name;
  Capabilities caps;
};

// wgmma_f16's declaration: four head dims, and only four of their (Dqk, Dv) pairs compiled.
Capabilities sparse_pairs() {
  Capabilities c;
  c.dtypes = {DType::bf16, DType::f16};
  c.head_dims = {64, 128, 192, 256};
  c.head_dim_pairs = {{64, 64}, {128, 128}, {192, 128}, {256, 256}};
  return c;
}

// What Triton's fused-attention tutorial takes: Sq = Skv, MHA, lengths in whole 64-row blocks,
// Dqk = Dv in {64, 128}, f16.
Capabilities triton_tutorial() {
  Capabilities c;
  c.dtypes = {DType::f16};
  c.head_dims = {64, 128};
  c.dv_ne_dqk = false;
  c.gqa = false;
  c.equal_lengths = true;
  c.seq_multiple = 64;
  c.causals = {Causal::none, Causal::bottom_right};
  return c;
}

// Every built-in kernel's declaration (device kernels' too: they are known without a GPU) and
// declarations that narrow the space in each way a kernel can.
std::vector<Declaration> declarations() {
  std::vector<Declaration> out;
  for (const auto& v : Registry::builtin().all()) out.push_back({v->name(), v->caps()});
  out.push_back({"sparse pairs", sparse_pairs()});
  Capabilities listed_without_pair = sparse_pairs();
  listed_without_pair.head_dims = {64, 96, 128};  // 96 has no pair: never drawn
  listed_without_pair.head_dim_pairs = {{64, 64}, {128, 64}};
  out.push_back({"a listed dim without a pair", listed_without_pair});
  Capabilities mha = sparse_pairs();
  mha.gqa = false;
  mha.dv_ne_dqk = false;
  mha.head_dim_pairs.clear();
  out.push_back({"MHA, Dv = Dqk", mha});
  out.push_back({"Triton's tutorial", triton_tutorial()});
  // The length limits on listed sequences too: varlen, paged caches and seqused_k.
  Capabilities listed = triton_tutorial();
  listed.seq_multiple = 16;
  listed.layouts = {Layout::bhsd, Layout::thd};
  listed.paged = listed.seqused = listed.windows = true;
  out.push_back({"equal lengths, multiples of 16, listed", listed});
  Capabilities multiple = Registry::builtin().find("replica")->caps();
  multiple.seq_multiple = 8;
  out.push_back({"every variant, multiples of 8", multiple});
  Capabilities odd;  // a multiple no tile is a multiple of
  odd.seq_multiple = 48;
  out.push_back({"multiples of 48", odd});
  return out;
}

struct Drawn {
  Declaration d;
  uint64_t seed = 0;
  int64_t index = 0;
  Case c;
};

void showValue(const Drawn& x, std::ostream& os) {
  os << x.d.name << ", campaign seed " << x.seed << " case " << x.index << ": " << to_string(x.c.problem);
}

// Any case of any campaign of any declaration lies inside the declaration: Capabilities::refusal,
// the one rule behind a kernel's supports(), accepts it.
RC_GTEST_PROP(DeclaredSpace, EveryDrawnCaseIsInsideTheDeclaration, ()) {
  const std::vector<Declaration> all = declarations();
  Drawn x;
  x.d = all[*rc::gen::inRange<size_t>(0, all.size())];
  x.seed = *rc::gen::arbitrary<uint64_t>();
  x.index = *rc::gen::inRange<int64_t>(0, 100000);
  const ProblemSpace space = space_for(x.d.caps, CampaignOptions{});
  RC_PRE(!space.dtypes.empty());
  RC_TAG(x.d.name);
  // Grown to production load (`run --load`), a case stays inside as well.
  CampaignOptions load;
  load.load = true;
  load.max_seq = 4096;
  load.max_work = 1e10;
  const ProblemSpace grown = space_for(x.d.caps, load);
  for (int64_t k = 0; k < 20; ++k, ++x.index) {  // drawing is cheap: a run of cases per declaration
    x.c = campaign_case(space, x.seed, x.index);
    const auto why = x.d.caps.refusal(x.c.problem);
    if (why) RC_FAIL("refused (" + *why + "): " + [&] { std::ostringstream os; showValue(x, os); return os.str(); }());
    const Case c = load_case(campaign_case(grown, x.seed, x.index), grown, load);
    const auto load_why = x.d.caps.refusal(c.problem);
    if (load_why) RC_FAIL("the load case " + to_string(c.problem) + " is refused (" + *load_why + ")");
  }
}

// A kernel that declares no head dims takes any: its campaign draws the usual grid and values off
// it, most of them not multiples of 8 (issue #21 item 7: such a kernel was drawn the grid 16..256,
// a plugin 8..256 in steps of 8, so a kernel whose loads assume D % 8 == 0 passed). The replica,
// which computes any head dim, declares none.
TEST(DeclaredSpace, NoDeclaredHeadDimsDrawsOffTheGrid) {
  const std::vector<Declaration> none{{"nothing declared", Capabilities{}},
                                      {"replica", Registry::builtin().find("replica")->caps()}};
  for (const Declaration& d : none) {
    SCOPED_TRACE(d.name);
    EXPECT_TRUE(d.caps.head_dims.empty()) << "declares head dims";
    const ProblemSpace space = space_for(d.caps, CampaignOptions{});
    const uint64_t seed = testing::seed_for(0x0ff9);
    int64_t off = 0, n = 300;
    for (int64_t i = 0; i < n; ++i) {
      const Problem p = campaign_case(space, seed, i).problem;
      off += p.head_dim_qk % 8 != 0 || p.head_dim_v % 8 != 0;
      EXPECT_EQ(d.caps.refusal(p), std::nullopt) << to_string(p);
    }
    EXPECT_GE(off, n / 5) << "campaign seed " << seed << ": " << off << " of " << n << " cases off the multiples of 8";
  }
}

// Shrinking stays inside the declaration too (a candidate outside it is only declined: a step
// wasted), and lengths still shrink where Sq = Skv and multiples are declared.
RC_GTEST_PROP(DeclaredSpace, ShrinkCandidatesStayInsideTheDeclaration, ()) {
  const std::vector<Declaration> all = declarations();
  Drawn x;
  x.d = all[*rc::gen::inRange<size_t>(0, all.size())];
  x.seed = *rc::gen::arbitrary<uint64_t>();
  x.index = *rc::gen::inRange<int64_t>(0, 100000);
  const ProblemSpace space = space_for(x.d.caps, CampaignOptions{});
  RC_PRE(!space.dtypes.empty());
  x.c = campaign_case(space, x.seed, x.index);
  RC_TAG(x.d.name);
  const Problem& p = x.c.problem;
  bool shorter = false;
  for (const Problem& q : smaller_problems(p, x.d.caps)) {
    const auto why = x.d.caps.refusal(q);
    if (why) RC_FAIL("candidate " + to_string(q) + " refused (" + *why + ")");
    shorter |= q.seq_q < p.seq_q || q.seq_kv < p.seq_kv;
  }
  const int64_t shortest = std::max<int64_t>(1, x.d.caps.seq_multiple);
  if (!p.varlen() && !p.paged() && p.seqused_kv.empty() && std::min(p.seq_q, p.seq_kv) > shortest) RC_ASSERT(shorter);
}

// The replica under another declaration: what a kernel with that declaration computes.
class Declaring final : public Variant {
 public:
  Declaring(std::string name, Capabilities caps) : name_(std::move(name)), caps_(std::move(caps)) {}
  std::string name() const override { return name_; }
  const Capabilities& caps() const override { return caps_; }
  void forward(const Problem& p, const KernelArgs& a) const override { replica_->forward(p, a); }

 private:
  std::string name_;
  Capabilities caps_;
  std::shared_ptr<Variant> replica_ = make_replica_variant();
};

// The whole campaign, end to end: a kernel that declares wgmma_f16's pairs is handed only those,
// and every case is judged.
TEST(DeclaredSpace, ACampaignOfSparsePairsSkipsNoCase) {
  Declaring v("sparse_pairs", sparse_pairs());
  CampaignOptions opt;
  opt.cases = 40;  // today's draw skips ~1 case in 4: all 40 judged by chance in ~1e-5
  opt.seed = testing::seed_for(0x5ba25e);
  opt.max_seq = 96;  // cheap cases: the point is which head dims are drawn
  opt.shrink = false;
  opt.progress = false;
  std::ostringstream log;
  const VariantSummary s = run_campaign(v, opt, log);
  std::string why;
  for (const auto& [reason, n] : s.skipped_by) why += "\n  " + std::to_string(n) + "x " + reason;
  EXPECT_EQ(s.skipped, 0) << "campaign seed " << opt.seed << " skipped:" << why;
  EXPECT_EQ(s.failed, 0) << log.str();
  EXPECT_EQ(s.passed, opt.cases);
}

}  // namespace
}  // namespace flashcheck
