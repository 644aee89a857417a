// Reliability: kernels that crash, abort, exit, hang, scribble past their buffers, write their
// inputs or flood their output each get a verdict for the case (runner/isolation.h) and leave the
// process that judges them standing; plugins with bad fields are refused by name.
// The CLI's side (exit codes, messages, `git bisect run`) is runner/reliability_cli_test.py.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <sstream>

#include "runner/campaign.h"
#include "runner/harness.h"
#include "runner/isolation.h"
#include "runner/registry.h"
#include "runner/reliability_fixtures.h"
#include "runner/variant_cases.h"
#include "testing/test_seed.h"
#include "verify/judge.h"

namespace flashcheck {

// A fresh random case the example kernel supports (f32 or bf16, small), from this run's seed.
Case random_case(uint64_t salt) {
  std::mt19937_64 g(flashcheck::testing::seed_for(salt));
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(g); };
  Problem p;
  p.batch = pick(1, 2);
  p.heads_kv = pick(1, 2);
  p.heads_q = p.heads_kv * pick(1, 2);
  p.seq_q = pick(1, 70);
  p.seq_kv = pick(1, 70);
  p.head_dim_qk = p.head_dim_v = 8 * pick(1, 8);
  p.causal = static_cast<Causal>(pick(0, 2));
  p.dtype = pick(0, 1) ? DType::f32 : DType::bf16;
  return Case{p, Dist::normal, g()};
}

