// A kernel folder's backward through a kernel module (gpu/plugin/kernel_module.cpp built with
// FC_MODULE_BACKWARD): the host module's KernelDef::backward exported as ABI 2's backward entry, its
// own declared space (BackwardCaps: head dims 16 and 32, plain problems) and its determinism
// crossing, judged by `run --backward` like any plugin's; the same folder built without the flag
// is the forward's module as before. This is the path tools/mutate build --plugin-backward takes
// for mma_f16's backward mutants.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

#include "runner/backward_campaign.h"
#include "runner/isolation.h"
#include "testing/test_seed.h"

namespace flashcheck {
namespace {

const std::string kForwardModule = FLASHCHECK_HOST_MODULE, kBackwardModule = FLASHCHECK_HOST_BACKWARD_MODULE;
const std::string kName = "host_attention.module";

std::shared_ptr<Variant> only_kernel(const std::vector<std::shared_ptr<Variant>>& vs) {
  EXPECT_EQ(vs.size(), 1u);
  if (vs.empty()) return nullptr;
  EXPECT_EQ(vs[0]->name(), kName);
  return vs[0];
}

IsolationOptions isolated() {
  IsolationOptions o;
  o.enabled = true;
  o.worker_exe = FLASHCHECK_BINARY;
  o.timeout_s = 60;
  return o;
}

int exit_code(const std::string& cmd) {
  const int st = std::system((cmd + " > /dev/null 2>&1").c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

TEST(BackwardModule, DeclaresTheBackwardsSpaceAndDeterminism) {
  auto fwd = only_kernel(load_plugin(kForwardModule));
  auto bwd = only_kernel(load_plugin(kBackwardModule));
  ASSERT_TRUE(fwd && bwd);
  // Without the flag: the forward's module, as before (no backward, the forward's whole space).
  EXPECT_EQ(fwd->backward_caps(), nullptr);
  EXPECT_EQ(fwd->caps().head_dims, (std::vector<int64_t>{16, 32, 64}));
  EXPECT_TRUE(fwd->caps().windows && fwd->caps().paged);
  // With it: the backward, deterministic, and the declared space is backward_space(forward caps,
  // the folder's BackwardCaps), which is also what a backward campaign on the module draws from.
  ASSERT_NE(bwd->backward_caps(), nullptr);
  EXPECT_TRUE(bwd->backward_caps()->deterministic);
  const Capabilities want = backward_space(fwd->caps(), BackwardCaps{.dtypes = {}, .head_dims = {16, 32}, .deterministic = true,
                                                                    .variants = false});
  const std::vector<std::shared_ptr<Variant>> as_declared{bwd};
  const CaseRunner runner = backward_runner(*bwd, CampaignOptions{});
  for (const Capabilities* c : {&bwd->caps(), &runner.space}) {
    EXPECT_EQ(c->dtypes, want.dtypes);
    EXPECT_EQ(c->head_dims, (std::vector<int64_t>{16, 32}));
    EXPECT_EQ(c->head_dims, want.head_dims);
    EXPECT_EQ(c->causals, want.causals);
    EXPECT_EQ(c->gqa, want.gqa);
    EXPECT_EQ(c->max_seq, want.max_seq);
    EXPECT_EQ(c->tiles, want.tiles);  // the forward's tiles, as a built-in kernel's backward campaign aims at
    EXPECT_EQ(c->layouts, std::vector<Layout>{Layout::bhsd});
    EXPECT_FALSE(c->windows || c->softcap || c->seqused || c->paged || c->sinks || !c->alibi.empty());
  }
  // supports() is the backward's space: Dqk = 64 is the forward's alone.
  const Problem d64 = parse_problem("b=1 hq=2 hkv=1 sq=9 skv=9 d=64 dtype=f32");
  EXPECT_FALSE(fwd->unsupported(d64));
  EXPECT_TRUE(bwd->unsupported(d64));
  EXPECT_FALSE(bwd->unsupported(parse_problem("b=1 hq=2 hkv=1 sq=9 skv=9 d=32 dtype=f32")));
  // The isolated description (the CLI's path) says the same.
  auto described = only_kernel(describe_plugin(kBackwardModule, isolated()));
  ASSERT_TRUE(described && described->backward_caps());
  EXPECT_EQ(describe_variants({described}), describe_variants(as_declared));
}

TEST(BackwardModule, PassesFreshBackwardCampaigns) {
  for (bool isolate : {true, false}) {
    auto v = only_kernel(isolate ? describe_plugin(kBackwardModule, isolated()) : load_plugin(kBackwardModule));
    ASSERT_TRUE(v);
    CampaignOptions o;
    o.cases = isolate ? 20 : 10;
    o.seed = testing::seed_for(isolate ? 0xb3d1 : 0xb3d2);
    o.progress = false;
    o.plugin = kBackwardModule;
    o.max_seq = 80;
    o.max_work = 2e6;
    o.isolation = isolate ? isolated() : IsolationOptions{};
    o.confirm_runs = 1;
    std::ostringstream log;
    const VariantSummary s = run_campaign(*v, backward_runner(*v, o), o, log);
    SCOPED_TRACE("isolated " + std::to_string(isolate) + ", campaign seed " + std::to_string(o.seed) + "\n" + log.str());
    EXPECT_EQ(s.failed, 0);
    EXPECT_EQ(s.skipped, 0) << "every case drawn from the declared space is one the module's backward computes";
    EXPECT_EQ(s.passed, o.cases);
  }
}

// The CLI: a fixed problem inside the backward's space passes (its 3 calls bitwise equal), one
// outside it is skipped (125), and the module built without the flag has no backward (125).
TEST(BackwardModule, RunBackwardOnTheCommandLine) {
  const std::string bin = FLASHCHECK_BINARY;
  const std::string bwd = bin + " run --backward --plugin " + kBackwardModule + " --kernel " + kName;
  EXPECT_EQ(exit_code(bwd + " --problem 'b=2 hq=4 hkv=2 sq=37 skv=45 d=32 causal=bottom_right dtype=f32' --dist normal"), 0);
  EXPECT_EQ(exit_code(bwd + " --problem 'b=1 hq=3 hkv=1 sq=50 skv=17 d=16 causal=bottom_right dtype=f32' --dist normal"), 0);
  // The declared determinism reached the harness: a seed of the deterministic mode calls the
  // backward 3 times and compares them, one of the default mode calls it once and says so.
  for (bool deterministic : {true, false}) {
    const Case c{parse_problem("b=1 hq=2 hkv=1 sq=20 skv=30 d=16 causal=none dtype=f32"), Dist::normal,
                 seed_in_mode(testing::seed_for(0xde7), deterministic)};
    FILE* f = popen((bwd + " --problem '" + to_string(c.problem) + "' --input-seed " + std::to_string(c.seed) + " 2>&1").c_str(), "r");
    ASSERT_TRUE(f);
    std::string out;
    char buf[4096];
    while (size_t n = fread(buf, 1, sizeof buf, f)) out.append(buf, n);
    EXPECT_EQ(pclose(f), 0) << out;
    EXPECT_EQ(out.find("determinism: 0 ≤ 0 — 3 calls gave the same bits") != std::string::npos, deterministic) << out;
    EXPECT_EQ(out.find("the default mode (deterministic=false)") != std::string::npos, !deterministic) << out;
  }
  EXPECT_EQ(exit_code(bwd + " --problem 'b=1 hq=2 hkv=1 sq=9 skv=9 d=64 causal=none dtype=f32'"), 125);
  EXPECT_EQ(exit_code(bin + " run --backward --plugin " + kForwardModule + " --kernel " + kName + " --cases 1"), 125);
}

}  // namespace
}  // namespace flashcheck
