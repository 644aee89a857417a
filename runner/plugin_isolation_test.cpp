// Everywhere a plugin's code runs, it runs in a worker process (runner/isolation.h): its loading
// (constructors, flashcheck_get_kernel, its declared space), its supports() and its unloading
// (destructors) — and a crash, hang or exit there is a verdict. Hangs are cut at a limit learned
// from the kernel's passing cases; a kept failure is re-run from scratch before it is called
// reproduced. The CLI's side is runner/reliability_cli_test.py.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>

#include "runner/case_time_limit.h"
#include "runner/campaign.h"
#include "runner/isolation.h"
#include "runner/registry.h"
#include "runner/reliability_fixtures.h"
#include "testing/test_seed.h"

namespace flashcheck {
namespace {

std::string lifecycle(const std::string& behaviour) { return std::string(FLASHCHECK_LIFECYCLE_DIR) + "/hostile_" + behaviour + ".so"; }

// Whether this process has mapped a library with this file name: a plugin described through a
// worker must never be.
bool mapped_here(const std::string& path) {
  std::ifstream maps("/proc/self/maps");
  const std::string name = "/" + std::filesystem::path(path).filename().string();
  for (std::string line; std::getline(maps, line);)
    if (line.size() >= name.size() && line.compare(line.size() - name.size(), name.size(), name) == 0) return true;
  return false;
}

std::shared_ptr<Variant> described(const std::string& lib, const std::string& name, const IsolationOptions& o = isolated()) {
  for (auto& v : describe_plugin(lib, o))
    if (v->name() == name) return v;
  ADD_FAILURE() << "no kernel " << name << " in " << lib;
  return nullptr;
}

// ---- loading -----------------------------------------------------------------------------------

struct LoadFailure {
  const char* behaviour;  // lifecycle library, or a FLASHCHECK_HOSTILE_SET of hostile_plugins
  const char* says;
};
void PrintTo(const LoadFailure& f, std::ostream* os) { *os << f.behaviour; }

class LoadFailures : public ::testing::TestWithParam<LoadFailure> {};

TEST_P(LoadFailures, AreCannotTestNamingThePluginAndWhatHappened) {
  const LoadFailure f = GetParam();
  const bool set = std::string(f.behaviour).find("ctor_") != 0;
  const std::string lib = set ? FLASHCHECK_HOSTILE_PLUGINS : lifecycle(f.behaviour);
  if (set) setenv("FLASHCHECK_HOSTILE_SET", f.behaviour, 1);
  IsolationOptions o = isolated();
  o.load_timeout_s = 1;
  try {
    describe_plugin(lib, o);
    ADD_FAILURE() << f.behaviour << ": loaded";
  } catch (const CannotTest& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("cannot test: plugin '" + lib + "'"), std::string::npos) << m;
    EXPECT_NE(m.find(f.says), std::string::npos) << m;
  }
  unsetenv("FLASHCHECK_HOSTILE_SET");
  EXPECT_FALSE(mapped_here(lib)) << lib << " was loaded into flashcheck's own process";
}

INSTANTIATE_TEST_SUITE_P(
    Loading, LoadFailures,
    ::testing::Values(LoadFailure{"ctor_segv", "crashed (SIGSEGV) while loading"},
                      LoadFailure{"ctor_hang", "timed out after 1 s while loading"},
                      LoadFailure{"ctor_exit", "exited 0 while loading"},
                      LoadFailure{"get_kernel_segv", "crashed (SIGSEGV) while loading"},
                      LoadFailure{"space_bad_pointer", "crashed (SIGSEGV) while loading"}),
    [](const ::testing::TestParamInfo<LoadFailure>& i) { return std::string(i.param.behaviour); });

// The worker's description is what loading here would give, field for field, for a plugin without
// a declared space, one with (ABI 1.1), and many kernels.
TEST(Loading, DescriptionIsWhatLoadingInProcessGives) {
  for (const char* lib : {FLASHCHECK_EXAMPLE_PLUGIN, FLASHCHECK_HOST_MODULE, FLASHCHECK_HOSTILE_PLUGINS,
                          FLASHCHECK_BROKEN_VARIANT_PLUGINS, FLASHCHECK_HOSTILE_ABI2_PLUGINS}) {
    const auto remote = describe_plugin(lib, isolated());
    EXPECT_EQ(describe_variants(remote), describe_variants(load_plugin(lib))) << lib;
    EXPECT_GT(remote.size(), 0u);
    // Its code is not here: supports() and forward() are the worker's.
    EXPECT_THROW(remote[0]->unsupported(Problem{}), std::logic_error);
  }
}

// A bad field is refused by the worker with the message loading here gives.
TEST(Loading, BadFieldsAreRefusedAsInProcess) {
  setenv("FLASHCHECK_HOSTILE_SET", "name_spaces", 1);
  std::string here, there;
  try {
    load_plugin(FLASHCHECK_HOSTILE_PLUGINS);
  } catch (const std::runtime_error& e) {
    here = e.what();
  }
  try {
    describe_plugin(FLASHCHECK_HOSTILE_PLUGINS, isolated());
  } catch (const CannotTest& e) {
    there = e.what();
  }
  unsetenv("FLASHCHECK_HOSTILE_SET");
  EXPECT_NE(here.find("is not a kernel name"), std::string::npos) << here;
  EXPECT_EQ(here, there);
}

// A constructor's printf reaches stderr marked as the plugin's, never stdout (`list --json -`).
TEST(Loading, ConstructorOutputGoesToStderrMarked) {
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  const auto kernels = describe_plugin(lifecycle("ctor_printf"), isolated());
  const std::string out = ::testing::internal::GetCapturedStdout(), err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(kernels.size(), 2u);
  EXPECT_EQ(out, "");
  EXPECT_NE(err.find("[plugin hostile_ctor_printf.so] hello from lifecycle_ctor_printf's constructor"), std::string::npos) << err;
  EXPECT_FALSE(mapped_here(lifecycle("ctor_printf")));
}

// Every field of Capabilities survives the trip, from random values.
TEST(Description, RoundTripsEveryField) {
  struct Fake final : Variant {
    Capabilities c;
    std::string name() const override { return "fake"; }
    const Capabilities& caps() const override { return c; }
    void forward(const Problem&, const KernelArgs&) const override {}
  };
  std::mt19937_64 g(flashcheck::testing::seed_for(2100));
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(g); };
  for (int round = 0; round < 20; ++round) {
    auto f = std::make_shared<Fake>();
    Capabilities& c = f->c;
    c.dtypes = {static_cast<DType>(pick(0, 2))};
    c.head_dims = {pick(1, 64), pick(65, 512)};
    c.dv_ne_dqk = pick(0, 1);
    c.head_dim_pairs = {{pick(1, 256), pick(1, 256)}};
    c.causals = {static_cast<Causal>(pick(0, 2)), static_cast<Causal>(pick(0, 2))};
    c.gqa = pick(0, 1);
    c.max_seq = pick(1, int64_t{1} << 40);
    c.equal_lengths = pick(0, 1);
    c.seq_multiple = pick(1, 1024);
    c.propagates_nonfinite = pick(0, 1);
    c.max_tensor_elements = pick(1, int64_t{1} << 50);
    c.lse_base = static_cast<LseBase>(pick(0, 2));
    c.empty_lse = static_cast<EmptyRowLse>(pick(0, 1));
    c.memory = static_cast<Memory>(pick(0, 1));
    c.min_sm = static_cast<int>(pick(0, 120));
    c.exact_sm = pick(0, 1);
    c.tiles = {{pick(0, 256), pick(1, 256), pick(1, 256), static_cast<int>(pick(-1, 1))}};
    c.numerics = {pick(0, 1) == 1, pick(0, 1) == 1};
    c.windows = pick(0, 1);
    c.softcap = pick(0, 1);
    c.alibi = {static_cast<Alibi>(pick(1, 2))};
    c.alibi_per_batch = pick(0, 1);
    c.sinks = pick(0, 1);
    c.layouts = {static_cast<Layout>(pick(0, 2)), static_cast<Layout>(pick(0, 2))};
    c.seqused = pick(0, 1);
    c.paged = pick(0, 1);
    c.page_sizes = {pick(1, 512)};
    c.out_dtypes = {static_cast<DType>(pick(1, 2))};
    c.descales = {static_cast<Descale>(pick(1, 2))};
    c.window_convention = static_cast<WindowConvention>(pick(0, 1));
    c.alibi_lse = static_cast<AlibiLse>(pick(0, 1));
    c.dtypes.push_back(static_cast<DType>(pick(3, 4)));
    const auto back = described_variants(nlohmann::json::parse(describe_variants({f}).dump()));
    ASSERT_EQ(back.size(), 1u);
    const Capabilities& b = back[0]->caps();
    EXPECT_EQ(back[0]->name(), "fake");
    EXPECT_EQ(b.dtypes, c.dtypes);
    EXPECT_EQ(b.head_dims, c.head_dims);
    EXPECT_EQ(b.dv_ne_dqk, c.dv_ne_dqk);
    EXPECT_EQ(b.head_dim_pairs, c.head_dim_pairs);
    EXPECT_EQ(b.causals, c.causals);
    EXPECT_EQ(b.gqa, c.gqa);
    EXPECT_EQ(b.max_seq, c.max_seq);
    EXPECT_EQ(b.equal_lengths, c.equal_lengths);
    EXPECT_EQ(b.seq_multiple, c.seq_multiple);
    EXPECT_EQ(b.propagates_nonfinite, c.propagates_nonfinite);
    EXPECT_EQ(b.max_tensor_elements, c.max_tensor_elements);
    EXPECT_EQ(b.lse_base, c.lse_base);
    EXPECT_EQ(b.empty_lse, c.empty_lse);
    EXPECT_EQ(b.memory, c.memory);
    EXPECT_EQ(b.min_sm, c.min_sm);
    EXPECT_EQ(b.exact_sm, c.exact_sm);
    EXPECT_EQ(b.tiles, c.tiles);
    EXPECT_EQ(b.numerics.use_exp2, c.numerics.use_exp2);
    EXPECT_EQ(b.numerics.round_p, c.numerics.round_p);
    EXPECT_EQ(b.windows, c.windows);
    EXPECT_EQ(b.softcap, c.softcap);
    EXPECT_EQ(b.alibi, c.alibi);
    EXPECT_EQ(b.alibi_per_batch, c.alibi_per_batch);
    EXPECT_EQ(b.sinks, c.sinks);
    EXPECT_EQ(b.layouts, c.layouts);
    EXPECT_EQ(b.seqused, c.seqused);
    EXPECT_EQ(b.paged, c.paged);
    EXPECT_EQ(b.page_sizes, c.page_sizes);
    EXPECT_EQ(b.out_dtypes, c.out_dtypes);
    EXPECT_EQ(b.descales, c.descales);
    EXPECT_EQ(b.window_convention, c.window_convention);
    EXPECT_EQ(b.alibi_lse, c.alibi_lse);
  }
}

