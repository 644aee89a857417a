// GPU variants against the oracle. Without a GPU every test here reports SKIPPED, never passed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <sstream>

#include "runner/campaign.h"
#include "testing/test_seed.h"
#include "runner/device.h"
#include "runner/harness.h"
#include "runner/registry.h"
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

// The harness fills every SM's shared memory before a checked launch (gpu/common/poison_smem.h):
// a launch of the same geometry right after it must find nothing but all-ones words, on every SM.
// After an ordinary kernel has run (one of the variants), the words are no longer all ones: the
// probe can tell.
TEST(GpuVariants, SharedMemoryIsPoisonedOnEverySm) {
  REQUIRE_GPU();
  const Problem p{2, 4, 2, 300, 300, 128, 128, Causal::none, {}, DType::bf16};
  const Inputs in = make_inputs(p, flashcheck::testing::seed_for(74));
  for (auto& v : device_variants()) {
    if (v->unsupported(p)) continue;
    (void)run_variant(*v, p, in);  // leaves the kernel's own tiles in shared memory
    EXPECT_NE(device::probe_shared_memory(), 0xFFFFFFFFu) << v->name() << " left nothing the probe can see";
    device::poison_shared_memory();
    EXPECT_EQ(device::probe_shared_memory(), 0xFFFFFFFFu) << "after poisoning, following " << v->name();
  }
}

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
      // Classes a campaign is unlikely to draw (issue #14), every one at a scale where most CTAs
      // are in flight: fully masked blocks at scale (most CTAs see no key),
      {2, 8, 8, 1000, 100, 128, 128, Causal::bottom_right, {}, DType::f32},
      // Sq >> Skv bottom-right with GQA,
      {1, 16, 4, 3000, 65, 64, 64, Causal::bottom_right, {}, DType::f32},
      // Skv = 1 at length, decode (Sq = 1) against a long Skv for many heads,
      {4, 8, 2, 777, 1, 128, 128, Causal::none, {}, DType::f32},
      {8, 32, 8, 1, 8191, 128, 128, Causal::bottom_right, {}, DType::f32},
      // and the last block partial in both dimensions, top-left with Sq < Skv.
      {3, 12, 4, 1025, 2049, 256, 256, Causal::top_left, {}, DType::f32},
  };
  for (auto& v : device_variants())
    for (Problem p : shapes)
      for (DType d : v->caps().dtypes) {
        p.dtype = d;
        CaseOutcome o = run_case(*v, Case{p, Dist::normal, flashcheck::testing::seed_for(72)}, 4096);
        if (o.skipped) continue;
        EXPECT_TRUE(o.passed) << v->name() << "\n" << to_text(o.report);
      }
}

TEST(GpuVariants, AgreeWithTheReplicaAtTheirOwnNumerics) {
  REQUIRE_GPU();
  for (auto& v : device_variants()) {
    Problem p{2, 4, 2, 300, 333, 64, 64, Causal::bottom_right, {}, v->caps().dtypes.front()};
    const Inputs in = make_inputs(p, flashcheck::testing::seed_for(73));
    ReplicaConfig cfg;
    const TileShape tile = v->caps().tile_for(p.head_dim_qk, p.causal != Causal::none);
    cfg.block_q = tile.block_q;
    cfg.block_kv = tile.block_kv;
    // The numerics the kernel declares it mirrors: never chosen by its name.
    cfg.round_p = v->caps().numerics.round_p;
    cfg.use_exp2 = v->caps().numerics.use_exp2;
    cfg.finite_neg_inf = false;
    ReplicaResult rep = replica_attention(p, in, cfg);
    HarnessResult h = run_variant(*v, p, in);
    // Relative to the output's scale: ULPs of outputs that cancel to near 0 say nothing.
    double scale = 0, worst = 0;
    for (float x : rep.o) scale = std::max(scale, static_cast<double>(std::fabs(x)));
    for (size_t i = 0; i < rep.o.size(); ++i) worst = std::max(worst, std::fabs(static_cast<double>(rep.o[i]) - h.o[i]));
    std::printf("%s vs replica(Br=%lld, Bc=%lld): max |diff| = %.3g = %.3g x max|O|\n", v->name().c_str(),
                static_cast<long long>(cfg.block_q), static_cast<long long>(cfg.block_kv), worst, worst / scale);
    if (p.dtype != DType::f32) {
      uint64_t ulp_max = 0;
      int64_t over1 = 0;
      for (size_t i = 0; i < rep.o.size(); ++i) {
        const uint64_t u = ulp_distance(p.dtype, rep.o[i], h.o[i]);
        ulp_max = std::max(ulp_max, u);
        over1 += u > 1;
      }
      std::printf("%s vs replica: max %llu %s ULP, %.4f%% of elements beyond 1 ULP\n", v->name().c_str(),
                  static_cast<unsigned long long>(ulp_max), std::string(to_string(p.dtype)).c_str(),
                  100.0 * static_cast<double>(over1) / static_cast<double>(rep.o.size()));
    }
    // fp32 kernels differ from the replica only by summation order; 16-bit ones also by where the
    // MMA rounds, bounded by one P rounding (u_p) of the output scale.
    EXPECT_LT(worst, (p.dtype == DType::f32 ? 1e-5 : 2 * unit_roundoff(p.dtype)) * scale) << v->name();
  }
}

TEST(GpuVariants, AreDeterministic) {
  REQUIRE_GPU();
  for (auto& v : device_variants()) {
    Problem p{2, 4, 2, 513, 700, 128, 128, Causal::top_left, {}, v->caps().dtypes.front()};
    const Inputs in = make_inputs(p, flashcheck::testing::seed_for(74));
    HarnessResult first = run_variant(*v, p, in);
    for (int r = 0; r < 20; ++r) {
      HarnessResult again = run_variant(*v, p, in);
      ASSERT_EQ(std::memcmp(first.o.data(), again.o.data(), first.o.size() * 4), 0) << v->name();
      ASSERT_EQ(std::memcmp(first.lse->data(), again.lse->data(), first.lse->size() * 4), 0);
    }
  }
}

}  // namespace
}  // namespace flashcheck
