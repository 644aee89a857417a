// The registry, the plugin ABI and the harness on the CPU: a correct plugin passes a campaign, and
// each deliberately broken kernel is failed for exactly its fault.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include <sstream>

#include "runner/campaign.h"
#include "testing/test_seed.h"
#include "runner/device.h"
#include "runner/guarded_buffer.h"
#include "runner/harness.h"
#include "runner/registry.h"

namespace flashcheck {
namespace {

CampaignOptions quick(int64_t cases) {
  CampaignOptions o;
  o.cases = cases;
  o.seed = flashcheck::testing::seed_for(61);
  o.max_seq = 160;
  o.max_work = 4e6;
  o.progress = false;
  return o;
}

TEST(Registry, HoldsTheReplicaOnEveryMachine) {
  auto v = Registry::builtin().find("replica");
  ASSERT_TRUE(v);
  EXPECT_FALSE(v->unavailable());
  EXPECT_EQ(v->caps().memory, Memory::host);
}

// Kernels register themselves from static initialisers nothing references: if the linker dropped
// them, the registry would come up short without a word. Every kernel CMake built must be there.
TEST(Registry, HoldsEveryKernelTheBuildCompiled) {
  std::string built = FLASHCHECK_BUILT_KERNELS;
  size_t n = 0;
  for (size_t at = 0; at < built.size();) {
    const size_t comma = std::min(built.find(',', at), built.size());
    const std::string name = built.substr(at, comma - at);
    at = comma + 1;
    if (name.empty()) continue;
    ++n;
    auto v = Registry::builtin().find(name);
    ASSERT_TRUE(v) << "kernel '" << name << "' was compiled but never registered";
    EXPECT_EQ(v->caps().memory, Memory::device) << name;
    EXPECT_GT(v->caps().min_sm, 0) << name;
    EXPECT_FALSE(v->caps().tiles.empty()) << name;
  }
  EXPECT_EQ(Registry::builtin().all().size(), n + 1) << "the replica plus the compiled kernels";
}

TEST(Registry, DeviceVariantsAreUnavailableWithoutAGpuNeverSilentlyPassed) {
  if (!device::unavailable()) GTEST_SKIP() << "a GPU is present; gpu_variants_test covers it";
  for (auto& v : Registry::builtin().all()) {
    if (v->caps().memory != Memory::device) continue;
    std::ostringstream log;
    VariantSummary s = run_campaign(*v, quick(3), log);
    EXPECT_TRUE(s.unavailable) << v->name();
    EXPECT_EQ(s.passed + s.failed, 0) << v->name();
  }
}

TEST(Registry, ReplicaPassesACampaign) {
  std::ostringstream log;
  VariantSummary s = run_campaign(*Registry::builtin().find("replica"), quick(40), log);
  EXPECT_EQ(s.failed, 0) << log.str();
  EXPECT_GT(s.passed, 30);
}

TEST(Plugin, ExampleCpuPluginLoadsAndPassesACampaign) {
  // Through ABI 2 (the library exports both entries): every dtype it declares, none declined.
  auto kernels = load_plugin(FLASHCHECK_EXAMPLE_PLUGIN);
  ASSERT_EQ(kernels.size(), 1u);
  EXPECT_EQ(kernels[0]->name(), "example_cpu_plugin");
  EXPECT_EQ(kernels[0]->caps().lse_base, LseBase::two);
  std::ostringstream log;
  VariantSummary s = run_campaign(*kernels[0], quick(40), log);
  EXPECT_EQ(s.failed, 0) << log.str();
  EXPECT_EQ(s.passed, 40) << log.str();
  // Through ABI 1, as a flashcheck that predates ABI 2 loads it: plain problems, f16 declined.
  auto old = load_plugin_abi1(FLASHCHECK_EXAMPLE_PLUGIN);
  ASSERT_EQ(old.size(), 1u);
  EXPECT_EQ(old[0]->caps().dtypes, (std::vector<DType>{DType::f32, DType::f16, DType::bf16}));
  std::ostringstream log1;
  VariantSummary s1 = run_campaign(*old[0], quick(40), log1);
  EXPECT_EQ(s1.failed, 0) << log1.str();
  EXPECT_GT(s1.passed, 10);
  EXPECT_GT(s1.skipped, 0);  // f16 is declined by its supports(): counted, not failed
}

// ABI 1.1: a kernel folder built as a module (gpu/plugin/kernel_module.cpp) declares its
// Capabilities as the plugin's space, so a campaign on it draws from that space and aims at its tiles
// exactly as on a built-in kernel; without the space every f16/bf16 case and most head dims would be
// drawn and skipped, and the tiles would be the default 128x128.
TEST(Plugin, ModuleDeclaresItsSpaceAndTiles) {
  auto kernels = load_plugin(FLASHCHECK_HOST_MODULE);
  ASSERT_EQ(kernels.size(), 1u);
  const auto& v = *kernels[0];
  EXPECT_EQ(v.name(), "host_attention.module");
  const Capabilities& c = v.caps();
  EXPECT_EQ(c.dtypes, std::vector<DType>{DType::f32});
  EXPECT_EQ(c.head_dims, (std::vector<int64_t>{16, 32, 64}));
  EXPECT_FALSE(c.dv_ne_dqk);
  EXPECT_TRUE(c.gqa);
  EXPECT_EQ(c.max_seq, 4096);
  EXPECT_EQ(c.tiles, (std::vector<TileShape>{{16, 16, 24, -1}, {64, 32, 40, -1}}));
  const ProblemSpace space = space_for(c, quick(1));
  ASSERT_EQ(space.tiles.size(), 3u);  // one row per declared head dim, from the declared tiles
  EXPECT_EQ(space.tiles[0].block_kv, 24);
  EXPECT_EQ(space.tiles[2].block_q, 32);
  // The judge names failing tiles with the module's tiles too (Declared), per head dim.
  EXPECT_EQ(v.declared(Problem{1, 1, 1, 5, 5, 32, 32, Causal::none, {}, DType::f32}).tile_kv, 40);
  std::ostringstream log;
  VariantSummary s = run_campaign(v, quick(30), log);
  EXPECT_EQ(s.failed, 0) << log.str();
  EXPECT_EQ(s.skipped, 0) << "every case drawn from the declared space is one the module computes\n" << log.str();
  EXPECT_EQ(s.passed, 30);
}

TEST(Plugin, MissingLibraryOrEntryIsAClearError) {
  EXPECT_THROW(load_plugin("/nonexistent/plugin.so"), std::runtime_error);
  try {
    // A real library without the entry point, by its full path: a name without a slash is a file in
    // the working directory (README, "Reliability").
    Dl_info libm{};
    ASSERT_NE(dladdr(reinterpret_cast<void*>(static_cast<double (*)(double)>(&::cos)), &libm), 0);
    load_plugin(libm.dli_fname);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("flashcheck_get_kernel"), std::string::npos);
  }
}

// One case a broken kernel must fail, and the criterion it must fail by.
void expect_caught(const std::string& kernel, const std::string& criterion) {
  auto kernels = load_plugin(FLASHCHECK_BROKEN_PLUGINS);
  std::shared_ptr<Variant> v;
  for (auto& k : kernels)
    if (k->name() == kernel) v = k;
  ASSERT_TRUE(v) << kernel;
  Case c{Problem{1, 2, 1, 37, 45, 32, 32, Causal::bottom_right, {}, DType::bf16}, Dist::normal,
         flashcheck::testing::seed_for(62)};
  CaseOutcome o = run_case(*v, c, 4096);
  ASSERT_FALSE(o.skipped);
  EXPECT_FALSE(o.passed) << kernel;
  auto failed = o.report.failed();
  EXPECT_NE(std::find(failed.begin(), failed.end(), criterion), failed.end()) << kernel << "\n" << to_text(o.report);
}

// An untouched buffer of any byte count, odd ones included (fp8 inputs of an odd head dim), has an
// intact fence; one byte written past the payload is counted.
TEST(Harness, GuardsAreIntactForEveryPayloadSizeAndCatchOneByte) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{2}, size_t{3}, size_t{69}, size_t{4097}}) {
    GuardedBuffer b(Memory::host, n);
    EXPECT_EQ(b.damaged_guard_bytes(), 0) << n << " bytes";
    b.payload_host()[n] ^= 0x5a;  // the first byte past the payload
    EXPECT_EQ(b.damaged_guard_bytes(), 1) << n << " bytes";
  }
}