// ---- supports() --------------------------------------------------------------------------------

// A supports() that hangs fails the case at its own limit; the next case starts a new worker.
TEST(Supports, HangIsAFailedCaseAtItsLimit) {
  auto v = described(FLASHCHECK_HOSTILE_PLUGINS, "hostile_supports_hang");
  IsolationOptions o = isolated();
  o.supports_timeout_s = 0.4;
  KernelWorker w(*v, FLASHCHECK_HOSTILE_PLUGINS, o);
  const CaseOutcome c = run_case(*v, random_case(2110), 4096, FLASHCHECK_HOSTILE_PLUGINS, &w);
  ASSERT_TRUE(c.abnormal);
  EXPECT_TRUE(c.abnormal->timed_out);
  EXPECT_EQ(c.abnormal->detail, "timed out after 0.4 s in its supports()");
  EXPECT_EQ(c.report.failed(), std::vector<std::string>{"kernel_crashed"});
  const CaseOutcome again = run_case(*v, random_case(2111), 4096, FLASHCHECK_HOSTILE_PLUGINS, &w);
  EXPECT_TRUE(again.abnormal && again.abnormal->timed_out);
  EXPECT_EQ(w.starts(), 2);
}

// A described kernel's refusals come from its own supports(), asked in the worker.
TEST(Supports, RefusalsComeFromThePluginInItsWorker) {
  // An ABI 1 kernel whose supports() is the example's ABI 1 one (f32 and bf16): it declines f16.
  auto remote = described(FLASHCHECK_HOSTILE_PLUGINS, "hostile_polite");
  auto local = kernel_of(FLASHCHECK_HOSTILE_PLUGINS, "hostile_polite");
  KernelWorker w(*remote, FLASHCHECK_HOSTILE_PLUGINS, isolated());
  int refused = 0;
  for (uint64_t salt = 2120; salt < 2160; ++salt) {
    Problem p = random_case(salt).problem;
    p.dtype = static_cast<DType>(salt % 3);  // f16 included: the example declines it
    const SupportsAnswer a = w.supports(p);
    EXPECT_FALSE(a.abnormal);
    EXPECT_EQ(a.refusal, local->unsupported(p)) << to_string(p);
    refused += a.refusal.has_value();
  }
  EXPECT_GT(refused, 0) << "no problem was refused: the comparison says little";
  EXPECT_EQ(w.starts(), 1);
}

