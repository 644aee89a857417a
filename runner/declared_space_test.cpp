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
  x.c = campaign_case(space, x.seed, x.index);
  RC_TAG(x.d.name);
  const auto why = x.d.caps.refusal(x.c.problem);
  if (why) RC_FAIL("refused (" + *why + "): " + [&] { std::ostringstream os; showValue(x, os); return os.str(); }());
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