// FLASHCHECK_GUARD_BYTES sets the fence (0 under compute-sanitizer memcheck, so that a read past a
// tensor's end reaches memory the sanitizer knows is not the buffer's); malformed values are bad
// input, named.
TEST(Harness, GuardBytesFollowTheEnvironment) {
  struct Restore {
    ~Restore() { unsetenv("FLASHCHECK_GUARD_BYTES"); }
  } restore;
  unsetenv("FLASHCHECK_GUARD_BYTES");
  EXPECT_EQ(guard_bytes(), kGuardBytes);
  setenv("FLASHCHECK_GUARD_BYTES", "0", 1);
  GuardedBuffer bare(Memory::host, 69);
  EXPECT_EQ(bare.payload_host(), static_cast<uint8_t*>(bare.kernel_ptr()));
  EXPECT_EQ(bare.damaged_guard_bytes(), 0);
  setenv("FLASHCHECK_GUARD_BYTES", "512", 1);
  GuardedBuffer small(Memory::host, 69);
  EXPECT_EQ(small.damaged_guard_bytes(), 0);
  small.payload_host()[69 + 511] ^= 1;  // the fence's last byte
  EXPECT_EQ(small.damaged_guard_bytes(), 1);
  for (const char* bad : {"100", "abc", "-256", "2147483648", "99999999999"}) {
    setenv("FLASHCHECK_GUARD_BYTES", bad, 1);
    try {
      guard_bytes();
      ADD_FAILURE() << bad << " accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("FLASHCHECK_GUARD_BYTES"), std::string::npos) << e.what();
    }
  }
}