// ---- unloading ---------------------------------------------------------------------------------

// The plugin's destructors run in its worker at the end of the campaign; what they do there is
// the kernel's failure, never flashcheck's exit.
TEST(Unloading, ADestructorThatExitsOrCrashesFailsTheKernel) {
  for (auto [behaviour, says] : {std::pair{"dtor_exit0", "exited 0 while unloading"}, std::pair{"dtor_segv", "crashed (SIGSEGV) while unloading"}}) {
    const std::string lib = lifecycle(behaviour);
    auto v = described(lib, std::string("lifecycle_") + behaviour);
    CampaignOptions opt;
    opt.cases = 2;
    opt.seed = flashcheck::testing::seed_for(2200);
    opt.max_seq = 32;
    opt.progress = false;
    opt.plugin = lib;
    opt.isolation = isolated();
    std::ostringstream log;
    const VariantSummary s = run_campaign(*v, opt, log);
    EXPECT_EQ(s.failed, 0) << log.str();
    ASSERT_TRUE(s.unload_failure) << behaviour;
    EXPECT_EQ(s.unload_failure->rfind(says, 0), 0u) << *s.unload_failure;
    EXPECT_FALSE(mapped_here(lib));
  }
  // A library whose destructors behave unloads cleanly.
  auto v = described(FLASHCHECK_EXAMPLE_PLUGIN, "example_cpu_plugin");
  KernelWorker w(*v, FLASHCHECK_EXAMPLE_PLUGIN, isolated());
  EXPECT_FALSE(w.unload());
  EXPECT_EQ(w.starts(), 1) << "unload starts a worker when none runs: its destructors are judged anyway";
}

