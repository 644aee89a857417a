// The tile each built-in GPU kernel launches equals the tile it declares, for every head dim and
// causal mode it declares (gpu/common/launched_tile.h). A declaration that disagrees with the
// launch aims the campaigns at the wrong tile boundaries and the replica at the wrong blocking,
// and no output check sees it: wgmma_f16's causal dispatch forced to the non-causal configuration
// (N = 176 instead of the declared 128) survived the standard device check
// (tools/mutate/DETECTION.md, COND-wgmma_f16.cu-4e72fca5). Without a GPU: SKIPPED.
#include <gtest/gtest.h>

#include <cstdio>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "gpu/common/launched_tile.h"
#include "reference/inputs.h"
#include "runner/device.h"
#include "runner/harness.h"
#include "runner/registry.h"
#include "testing/test_seed.h"

namespace flashcheck {
namespace {

TEST(LaunchedTile, EqualsTheDeclaredTileForEveryHeadDimAndCausalMode) {
  if (auto why = device::unavailable()) GTEST_SKIP() << *why;
  int compared = 0;
  std::set<std::string> no_block_kv;
  for (const auto& v : Registry::builtin().all()) {
    const Capabilities& c = v->caps();
    if (c.memory != Memory::device) continue;
    if (auto why = v->unavailable()) {
      std::printf("%s: not run here (%s)\n", v->name().c_str(), why->c_str());
      continue;
    }
    std::vector<std::pair<int64_t, int64_t>> dims = c.head_dim_pairs;
    if (dims.empty())
      for (int64_t d : c.head_dims) dims.emplace_back(d, d);
    for (Causal causal : c.causals)
      for (auto [dqk, dv] : dims) {
        // Tails in both dimensions and more than one KV tile of every declared size.
        const Problem p{1, 2, 1, 77, 301, dqk, dv, causal, {}, c.dtypes.front()};
        if (auto why = v->unsupported(p)) continue;
        const Inputs in = make_inputs(p, flashcheck::testing::seed_for(91));
        kernels::clear_launched_tile();
        (void)run_variant(*v, p, in);
        const kernels::LaunchedTile t = kernels::last_launched_tile();
        const TileShape want = c.tile_for(dqk, causal != Causal::none);
        const std::string where = v->name() + " dqk=" + std::to_string(dqk) + " dv=" + std::to_string(dv) +
                                  " causal=" + std::string(to_string(causal));
        ASSERT_NE(t.kernel, nullptr) << where << ": the launcher noted no tile (gpu/common/launched_tile.h)";
        EXPECT_EQ(t.block_q, want.block_q) << where << ": launched " << t.kernel << " with block_q " << t.block_q
                                           << ", declares " << want.block_q;
        if (t.block_kv == 0)
          no_block_kv.insert(v->name());
        else
          EXPECT_EQ(t.block_kv, want.block_kv) << where << ": launched " << t.kernel << " with block_kv " << t.block_kv
                                               << ", declares " << want.block_kv;
        ++compared;
      }
  }
  if (compared == 0) GTEST_SKIP() << "no device kernel runs on this GPU";
  std::printf("compared %d launches;", compared);
  if (!no_block_kv.empty()) {
    std::printf(" block_q only (the launcher does not say its KV tile):");
    for (const auto& n : no_block_kv) std::printf(" %s", n.c_str());
  }
  std::printf("\n");
}

}  // namespace
}  // namespace flashcheck