TEST(Harness, CatchesAWritePastTheOutput) { expect_caught("broken_oob_write", "out_of_bounds"); }
TEST(Harness, CatchesAnUnwrittenRow) { expect_caught("broken_unwritten_row", "unwritten"); }
TEST(Harness, CatchesAnLseInTheWrongBase) { expect_caught("broken_lse_base", "lse"); }

// A buffer of an odd byte count (fp8 inputs with an odd head dim: 1 byte per element) is fenced
// like any other: untouched, no canary byte reads as damaged (its last byte was never filled, and
// every fp8 problem of odd size reported out_of_bounds: a false alarm), and one byte written past
// the payload is counted.
TEST(Harness, OddSizedBuffersAreFencedWhole) {
  for (size_t payload : {size_t{1}, size_t{3}, size_t{151}, size_t{4096}}) {
    GuardedBuffer untouched(Memory::host, payload);
    EXPECT_EQ(untouched.damaged_guard_bytes(), 0) << payload << " bytes";
    GuardedBuffer overrun(Memory::host, payload);
    overrun.payload_host()[payload] ^= 0xFF;
    EXPECT_EQ(overrun.damaged_guard_bytes(), 1) << payload << " bytes";
  }
  const CaseOutcome o = run_case(*Registry::builtin().find("replica"),
                                 Case{parse_problem("b=1 hq=1 hkv=1 sq=1 skv=1 d=3 dtype=e4m3 odtype=f16"), Dist::normal, 5}, 4096);
  EXPECT_TRUE(o.passed) << to_text(o.report);
}

TEST(Campaign, FailuresShrinkToASmallerProblemThatStillFails) {
  auto kernels = load_plugin(FLASHCHECK_BROKEN_PLUGINS);
  std::shared_ptr<Variant> v;
  for (auto& k : kernels)
    if (k->name() == "broken_lse_base") v = k;
  Case c{Problem{2, 4, 2, 97, 113, 64, 64, Causal::top_left, {}, DType::bf16}, Dist::outlier_keys, 5};
  CaseOutcome o = run_case(*v, c, 4096);
  ASSERT_FALSE(o.passed);
  CaseOutcome s = shrink_failure(*v, o, 4096);
  EXPECT_FALSE(s.passed);
  EXPECT_EQ(s.c.problem.batch, 1);
  EXPECT_LE(s.c.problem.seq_q, 2);
  EXPECT_LE(s.c.problem.seq_kv, 2);
  EXPECT_EQ(s.c.dist, Dist::normal);
}

TEST(Campaign, SameSeedSameProblemsOnEveryShard) {
  ProblemSpace space;
  for (int64_t i = 0; i < 20; ++i) {
    Case a = campaign_case(space, 99, i), b = campaign_case(space, 99, i);
    EXPECT_EQ(a.problem, b.problem);
    EXPECT_EQ(a.seed, b.seed);
  }
  EXPECT_NE(to_string(campaign_case(space, 99, 0).problem) + std::to_string(campaign_case(space, 99, 0).seed),
            to_string(campaign_case(space, 100, 0).problem) + std::to_string(campaign_case(space, 100, 0).seed));
}

}  // namespace
}  // namespace flashcheck