// ---- time limits -------------------------------------------------------------------------------

TEST(TimeLimit, FirstCaseThenLearnedFromPassingCases) {
  std::mt19937_64 g(flashcheck::testing::seed_for(2300));
  Problem small = random_case(2301).problem, large = small;
  large.seq_q = large.seq_kv = 4096;
  large.heads_q = large.heads_kv = 16;
  for (Memory m : {Memory::host, Memory::device}) {
    CaseTimeLimit t(m);
    const double rate = m == Memory::host ? 1e9 : 1e11;
    // Nothing passed yet: 15 s plus the work at a pessimistic rate.
    EXPECT_DOUBLE_EQ(t.for_problem(small).seconds, 15 + small.flops() / rate);
    EXPECT_DOUBLE_EQ(t.for_problem(large).seconds, 15 + large.flops() / rate);
    EXPECT_LT(t.for_problem(small).seconds, 30) << "a campaign's first hang is reported within 30 s";
    // Fast passing cases: the floor.
    const double fast = std::uniform_real_distribution<double>(1e-4, 0.4)(g);
    t.passed(small, fast);
    EXPECT_DOUBLE_EQ(t.for_problem(small).seconds, 5);
    EXPECT_NE(t.for_problem(small).basis.find("floor"), std::string::npos);
    // A slower one: ten times it.
    const double slow = std::uniform_real_distribution<double>(0.6, 3)(g);
    t.passed(small, slow);
    EXPECT_DOUBLE_EQ(t.for_problem(small).seconds, 10 * slow);
    // A larger problem than any that passed: ten times its work at the fastest rate seen.
    const double by_work = 10 * (fast / std::max(small.flops(), 1.0)) * large.flops();
    EXPECT_DOUBLE_EQ(t.for_problem(large).seconds, std::max(10 * slow, by_work));
  }
  // --timeout fixes it whatever passed.
  CaseTimeLimit fixed(Memory::host, {}, 2.5);
  fixed.passed(small, 100);
  EXPECT_EQ(fixed.for_problem(large).seconds, 2.5);
}