namespace {

struct Expect {
  const char* kernel;
  const char* criterion;  // nullptr: the case must pass
  const char* detail;     // a part of the criterion's detail
};

// Test names in ctest: the kernel, not the struct's bytes.
void PrintTo(const Expect& e, std::ostream* os) { *os << e.kernel; }

class Hostile : public ::testing::TestWithParam<Expect> {};

TEST_P(Hostile, GetsItsVerdictAndTheJudgeLivesOn) {
  const Expect e = GetParam();
  auto v = std::string(e.kernel).rfind("broken_", 0) == 0 ? kernel_of(FLASHCHECK_BROKEN_PLUGINS, e.kernel) : hostile(e.kernel);
  ASSERT_TRUE(v);
  const std::string lib = std::string(e.kernel).rfind("broken_", 0) == 0 ? FLASHCHECK_BROKEN_PLUGINS : FLASHCHECK_HOSTILE_PLUGINS;
  KernelWorker w(*v, lib, isolated(std::string(e.kernel) == "hostile_hang" ? 1.0 : 20.0));
  const Case c = random_case(1300);
  const auto t0 = std::chrono::steady_clock::now();
  CaseOutcome o = run_case(*v, c, 4096, lib, &w);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_FALSE(o.skipped) << *o.skipped;
  if (!e.criterion) {
    EXPECT_TRUE(o.passed) << to_text(o.report);
    return;
  }
  EXPECT_FALSE(o.passed);
  const auto failed = o.report.failed();
  ASSERT_NE(std::find(failed.begin(), failed.end(), e.criterion), failed.end()) << to_text(o.report);
  bool detail_found = false;
  for (const Criterion& cr : o.report.criteria)
    if (cr.name == e.criterion) detail_found |= cr.detail.find(e.detail) != std::string::npos;
  EXPECT_TRUE(detail_found) << "expected '" << e.detail << "' in\n" << to_text(o.report);
  EXPECT_NE(o.report.repro.find("--plugin " + lib), std::string::npos) << o.report.repro;
  EXPECT_LT(took, 15.0) << "a verdict, not a wait";
  // The worker is replaced after it died, and the next case runs.
  if (o.abnormal) {
    const int64_t before = w.starts();
    CaseOutcome again = run_case(*v, random_case(1301), 4096, lib, &w);
    EXPECT_FALSE(again.passed);
    EXPECT_EQ(w.starts(), before + 1);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Isolation, Hostile,
    ::testing::Values(Expect{"hostile_segv", "kernel_crashed", "crashed (SIGSEGV)"},
                      Expect{"hostile_abort", "kernel_crashed", "crashed (SIGABRT)"},
                      Expect{"hostile_exit3", "kernel_crashed", "exited 3"},
                      Expect{"hostile_hang", "kernel_crashed", "timed out after 1 s"},
                      Expect{"hostile_far_write", "out_of_bounds", "at byte 65535 past the end of o"},
                      Expect{"hostile_read_past_q", "out_of_bounds", "at byte 100 past the end of q"},
                      Expect{"hostile_write_q", "kernel_crashed", "of input q (inputs are read-only)"},
                      Expect{"hostile_underrun", "out_of_bounds", ""},
                      Expect{"hostile_error", "kernel_error", "out of patience"},
                      Expect{"hostile_supports_segv", "kernel_crashed", "crashed (SIGSEGV) in its supports()"},
                      Expect{"hostile_chatty", nullptr, nullptr}, Expect{"hostile_polite", nullptr, nullptr},
                      Expect{"broken_oob_write", "out_of_bounds", "at byte 0 past the end of o"},
                      Expect{"broken_unwritten_row", "unwritten", ""}),
    [](const ::testing::TestParamInfo<Expect>& i) { return std::string(i.param.kernel); });

// Run in a worker, a correct kernel's output is bit for bit the output it gives in-process.
TEST(Isolation, SameBitsAsInProcess) {
  for (auto v : {Registry::builtin().find("replica"), kernel_of(FLASHCHECK_EXAMPLE_PLUGIN, "example_cpu_plugin")}) {
    const std::string lib = v->name() == "replica" ? "" : FLASHCHECK_EXAMPLE_PLUGIN;
    KernelWorker w(*v, lib, isolated());
    // Three supported cases per kernel, whatever the seed draws (some draws are outside the
    // example plugin's space: with none run, no worker would start and nothing would be compared).
    int ran = 0;
    for (uint64_t salt = 1310; salt < 1510 && ran < 3; ++salt) {
      const Case c = random_case(salt);
      if (v->unsupported(c.problem)) continue;
      ++ran;
      const Inputs in = make_inputs(c.problem, c.seed, c.dist);
      const HarnessResult local = run_variant(*v, c.problem, in);
      IsolatedRun r = w.run(c.problem, in);
      ASSERT_TRUE(r.result) << v->name() << ": " << (r.abnormal ? r.abnormal->detail : r.error.value_or(""));
      ASSERT_EQ(local.o.size(), r.result->o.size());
      EXPECT_EQ(std::memcmp(local.o.data(), r.result->o.data(), local.o.size() * 4), 0) << v->name();
      ASSERT_EQ(local.lse.has_value(), r.result->lse.has_value());
      if (local.lse) {
        EXPECT_EQ(std::memcmp(local.lse->data(), r.result->lse->data(), local.lse->size() * 4), 0);
      }
      EXPECT_EQ(r.result->oob_writes, 0);
    }
    ASSERT_EQ(ran, 3) << v->name() << ": too few supported cases drawn";
    EXPECT_EQ(w.starts(), 1) << "one worker serves every case of a kernel";
  }
}

// The kernel's 4 MiB of stdout reach flashcheck's stderr cut to the limit, and never its stdout.
TEST(Isolation, ChattyKernelOutputIsBounded) {
  auto v = hostile("hostile_chatty");
  KernelWorker w(*v, FLASHCHECK_HOSTILE_PLUGINS, isolated());
  const Case c = random_case(1320);
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  CaseOutcome o = run_case(*v, c, 4096, FLASHCHECK_HOSTILE_PLUGINS, &w);
  const std::string out = ::testing::internal::GetCapturedStdout(), err = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(o.passed) << to_text(o.report);
  EXPECT_EQ(out, "");
  EXPECT_LT(err.size(), 20000u);
  EXPECT_NE(err.find("[hostile_chatty] xxxx"), std::string::npos);
  EXPECT_NE(err.find("more bytes of the kernel's output not shown"), std::string::npos) << err.substr(0, 300);
}

// A campaign over a kernel that crashes on every case: every case failed and named, shrunk, and no
// aggregate that looks like a perfect kernel.
TEST(Campaign, CrashingKernelFailsEveryCaseShrunkAndNamed) {
  auto v = hostile("hostile_segv");
  CampaignOptions opt;
  opt.cases = 4;
  opt.seed = flashcheck::testing::seed_for(1330);
  opt.max_seq = 64;
  opt.progress = false;
  opt.plugin = FLASHCHECK_HOSTILE_PLUGINS;
  opt.isolation = isolated();
  opt.confirm_runs = 3;
  std::ostringstream log;
  VariantSummary s = run_campaign(*v, opt, log);
  EXPECT_EQ(s.failed, s.cases - s.skipped);
  EXPECT_GT(s.failed, 0);
  EXPECT_EQ(s.judged, 0);
  EXPECT_EQ(s.crashed, s.failed);
  EXPECT_TRUE(std::isnan(s.worst_cos)) << "no case judged: no cosine, never 1";
  EXPECT_FALSE(s.tightest);
  EXPECT_EQ(s.failed_by["kernel_crashed"], s.failed);
  EXPECT_EQ(s.first_abnormal.value_or("").rfind("crashed (SIGSEGV)", 0), 0u) << s.first_abnormal.value_or("");
  ASSERT_FALSE(s.failures.empty());
  const Problem& small = s.failures[0].c.problem;  // it crashes on anything: shrunk to the smallest
  EXPECT_EQ(small.batch, 1);
  EXPECT_EQ(small.seq_q, 1);
  EXPECT_EQ(small.seq_kv, 1);
  EXPECT_NE(s.repro[0].find("--kernel hostile_segv --plugin " FLASHCHECK_HOSTILE_PLUGINS), std::string::npos) << s.repro[0];
  // Re-run from scratch before its reproduce line: it crashes every time, a confirmed reproduction.
  for (const CaseOutcome& f : s.failures) {
    ASSERT_TRUE(f.reproduced);
    EXPECT_EQ(f.reproduced->runs, 3);
    EXPECT_EQ(f.reproduced->failed, 3);
    EXPECT_TRUE(f.reproduced->confirmed() && f.reproduced->fresh_processes);
  }
  EXPECT_NE(log.str().find("reproduce (shrunk; failed 3 of 3 re-runs, each in a fresh process)"), std::string::npos) << log.str();
}

// A kernel that hangs costs its time limit a few times, not a whole campaign.
TEST(Campaign, HangingKernelIsStoppedAfterMaxTimeouts) {
  auto v = hostile("hostile_hang");
  CampaignOptions opt;
  opt.cases = 24;  // enough that cases remain after two timeouts whatever the plugin declines
  opt.seed = flashcheck::testing::seed_for(1340);
  opt.max_seq = 32;
  opt.progress = false;
  opt.shrink = false;
  opt.max_timeouts = 2;
  opt.plugin = FLASHCHECK_HOSTILE_PLUGINS;
  opt.isolation = isolated(0.5);
  std::ostringstream log;
  const auto t0 = std::chrono::steady_clock::now();
  VariantSummary s = run_campaign(*v, opt, log);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 20.0);
  EXPECT_EQ(s.timed_out, 2);
  EXPECT_EQ(s.failed, 2);
  EXPECT_EQ(s.not_run, 24 - s.cases);
  EXPECT_GT(s.not_run, 0);
  EXPECT_NE(log.str().find("timed out after 0.5 s"), std::string::npos) << log.str();
}

// Shrinking a hang stops at its time budget.
TEST(Campaign, ShrinkingAHangKeepsToItsBudget) {
  auto v = hostile("hostile_hang");
  KernelWorker w(*v, FLASHCHECK_HOSTILE_PLUGINS, isolated(0.3));
  Case c = random_case(1350);
  c.problem.seq_q = c.problem.seq_kv = 64;
  CaseOutcome o = run_case(*v, c, 4096, FLASHCHECK_HOSTILE_PLUGINS, &w);
  ASSERT_TRUE(o.abnormal && o.abnormal->timed_out);
  const auto t0 = std::chrono::steady_clock::now();
  CaseOutcome s = shrink_failure(*v, o, 4096, FLASHCHECK_HOSTILE_PLUGINS, 200, &w, 2.0);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(took, 4.0);
  EXPECT_FALSE(s.passed);
  EXPECT_TRUE(s.abnormal && s.abnormal->timed_out);
}

// A plugin's fields are checked when it loads; each bad one is refused, naming it.
struct BadField {
  const char* set;
  const char* message;
};
void PrintTo(const BadField& b, std::ostream* os) { *os << b.set; }

class BadFields : public ::testing::TestWithParam<BadField> {};

TEST_P(BadFields, AreRefusedByName) {
  const BadField b = GetParam();
  setenv("FLASHCHECK_HOSTILE_SET", b.set, 1);
  try {
    load_plugin(FLASHCHECK_HOSTILE_PLUGINS);
    ADD_FAILURE() << b.set << " was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(b.message), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("kernel 1"), std::string::npos) << e.what();
  }
  unsetenv("FLASHCHECK_HOSTILE_SET");
  EXPECT_GT(load_plugin(FLASHCHECK_HOSTILE_PLUGINS).size(), 5u) << "the runtime set loads again";
}

INSTANTIATE_TEST_SUITE_P(
    Loader, BadFields,
    ::testing::Values(BadField{"name_replica", "may not shadow"}, BadField{"name_spaces", "\"my kernel\" is not a kernel name"},
                      BadField{"name_nonprintable", "\"bad\\x01name\" is not a kernel name"},
                      BadField{"name_all", "is reserved"}, BadField{"no_name", "has no name"},
                      BadField{"duplicate", "used twice"}, BadField{"lse_base_77", "lse_base = 77 is out of range"},
                      BadField{"memory_9", "memory = 9 is out of range"},
                      BadField{"empty_lse_5", "empty_lse = 5 is out of range"}, BadField{"no_supports", "has no supports()"}),
    [](const ::testing::TestParamInfo<BadField>& i) { return std::string(i.param.set); });

// ABI 2: every field of fc_kernel2 and fc_space2 checked when the plugin loads; each bad one is
// refused naming it (gpu/plugin/hostile_plugins.c, its ABI 2 block).
class BadFields2 : public ::testing::TestWithParam<BadField> {};

TEST_P(BadFields2, AreRefusedByName) {
  const BadField b = GetParam();
  setenv("FLASHCHECK_HOSTILE_SET", b.set, 1);
  try {
    load_plugin(FLASHCHECK_HOSTILE_ABI2_PLUGINS);
    ADD_FAILURE() << b.set << " was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(b.message), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("kernel 1"), std::string::npos) << e.what();
  }
  unsetenv("FLASHCHECK_HOSTILE_SET");
  EXPECT_EQ(load_plugin(FLASHCHECK_HOSTILE_ABI2_PLUGINS).size(), 3u) << "the runtime set loads again";
}

// A plugin built against ABI 2.0 (its fc_space2 ends before 2.1's limit_mask and seq_multiple)
// loads, and what lies past its struct_size is never read as limits: it declares none.
TEST(Loader, AnAbi20SpaceLoadsAndDeclaresNoLimits) {
  setenv("FLASHCHECK_HOSTILE_SET", "abi2_0_space", 1);
  const auto kernels = load_plugin(FLASHCHECK_HOSTILE_ABI2_PLUGINS);
  unsetenv("FLASHCHECK_HOSTILE_SET");
  ASSERT_EQ(kernels.size(), 2u);
  const Capabilities& c = kernels[1]->caps();
  EXPECT_EQ(kernels[1]->name(), "hostile2_bad");
  EXPECT_FALSE(c.equal_lengths);
  EXPECT_TRUE(c.propagates_nonfinite);
  EXPECT_EQ(c.seq_multiple, 1);
}

INSTANTIATE_TEST_SUITE_P(
    Loader, BadFields2,
    ::testing::Values(BadField{"abi2_version_3", "has ABI version 3; flashcheck_get_kernel2 serves ABI 2"},
                      BadField{"abi2_version_1", "has ABI version 1; flashcheck_get_kernel2 serves ABI 2"},
                      BadField{"abi2_struct_size", "struct_size 8 is smaller than ABI 2.0's fc_kernel2"},
                      BadField{"abi2_name_bad", "\"bad name\" is not a kernel name"},
                      BadField{"abi2_lse_base_77", "lse_base = 77 is out of range"},
                      BadField{"abi2_no_forward", "has no forward()"},
                      BadField{"abi2_flags", "flags has unknown bits"},
                      BadField{"abi2_space_size", "struct_size 16 is smaller than ABI 2.0's fc_space2"},
                      BadField{"abi2_dtype_mask", "dtype_mask has bits beyond FC_DTYPE_E5M2"},
                      BadField{"abi2_layout_mask", "layout_mask has unknown bits 0x20"},
                      BadField{"abi2_variant_mask", "variant_mask has unknown bits 0x200"},
                      BadField{"abi2_alibi_mask", "alibi_mask has unknown bits 0x10"},
                      BadField{"abi2_out_dtype_mask", "out_dtype_mask has unknown bits 0x1"},
                      BadField{"abi2_descale_mask", "descale_mask has unknown bits 0x8"},
                      BadField{"abi2_window_convention", "window_convention = 7 is out of range"},
                      BadField{"abi2_alibi_lse", "alibi_lse = 9 is out of range"},
                      BadField{"abi2_head_dims_null", "head_dims is NULL with a nonzero count"},
                      BadField{"abi2_page_size_0", "page_sizes[0] = 0 is not a page size"},
                      BadField{"abi2_page_sizes_unpaged", "page_sizes are given but variant_mask lacks FC_VARIANT_PAGED"},
                      BadField{"abi2_per_batch_no_alibi", "FC_VARIANT_ALIBI_PER_BATCH but alibi_mask declares no ALiBi form"}),
    [](const ::testing::TestParamInfo<BadField>& i) { return std::string(i.param.set); });

// A variant problem crosses to the worker as its line and its buffers (the storage layouts, the
// side tensors, the strides): a correct kernel's isolated output is bit for bit its in-process
// output, padding included, for every variant and layout, ABI 2 plugin and built-in alike.
TEST(Isolation, VariantsGiveTheSameBitsIsolatedAsInProcess) {
  for (auto v : {Registry::builtin().find("replica"), kernel_of(FLASHCHECK_EXAMPLE_PLUGIN, "example_cpu_plugin")}) {
    const std::string lib = v->name() == "replica" ? "" : FLASHCHECK_EXAMPLE_PLUGIN;
    KernelWorker w(*v, lib, isolated());
    for (const VariantCase& vc : variant_cases()) {
      const Problem p = parse_problem(vc.line);
      // The registry's replica declares e4m3 but not e5m2 (runner/registry.h): refused in the
      // worker as in-process, with the same reason.
      if (v->name() == "replica" && p.dtype == DType::e5m2) {
        EXPECT_EQ(w.supports(p).refusal, v->unsupported(p)) << vc.what;
        continue;
      }
      ASSERT_FALSE(w.supports(p).refusal) << v->name() << " " << vc.what << ": " << *w.supports(p).refusal;
      const Inputs in = make_inputs(p, flashcheck::testing::seed_for(1370), Dist::normal);
      const HarnessResult local = run_variant(*v, p, in);
      IsolatedRun r = w.run(p, in);
      ASSERT_TRUE(r.result) << v->name() << " " << vc.what << ": " << (r.abnormal ? r.abnormal->detail : r.error.value_or(""));
      ASSERT_EQ(local.o.size(), r.result->o.size());
      EXPECT_EQ(std::memcmp(local.o.data(), r.result->o.data(), local.o.size() * 4), 0) << v->name() << " " << vc.what;
      ASSERT_TRUE(local.lse && r.result->lse);
      EXPECT_EQ(std::memcmp(local.lse->data(), r.result->lse->data(), local.lse->size() * 4), 0) << v->name() << " " << vc.what;
      EXPECT_EQ(r.result->padding_written, local.padding_written) << vc.what;
      EXPECT_EQ(r.result->oob_writes, 0);
    }
    EXPECT_EQ(w.starts(), 1) << "one worker serves every case of a kernel";
  }
}

// The worker's supports() is asked with the whole problem: a plugin's predicate sees its variant
// fields, and the declared space refuses what the kernel did not declare, there as here.
TEST(Isolation, SupportsInTheWorkerSeesTheWholeProblem) {
  const std::string lib = FLASHCHECK_BROKEN_VARIANT_PLUGINS;
  auto late = describe_plugin(lib, isolated());
  std::shared_ptr<Variant> softcap_late, key_offset;
  for (auto& v : late) {
    if (v->name() == "broken_softcap_late") softcap_late = v;
    if (v->name() == "variant_alibi_key_offset") key_offset = v;
  }
  ASSERT_TRUE(softcap_late && key_offset);
  KernelWorker w(*softcap_late, lib, isolated());
  // Its supports() wants softcap > 0: only a worker that received the softcap says yes.
  EXPECT_FALSE(w.supports(parse_problem("b=1 hq=2 hkv=2 sq=33 skv=47 d=32 causal=top_left dtype=f32 softcap=5")).refusal);
  const auto no_cap = w.supports(parse_problem("b=1 hq=2 hkv=2 sq=33 skv=47 d=32 causal=top_left dtype=f32 window=3,0"));
  ASSERT_TRUE(no_cap.refusal);
  EXPECT_NE(no_cap.refusal->find("supports() said no"), std::string::npos) << *no_cap.refusal;
  KernelWorker k(*key_offset, lib, isolated());
  const auto thd = k.supports(parse_problem("b=2 hq=2 hkv=1 sq=3,5 skv=4,6 d=32 layout=thd alibi=signed causal=top_left"));
  ASSERT_TRUE(thd.refusal);
  EXPECT_EQ(*thd.refusal, "layout thd");
}

// ABI 2 calls that misbehave get their verdicts isolated: a crash, a side input written (side
// tensors are mapped read-only too), a padding row written, an input written.
TEST(Isolation, Abi2KernelsThatMisbehaveGetTheirVerdicts) {
  struct Expected {
    const char* lib;
    const char* kernel;
    const char* line;
    const char* criterion;
    const char* detail;
  };
  const Expected all[] = {
      {FLASHCHECK_HOSTILE_ABI2_PLUGINS, "hostile2_segv", "b=1 hq=2 hkv=1 sq=9 skv=9 d=32 dtype=bf16 window=3,3", "kernel_crashed",
       "crashed (SIGSEGV)"},
      {FLASHCHECK_HOSTILE_ABI2_PLUGINS, "hostile2_write_slopes", "b=2 hq=2 hkv=1 sq=9 skv=11 d=32 dtype=bf16 alibi=signed",
       "kernel_crashed", "of input alibi_slopes (inputs are read-only)"},
      {FLASHCHECK_HOSTILE_ABI2_PLUGINS, "hostile2_polite", "b=2 hq=2 hkv=1 sq=9 skv=11 d=32 dtype=bf16 alibi=signed", nullptr, nullptr},
      {FLASHCHECK_BROKEN_VARIANT_PLUGINS, "broken_input_write", "b=1 hq=2 hkv=1 sq=9 skv=13 d=32 dtype=bf16 softcap=3",
       "kernel_crashed", "write at byte 0 of input k (inputs are read-only)"},
      {FLASHCHECK_BROKEN_VARIANT_PLUGINS, "broken_padding_write",
       "b=3 hq=2 hkv=2 sq=4,7,1 skv=20,33,5 dqk=32 dv=32 causal=bottom_right dtype=bf16 layout=thd page=8 pages=shared",
       "padding_written", "in padding rows (past the last sequence)"},
  };
  for (const Expected& e : all) {
    const auto described = describe_plugin(e.lib, isolated());
    std::shared_ptr<Variant> v;
    for (auto& k : described)
      if (k->name() == e.kernel) v = k;
    ASSERT_TRUE(v) << e.kernel;
    KernelWorker w(*v, e.lib, isolated());
    const Case c{parse_problem(e.line), Dist::normal, flashcheck::testing::seed_for(1380)};
    const CaseOutcome o = run_case(*v, c, 4096, e.lib, &w);
    ASSERT_FALSE(o.skipped) << e.kernel << ": " << *o.skipped;
    if (!e.criterion) {
      EXPECT_TRUE(o.passed) << e.kernel << "\n" << to_text(o.report);
      continue;
    }
    EXPECT_FALSE(o.passed) << e.kernel;
    bool found = false;
    for (const Criterion& cr : o.report.criteria)
      found |= !cr.pass && cr.name == e.criterion && cr.detail.find(e.detail) != std::string::npos;
    EXPECT_TRUE(found) << e.kernel << ": expected " << e.criterion << " with '" << e.detail << "' in\n" << to_text(o.report);
  }
}

// Inputs that contradict their problem are the caller's: refused (InvalidProblem, cannot test)
// before any worker starts, never charged to the kernel.
TEST(Isolation, BadInputsAreRefusedBeforeAnyWorkerStarts) {
  auto v = Registry::builtin().find("replica");
  KernelWorker w(*v, "", isolated());
  const Problem p = parse_problem("b=2 hq=2 hkv=1 sq=9 skv=23,40 d=32 causal=bottom_right dtype=bf16 page=7 pages=shuffled");
  Inputs in = make_inputs(p, flashcheck::testing::seed_for(1390), Dist::normal);
  in.block_table[1] = static_cast<int32_t>(in.num_pages) + 4;
  try {
    w.run(p, in);
    ADD_FAILURE() << "a block table out of range was staged";
  } catch (const InvalidProblem& e) {
    EXPECT_NE(std::string(e.what()).find("block_table[0][1]"), std::string::npos) << e.what();
  }
  EXPECT_EQ(w.starts(), 0);
}

// `--plugin name.so` means the file in the working directory, as a path does everywhere else.
TEST(Loader, TakesAPathWithoutSlashRelativeToTheWorkingDirectory) {
  const auto here = std::filesystem::current_path();
  const std::filesystem::path lib(FLASHCHECK_HOSTILE_PLUGINS);
  std::filesystem::current_path(lib.parent_path());
  EXPECT_NO_THROW(load_plugin(lib.filename().string()));
  try {
    load_plugin("no_such_plugin.so");
    ADD_FAILURE();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("relative to " + lib.parent_path().string()), std::string::npos) << e.what();
  }
  std::filesystem::current_path(here);
}

