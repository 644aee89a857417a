// GPU variants against the oracle. Without a GPU every test here reports SKIPPED, never passed.
#include <gtest/gtest.h>

#include <cstring>
#include <sstream>

#include "fuzz/campaign.h"
#include "fuzz/test_seed.h"
#include "gpu/device.h"
#include "gpu/harness.h"
#include "gpu/registry.h"
#include "reference/replica.h"
#include "verify/metrics.h"

namespace flashcheck {
namespace {

std::vector<std::shared_ptr<Variant>> device_variants() {
  std::vector<std::shared_ptr<Variant>> out;
  for (auto& v : Registry::builtin().all())
    if (v->caps().memory == Memory::device) out.push_back(v);
  return out;
}

#define REQUIRE_GPU()                                                   \
  do {                                                                  \
    if (auto why = device::unavailable()) GTEST_SKIP() << *why;         \
    if (device_variants().empty()) GTEST_SKIP() << "no device variant"; \
  } while (0)

TEST(GpuVariants, EachPassesACampaign) {
  REQUIRE_GPU();
  for (auto& v : device_variants()) {
    CampaignOptions o;
    o.cases = 300;
    o.seed = flashcheck::testing::seed_for(71);
    o.max_seq = 600;
    o.max_work = 2e8;
    o.progress = false;
    std::ostringstream log;
    VariantSummary s = run_campaign(*v, o, log);
    EXPECT_EQ(s.failed, 0) << v->name() << "\n" << log.str();
    EXPECT_GT(s.passed, 0) << v->name();
    std::printf("%s: %lld passed, %lld skipped, worst cos %.9f\n", v->name().c_str(), static_cast<long long>(s.passed),
                static_cast<long long>(s.skipped), s.worst_cos);
  }
}

TEST(GpuVariants, EdgeShapesPass) {
  REQUIRE_GPU();
  const std::vector<Problem> shapes{
      {1, 1, 1, 1, 1, 64, 64, Causal::none, {}, DType::f32},
      {1, 2, 1, 1, 1000, 128, 128, Causal::bottom_right, {}, DType::f32},
      {1, 2, 2, 1000, 1, 64, 64, Causal::bottom_right, {}, DType::f32},  // 999 empty rows
      {2, 8, 2, 129, 257, 256, 256, Causal::top_left, {}, DType::f32},
      {1, 4, 4, 257, 129, 192, 128, Causal::bottom_right, {}, DType::f32},
      {1, 3, 1, 4097, 4097, 64, 64, Causal::bottom_right, {}, DType::f32},
  };
  for (auto& v : device_variants())
    for (const Problem& p : shapes) {
      CaseOutcome o = run_case(*v, Case{p, Dist::normal, flashcheck::testing::seed_for(72)}, 4096);
      if (o.skipped) continue;
      EXPECT_TRUE(o.passed) << v->name() << "\n" << to_text(o.report);
    }
}

TEST(GpuVariants, AgreeWithTheReplicaAtTheirOwnNumerics) {
  REQUIRE_GPU();
  Problem p{2, 4, 2, 300, 333, 64, 64, Causal::bottom_right, {}, DType::f32};
  const Inputs in = make_inputs(p, flashcheck::testing::seed_for(73));
  for (auto& v : device_variants()) {
    ReplicaConfig cfg;
    cfg.block_q = v->caps().tile_q;
    cfg.block_kv = v->caps().tile_kv;
    cfg.round_p = false;  // fp32 kernels keep P in fp32
    cfg.finite_neg_inf = false;
    cfg.use_exp2 = v->name() == "warp_f32x4";
    ReplicaResult rep = replica_attention(p, in, cfg);
    HarnessResult h = run_variant(*v, p, in);
    uint64_t worst = 0;
    for (size_t i = 0; i < rep.o.size(); ++i) worst = std::max(worst, ulp_distance(DType::f32, rep.o[i], h.result.o[i]));
    std::printf("%s vs replica(Br=%lld, Bc=%lld): max %llu f32 ULP\n", v->name().c_str(),
                static_cast<long long>(cfg.block_q), static_cast<long long>(cfg.block_kv),
                static_cast<unsigned long long>(worst));
    EXPECT_LT(worst, 4096u) << v->name();
  }
}

TEST(GpuVariants, AreDeterministic) {
  REQUIRE_GPU();
  Problem p{2, 4, 2, 513, 700, 128, 128, Causal::top_left, {}, DType::f32};
  const Inputs in = make_inputs(p, flashcheck::testing::seed_for(74));
  for (auto& v : device_variants()) {
    HarnessResult first = run_variant(*v, p, in);
    for (int r = 0; r < 20; ++r) {
      HarnessResult again = run_variant(*v, p, in);
      ASSERT_EQ(std::memcmp(first.result.o.data(), again.result.o.data(), first.result.o.size() * 4), 0) << v->name();
      ASSERT_EQ(std::memcmp(first.result.lse->data(), again.result.lse->data(), first.result.lse->size() * 4), 0);
    }
  }
}

}  // namespace
}  // namespace flashcheck
