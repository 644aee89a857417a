// Every default campaign launches a few grids wider than any GPU's resident CTAs (issue #21 item 7):
// a persistent kernel that forgets its grid-stride loop passed every default size (the widest was
// B·Hq·ceil(Sq/128) = 48 CTAs). On a CPU the cases are checked as drawn (and cheap); a host
// stand-in for such a kernel shows a default campaign now catches it.
#include <gtest/gtest.h>

#include <cstring>
#include <sstream>
#include <string>

#include "fuzz/wide_grid.h"
#include "runner/campaign.h"
#include "runner/registry.h"
#include "testing/test_seed.h"
#include "verify/metrics.h"

namespace flashcheck {
namespace {

// The most CTAs any current GPU keeps resident at once (148 SMs × 32).
constexpr int64_t kMostResident = 148 * 32;

struct Declaration {
  std::string name;
  Capabilities caps;
};

std::vector<Declaration> declarations() {
  std::vector<Declaration> out;
  for (const auto& v : Registry::builtin().all()) out.push_back({v->name(), v->caps()});
  out.push_back({"nothing declared", Capabilities{}});
  Capabilities mha;
  mha.gqa = false;
  mha.dtypes = {DType::bf16};
  mha.head_dims = {256};
  out.push_back({"MHA, D = 256", mha});
  return out;
}

// In its first 100 cases every default campaign has wide ones (its launch grid, at the kernel's
// own query tile, past every GPU's resident CTAs), each inside the declaration and cheap.
TEST(WideGrids, EveryDefaultCampaignLaunchesSome) {
  const uint64_t seed = testing::seed_for(0x31de);
  for (const Declaration& d : declarations()) {
    SCOPED_TRACE(d.name + ", campaign seed " + std::to_string(seed));
    const ProblemSpace space = space_for(d.caps, CampaignOptions{});
    if (space.dtypes.empty()) continue;
    int64_t wide = 0;
    for (int64_t i = 0; i < 100; ++i) {
      const Problem p = campaign_case(space, seed, i).problem;
      const TileShape t = d.caps.tile_for(p.head_dim_qk, p.causal != Causal::none);
      if (grid_ctas(p, t.block_q) <= kMostResident) continue;
      ++wide;
      EXPECT_EQ(d.caps.refusal(p), std::nullopt) << to_string(p);
      const double work = static_cast<double>(p.batch * p.heads_q * p.seq_q * p.seq_kv * (p.head_dim_qk + p.head_dim_v));
      EXPECT_LE(work, CampaignOptions{}.max_work) << to_string(p);
      EXPECT_LE(p.q_elems() + p.k_elems() + p.v_elems() + p.o_elems(), kWideGridElements) << to_string(p);
    }
    EXPECT_GE(wide, 3) << "wide cases in the first 100";
  }
}

// Where the space cannot hold a wide case (lengths that must be long, or listed batches) the drawn
// case stays as drawn: a wide case never leaves the declaration.
TEST(WideGrids, ASpaceThatCannotHoldOneKeepsTheDrawnCase) {
  Capabilities long_rows;
  long_rows.equal_lengths = true;
  long_rows.seq_multiple = 256;
  long_rows.head_dims = {128};
  const ProblemSpace space = space_for(long_rows, CampaignOptions{});
  for (int64_t i = 0; i < 100; ++i) {
    const Problem p = campaign_case(space, 7, i).problem;
    EXPECT_EQ(long_rows.refusal(p), std::nullopt) << to_string(p);
    EXPECT_LE(p.batch, space.max_batch) << to_string(p);
  }
}

// The replica, but launched as a persistent kernel sized for an H100 at full occupancy: 132 × 32
// CTAs, each computing one (batch, head, query tile) and no more (no grid-stride loop). Tiles past
// the launch keep the harness's poison.
class PersistentWithoutGridStride final : public Variant {
 public:
  PersistentWithoutGridStride() {
    caps_.dtypes = {DType::f32, DType::f16, DType::bf16};
    caps_.tiles = {{0, 128, 64}};
  }
  std::string name() const override { return "persistent_without_grid_stride"; }
  const Capabilities& caps() const override { return caps_; }
  void forward(const Problem& p, const KernelArgs& a) const override {
    replica_->forward(p, a);
    const int64_t bm = caps_.tiles[0].block_q, tiles = (p.seq_q + bm - 1) / bm, launched = 132 * 32;
    const size_t eb = static_cast<size_t>(dtype_bytes(p.o_dtype()));
    const uint32_t poison = poison_bits(p.o_dtype());
    for (int64_t cta = launched; cta < p.batch * p.heads_q * tiles; ++cta) {
      const int64_t b = cta / (p.heads_q * tiles), h = cta / tiles % p.heads_q, t = cta % tiles;
      for (int64_t i = t * bm; i < std::min(p.seq_q, (t + 1) * bm); ++i) {
        char* row = static_cast<char*>(a.o.data) + (b * a.o.stride_outer + i * a.o.stride_seq + h * a.o.stride_head) * eb;
        for (int64_t c = 0; c < p.head_dim_v; ++c) std::memcpy(row + c * eb, &poison, eb);
      }
    }
  }

 private:
  Capabilities caps_;
  std::shared_ptr<Variant> replica_ = make_replica_variant();
};

TEST(WideGrids, APersistentKernelWithoutItsGridStrideLoopFailsADefaultCampaign) {
  PersistentWithoutGridStride v;
  CampaignOptions opt;
  opt.cases = 100;  // the default campaign's size
  opt.seed = testing::seed_for(0x31df);
  opt.shrink = false;
  opt.progress = false;
  std::ostringstream log;
  const VariantSummary s = run_campaign(v, opt, log);
  EXPECT_GT(s.failed, 0) << "campaign seed " << opt.seed;
  EXPECT_GT(s.failed_by.count("unwritten"), 0u) << log.str();
  EXPECT_EQ(s.skipped, 0) << log.str();
}

}  // namespace
}  // namespace flashcheck