// Reports never print "ok" beside a value past the limit they print, nor a perfect cosine for an
// output in which nothing could be compared (the full matrix is verify/report_test.cpp).
TEST(Report, NoOkBesideAValuePastItsLimit) {
  using Role = Criterion::Role;
  Report r;
  r.elements = 4096;
  r.compared = 4096;
  r.criteria.push_back({"ulp", true, 1.0, 0.45, "reported only: 300 distinct pairs (< 1024)", Criterion::Bound::at_most, Role::reported_only});
  r.criteria.push_back({"rel_l2", true, 0.001, 0.01, "|o-r|/|r|"});
  const std::string t = to_text(r);
  std::istringstream lines(t);
  for (std::string line; std::getline(lines, line);) {
    if (line.find(" ulp:") != std::string::npos) {
      EXPECT_EQ(line.find("ok"), std::string::npos) << line;
      EXPECT_NE(line.find("over limit (reported only)"), std::string::npos) << line;
    }
    if (line.find(" rel_l2:") != std::string::npos) {
      EXPECT_EQ(line.rfind("  ok ", 0), 0u) << line;
    }
  }
}

TEST(Report, AllNanOutputHasNoPassingCosine) {
  const Case c = random_case(1360);
  const Problem& p = c.problem;
  const Inputs in = make_inputs(p, c.seed, c.dist);
  std::vector<float> o(static_cast<size_t>(p.o_elems()), std::nanf(""));
  Report r = judge(p, in, KernelOutput{o, std::nullopt, int64_t{0}}, Declared{});
  EXPECT_FALSE(r.pass());
  const std::string t = to_text(r);
  std::istringstream lines(t);
  for (std::string line; std::getline(lines, line);)
    if (line.find(" cosine:") != std::string::npos) {
      EXPECT_EQ(line.find("ok"), std::string::npos) << t;
      EXPECT_EQ(line.rfind("  n/a  cosine: n/a", 0), 0u) << t;
    }
}