// A kernel that hangs on every case, with the default rules scaled down (first case 0.5 s): the
// first hang is kept, shrunk within min(60 s, 2 x its limit) and re-run once; later hangs are
// counted, not kept; after max_timeouts the rest is not run.
TEST(Campaign, HangingKernelCostsAFewLimits) {
  auto v = hostile("hostile_hang");
  CampaignOptions opt;
  opt.cases = 12;
  opt.seed = flashcheck::testing::seed_for(2310);
  opt.max_seq = 64;
  opt.progress = false;
  opt.plugin = FLASHCHECK_HOSTILE_PLUGINS;
  opt.isolation = isolated();
  opt.isolation.timeout_s.reset();
  opt.isolation.time_limits.first_s = 0.5;
  opt.confirm_runs = 3;
  opt.dtypes = {DType::f32, DType::bf16};  // what it supports: every case runs
  std::ostringstream log;
  const VariantSummary s = run_campaign(*v, opt, log);
  EXPECT_EQ(s.timed_out, 3);
  EXPECT_EQ(s.failed, 3);
  EXPECT_EQ(s.not_run, opt.cases - s.cases);
  ASSERT_EQ(s.failures.size(), 1u) << log.str();
  const CaseOutcome& f = s.failures[0];
  ASSERT_TRUE(f.abnormal && f.abnormal->timed_out);
  EXPECT_EQ(f.abnormal->detail.rfind("timed out after 0.5", 0), 0u) << f.abnormal->detail;
  EXPECT_NE(f.abnormal->detail.find("no passing case yet"), std::string::npos) << f.abnormal->detail;
  ASSERT_TRUE(f.reproduced);
  EXPECT_EQ(f.reproduced->runs, 1) << "a hang is re-run once: each re-run costs its limit";
  EXPECT_EQ(f.reproduced->failed, 1);
  EXPECT_NE(log.str().find("shrinking the hang for at most 1 s"), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("not kept: a hang of this kernel is kept already"), std::string::npos) << log.str();
}