TEST(Tightness, IsTheCriterionNearestItsLimit) {
  using Role = Criterion::Role;
  using Bound = Criterion::Bound;
  Report r;
  r.criteria.push_back({"unwritten", true, 0, 0, "poison left"});
  r.criteria.push_back({"cosine", true, 0.99995, 0.9999, "", Bound::at_least});  // half the margin
  r.criteria.push_back({"rel_l2", true, 0.003, 0.01, ""});                       // 30%
  r.criteria.push_back({"ulp", true, 0.9, 0.45, "reported only for this dtype", Bound::at_most, Role::reported_only});  // not judged
  r.criteria.push_back({"lse", true, 0.4, 1, "the row nearest its limit"});  // 40%
  auto t = tightest_criterion(r);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->criterion, "cosine");
  EXPECT_NEAR(t->ratio, 0.5, 1e-9);
  EXPECT_EQ(to_text(*t), "cosine 0.99995 \u2265 0.9999 (50%)");
  r.criteria.push_back({"out_of_bounds", false, 3, 0, "canary bytes"});
  EXPECT_EQ(tightest_criterion(r)->criterion, "out_of_bounds");
  EXPECT_GE(tightest_criterion(r)->ratio, 1.0);
  EXPECT_EQ(to_text(*tightest_criterion(r)).rfind("out_of_bounds 3 > 0", 0), 0u);
  // An exact kernel (every ratio 0): the first criterion with a measured limit, not a zero count.
  Report exact;
  exact.criteria.push_back({"unwritten", true, 0, 0, "poison left"});
  exact.criteria.push_back({"cosine", true, 1, 0.9999, "", Bound::at_least});
  exact.criteria.push_back({"rel_l2", true, 0, 0.01, ""});
  EXPECT_EQ(tightest_criterion(exact)->criterion, "cosine");
}

}  // namespace
}  // namespace flashcheck