// Cases that pass teach the limit: a later hang is cut at the learned one, not the first-case one.
TEST(Campaign, HangAfterPassingCasesIsCutAtTheLearnedLimit) {
  auto v = hostile("hostile_hang_later");  // passes its first 3 calls, then hangs
  CampaignOptions opt;
  opt.cases = 12;
  opt.seed = flashcheck::testing::seed_for(2320);
  opt.max_seq = 64;
  opt.progress = false;
  opt.shrink = false;
  opt.max_timeouts = 1;
  opt.plugin = FLASHCHECK_HOSTILE_PLUGINS;
  opt.isolation = isolated();
  opt.isolation.timeout_s.reset();
  opt.isolation.time_limits.first_s = 60;  // a hang held to the first-case limit would show here
  opt.isolation.time_limits.floor_s = 1;
  opt.isolation.time_limits.factor = 2;
  opt.dtypes = {DType::f32, DType::bf16};  // what it supports: every case runs
  std::ostringstream log;
  const VariantSummary s = run_campaign(*v, opt, log);
  EXPECT_EQ(s.passed, 3) << log.str();
  ASSERT_EQ(s.timed_out, 1) << log.str();
  ASSERT_TRUE(s.first_abnormal);
  EXPECT_EQ(s.first_abnormal->find("no passing case yet"), std::string::npos) << *s.first_abnormal;
  // 1 s unless a tiny case took half a second (a badly loaded machine): then twice that.
  EXPECT_EQ(s.first_abnormal->rfind("timed out after ", 0), 0u) << *s.first_abnormal;
  EXPECT_LT(std::stod(s.first_abnormal->substr(16)), 60.0) << *s.first_abnormal;
}

// ---- confirmed reproductions -------------------------------------------------------------------

CampaignOptions flaky_campaign(uint64_t salt) {
  CampaignOptions opt;
  opt.cases = 3;
  opt.seed = flashcheck::testing::seed_for(salt);
  opt.max_seq = 32;
  opt.progress = false;
  opt.plugin = FLASHCHECK_HOSTILE_PLUGINS;
  opt.isolation = isolated();
  opt.confirm_runs = 3;
  opt.dtypes = {DType::f32, DType::bf16};  // what the kernel supports: every case calls it, so the second fails
  return opt;
}

// Failing every other call across processes: some re-runs fail, some pass. Flaky with k of n,
// never a clean reproduce line.
TEST(Reproduction, SometimesFailingKernelIsFlakyNeverAClearRepro) {
  const std::string state = ::testing::TempDir() + "flaky_state_" + std::to_string(flashcheck::testing::seed_for(2400));
  std::remove(state.c_str());
  setenv("FLASHCHECK_FLAKY_STATE", state.c_str(), 1);
  auto v = hostile("hostile_flaky");
  std::ostringstream log;
  const VariantSummary s = run_campaign(*v, flaky_campaign(2400), log);
  unsetenv("FLASHCHECK_FLAKY_STATE");
  std::remove(state.c_str());
  ASSERT_FALSE(s.failures.empty()) << log.str();
  for (const CaseOutcome& f : s.failures) {
    ASSERT_TRUE(f.reproduced);
    EXPECT_EQ(f.reproduced->runs, 3);
    EXPECT_GT(f.reproduced->failed, 0);
    EXPECT_LT(f.reproduced->failed, 3);
    EXPECT_FALSE(f.reproduced->confirmed());
  }
  EXPECT_NE(log.str().find("FLAKY: failed "), std::string::npos) << log.str();
  EXPECT_EQ(log.str().find("reproduce"), std::string::npos) << "a flaky failure printed as a reproduction:\n" << log.str();
}

// Failing every other call of one process: each re-run in a fresh process passes its first call.
// Reused processes would alternate; 0 of 3 shows every re-run had a process of its own.
TEST(Reproduction, ReRunsAreFreshProcesses) {
  auto v = hostile("hostile_flaky");
  std::ostringstream log;
  const VariantSummary s = run_campaign(*v, flaky_campaign(2410), log);
  ASSERT_FALSE(s.failures.empty()) << log.str();
  for (const CaseOutcome& f : s.failures) {
    ASSERT_TRUE(f.reproduced);
    EXPECT_EQ(f.reproduced->runs, 3);
    EXPECT_EQ(f.reproduced->failed, 0);
    EXPECT_TRUE(f.reproduced->fresh_processes);
  }
}

}  // namespace
}  // namespace flashcheck
