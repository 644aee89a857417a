// Problem model 2 through every path a kernel takes, in-process: the staging (storage layouts, NaN
// where no row maps, poisoned outputs, side tensors), the harness's checks after a launch (padding
// written, inputs written), the replica and the example plugin computing every variant and layout,
// ABI 2 and the kernel-module adapter, and variant kernels broken one way each, caught by name.
// The isolated side (worker processes, the shared memfd) is runner/reliability_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <optional>

#include "reference/replica.h"
#include "runner/campaign.h"
#include "runner/harness.h"
#include "runner/launch_variant.h"
#include "runner/registry.h"
#include "runner/staged_problem.h"
#include "runner/variant_cases.h"
#include "testing/test_seed.h"
#include "verify/backward_expected.h"
#include "verify/backward_report.h"
#include "verify/metrics.h"

namespace flashcheck {
namespace {

Case case_of(const VariantCase& vc, uint64_t salt) {
  return Case{parse_problem(vc.line), Dist::normal, flashcheck::testing::seed_for(salt)};
}

std::shared_ptr<Variant> kernel_in(const std::string& lib, const std::string& name) {
  for (auto& v : load_plugin(lib))
    if (v->name() == name) return v;
  ADD_FAILURE() << "no kernel " << name << " in " << lib;
  return nullptr;
}

// Every case is judged: varlen batches included (verify/criteria.cpp judges them per sequence).
std::optional<CaseOutcome> judged(const Variant& v, const Case& c, const std::string& plugin = "") {
  return run_case(v, c, 4096, plugin);
}

TEST(Variants, ProblemLinesRoundTrip) {
  for (const VariantCase& vc : variant_cases()) {
    const Problem p = parse_problem(vc.line);
    EXPECT_EQ(parse_problem(to_string(p)), p) << vc.what << ": " << to_string(p);
    EXPECT_FALSE(p.plain()) << vc.what;
  }
}

// Every storage element of an input a row maps to holds that row's value (exactly: the inputs are
// representable in the dtype), every other one NaN in the input dtype; outputs are poison in full;
// the side tensors are the inputs' own.
TEST(Staging, InputsAreNanWhereNoRowMapsAndOutputsArePoisoned) {
  int64_t nan_elements = 0;
  for (const VariantCase& vc : variant_cases()) {
    const Case c = case_of(vc, 7000);
    const Problem& p = c.problem;
    const Inputs in = make_inputs(p, c.seed, c.dist);
    const Staging st(p, in);
    const Storage& s = st.storage();
    for (Tensor t : {Tensor::q, Tensor::k, Tensor::v}) {
      const int b = static_cast<int>(t);
      std::vector<uint8_t> raw(st.bytes(b));
      st.fill(b, raw.data());
      std::vector<float> wide(static_cast<size_t>(s.elems(t)));
      decode(p.dtype, raw.data(), s.elems(t), wide.data());
      const std::vector<float>& want = t == Tensor::q ? in.q : t == Tensor::k ? in.k : in.v;
      std::vector<float> got(want.size());
      s.gather(t, wide.data(), got.data());
      EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0) << vc.what << " " << to_string(t);
      std::vector<char> covered;
      s.mark_covered(t, covered);
      for (size_t i = 0; i < covered.size(); ++i) {
        if (covered[i]) continue;
        ++nan_elements;
        ASSERT_TRUE(std::isnan(wide[i])) << vc.what << " " << to_string(t) << " element " << i << " no row maps to";
      }
    }
    for (int b : {int{kBufO}, int{kBufLse}}) {
      const DType d = b == kBufO ? p.o_dtype() : DType::f32;
      std::vector<uint8_t> raw(st.bytes(b));
      st.fill(b, raw.data());
      const uint32_t bits = poison_bits(d);
      for (size_t i = 0; i < raw.size(); i += static_cast<size_t>(dtype_bytes(d)))
        ASSERT_EQ(std::memcmp(raw.data() + i, &bits, static_cast<size_t>(dtype_bytes(d))), 0) << vc.what << " " << staged_buffer_name(b);
    }
    auto side = [&](int b, const void* want, size_t bytes) {
      ASSERT_EQ(st.bytes(b), bytes) << vc.what << " " << staged_buffer_name(b);
      std::vector<uint8_t> raw(bytes);
      st.fill(b, raw.data());
      EXPECT_EQ(std::memcmp(raw.data(), want, bytes), 0) << vc.what << " " << staged_buffer_name(b);
    };
    side(kBufAlibiSlopes, in.alibi_slopes.data(), in.alibi_slopes.size() * 4);
    side(kBufSinks, in.sinks.data(), in.sinks.size() * 4);
    side(kBufDescaleK, in.descale_k.data(), in.descale_k.size() * 4);
    side(kBufBlockTable, in.block_table.data(), p.paged() ? in.block_table.size() * 4 : 0);
    std::vector<int32_t> cu(s.cu_q().begin(), s.cu_q().end());
    if (p.varlen()) side(kBufCuSeqlensQ, cu.data(), cu.size() * 4);
    EXPECT_EQ(st.shape().num_pages, in.num_pages) << vc.what;
  }
  EXPECT_GT(nan_elements, 1000) << "the sample has padding, unused keys and unused pages to poison";
}

TEST(Staging, LengthsPastInt32AreRefusedNamingTheField) {
  // 4e9 queries: the problem is valid (inside the replica's declared space but for this), its
  // cu_seqlens cannot be int32. Refused before any buffer is made (the inputs are never drawn here).
  const Problem p = parse_problem("b=2 hq=1 hkv=1 sq=2000000000,2000000000 skv=1,1 d=16 layout=thd dtype=f32");
  try {
    Staging st(p, Inputs{});
    ADD_FAILURE() << "staged";
  } catch (const InvalidProblem& e) {
    EXPECT_NE(std::string(e.what()).find("cu_seqlens_q[2] = 4000000000"), std::string::npos) << e.what();
  }
  // And every kernel refuses it up front, so `run --problem` says why and tests nothing (125).
  auto why = Registry::builtin().find("replica")->unsupported(p);
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("int32"), std::string::npos) << *why;
}

TEST(Staging, InputsThatContradictTheProblemAreRefusedNamingTheField) {
  auto replica = Registry::builtin().find("replica");
  auto expect_refused = [&](const char* line, auto&& spoil, const char* field) {
    const Problem p = parse_problem(line);
    Inputs in = make_inputs(p, flashcheck::testing::seed_for(7010), Dist::normal);
    spoil(in);
    try {
      run_variant(*replica, p, in);
      ADD_FAILURE() << field << ": staged";
    } catch (const InvalidProblem& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  const char* paged = "b=2 hq=2 hkv=1 sq=9 skv=23,40 dqk=32 dv=32 causal=bottom_right dtype=bf16 page=7 pages=shuffled";
  expect_refused(paged, [](Inputs& in) { in.block_table[0] = static_cast<int32_t>(in.num_pages); }, "block_table[0][0]");
  expect_refused(paged, [](Inputs& in) { in.block_table[1] = -3; }, "block_table[0][1] = -3");
  const char* alibi = "b=2 hq=4 hkv=2 sq=21 skv=30 dqk=32 dv=32 causal=bottom_right dtype=f16 alibi=symmetric";
  expect_refused(alibi, [](Inputs& in) { in.alibi_slopes.pop_back(); }, "alibi_slopes has 3 values");
  expect_refused(alibi, [](Inputs& in) { in.q.pop_back(); }, "q has");
  const char* fp8 = "b=2 hq=2 hkv=1 sq=20 skv=31 dqk=32 dv=32 causal=none dtype=e4m3 odtype=bf16 descale=head";
  expect_refused(fp8, [](Inputs& in) { in.descale_v[1] = 0; }, "descale_v must be finite and positive");
}

// Output elements outside every row (THD padding) must keep their poison: a write there is
// counted, and the judge fails the case by it.
TEST(Staging, PaddingWritesAreCountedAndJudged) {
  const Problem p = parse_problem("b=3 hq=2 hkv=1 sq=5,0,17 skv=9,4,20 dqk=32 dv=32 causal=bottom_right dtype=bf16 layout=thd");
  const Inputs in = make_inputs(p, flashcheck::testing::seed_for(7020), Dist::normal);
  const Staging st(p, in);
  std::vector<uint8_t> o(st.bytes(kBufO)), lse(st.bytes(kBufLse));
  st.fill(kBufO, o.data());
  st.fill(kBufLse, lse.data());
  EXPECT_EQ(st.collect(o.data(), lse.data(), true).padding_written, 0);
  // The first pad token's row of head 1, element 3; and one pad LSE entry.
  const RowStrides& os = st.storage().strides(Tensor::o);
  const int64_t total = st.storage().cu_q().back();
  std::memset(o.data() + (total * os.seq + os.head + 3) * 2, 0, 2);
  EXPECT_EQ(st.collect(o.data(), lse.data(), true).padding_written, 1);
  std::memset(lse.data() + (total + 1) * 4, 0, 4);
  EXPECT_EQ(st.collect(o.data(), lse.data(), true).padding_written, 2);
  EXPECT_EQ(st.collect(o.data(), lse.data(), false).padding_written, 1) << "no LSE handed over: none judged";
  // A dense problem's outputs have no padding: nothing to count, no criterion.
  const Problem dense = parse_problem("b=1 hq=2 hkv=1 sq=7 skv=9 d=32 dtype=bf16 window=2,2");
  const Inputs din = make_inputs(dense, 3, Dist::normal);
  const Staging ds(dense, din);
  std::vector<uint8_t> dout(ds.bytes(kBufO));
  ds.fill(kBufO, dout.data());
  EXPECT_FALSE(ds.collect(dout.data(), dout.data(), false).padding_written);
  // The judge reports the count as padding_written.
  HarnessResult h = run_variant(*Registry::builtin().find("replica"), dense, din);
  h.padding_written = 5;
  const Report r = judge(dense, din, h.output(), Declared{});
  const auto failed = r.failed();
  ASSERT_EQ(failed, std::vector<std::string>{"padding_written"}) << to_text(r);
}

// The gradients' elements outside every row (THD pad tokens; keys past seqused; a paged cache's
// unread slots) must keep their poison too: a write there is counted and fails the backward.
TEST(Staging, GradientPaddingWritesAreCountedAndJudged) {
  const Problem p = parse_problem("b=3 hq=2 hkv=1 sq=5,0,17 skv=9,4,20 dqk=32 dv=32 causal=bottom_right dtype=bf16 layout=thd");
  const Inputs in = make_inputs(p, flashcheck::testing::seed_for(7021), Dist::normal);
  const std::vector<float> d_out = make_d_out(p, flashcheck::testing::seed_for(7022));
  const Staging st(p, in, d_out);
  std::vector<uint8_t> dq(st.bytes(kBufDq)), dk(st.bytes(kBufDk)), dv(st.bytes(kBufDv));
  st.fill(kBufDq, dq.data());
  st.fill(kBufDk, dk.data());
  st.fill(kBufDv, dv.data());
  ASSERT_EQ(st.collect_gradients(dq.data(), dk.data(), dv.data(), nullptr).padding_written, 0);
  // Every row written (as a correct kernel does) leaves the count at 0.
  const size_t eb = 2;
  for (const auto& [t, buf] : {std::pair{Tensor::q, &dq}, {Tensor::k, &dk}, {Tensor::v, &dv}})
    st.storage().for_each_row(t, [&, b = buf](int64_t, int64_t s, int64_t w) { std::memset(b->data() + s * eb, 0, w * eb); });
  EXPECT_EQ(st.collect_gradients(dq.data(), dk.data(), dv.data(), nullptr).padding_written, 0);
  // One element of dq's first pad token and one of dk's: counted.
  const int64_t total_q = st.storage().cu_q().back(), total_kv = st.storage().cu_kv().back();
  std::memset(dq.data() + (total_q * st.storage().strides(Tensor::q).seq + 5) * eb, 0, eb);
  std::memset(dk.data() + (total_kv * st.storage().strides(Tensor::k).seq + 1) * eb, 0, eb);
  const KernelGradients g = st.collect_gradients(dq.data(), dk.data(), dv.data(), nullptr);
  ASSERT_EQ(g.padding_written, 2);
  // The verdict fails by it, as a check of the backward call, and by nothing else.
  const BackwardExpected e = make_backward_expected(p, in, d_out);
  KernelGradients exact = g;
  exact.dq = e.baselines.front().dq, exact.dk = e.baselines.front().dk, exact.dv = e.baselines.front().dv;
  const BackwardReport r = verify_backward(p, e, exact);
  EXPECT_EQ(r.failed(), std::vector<std::string>{"padding_written"}) << to_text(r);
  // A dense problem's gradients have no such elements: nothing counted, no check.
  const Problem dense = parse_problem("b=1 hq=2 hkv=1 sq=7 skv=9 d=32 dtype=bf16");
  const Staging ds(dense, make_inputs(dense, 3, Dist::normal), make_d_out(dense, 4));
  std::vector<uint8_t> a(ds.bytes(kBufDq)), b(ds.bytes(kBufDk)), c(ds.bytes(kBufDv));
  EXPECT_FALSE(ds.collect_gradients(a.data(), b.data(), c.data(), nullptr).padding_written);
}

// The replica reads its buffers through the strides and side tensors it is handed, as any
// kernel: through the staging it gives bitwise what it gives on the logical inputs, for every
// layout and variant (fp8 and varlen included, whatever the judge makes of them).
TEST(Variants, ReplicaThroughStagingIsBitwiseTheReplicaOnLogicalInputs) {
  auto replica = make_replica_variant(/*declare_e5m2=*/true);
  ReplicaConfig cfg;
  cfg.finite_neg_inf = false;  // as the replica variant runs
  for (const VariantCase& vc : variant_cases()) {
    const Case c = case_of(vc, 7030);
    const Inputs in = make_inputs(c.problem, c.seed, c.dist);
    ASSERT_FALSE(replica->unsupported(c.problem)) << vc.what << ": " << *replica->unsupported(c.problem);
    const HarnessResult h = run_variant(*replica, c.problem, in);
    const ReplicaResult want = replica_attention(c.problem, in, cfg);
    ASSERT_EQ(h.o.size(), want.o.size()) << vc.what;
    EXPECT_EQ(std::memcmp(h.o.data(), want.o.data(), want.o.size() * 4), 0) << vc.what;
    ASSERT_TRUE(h.lse);
    EXPECT_EQ(std::memcmp(h.lse->data(), want.lse.data(), want.lse.size() * 4), 0) << vc.what;
    EXPECT_EQ(h.oob_writes, 0) << vc.what;
    EXPECT_EQ(h.padding_written.value_or(0), 0) << vc.what;
    EXPECT_EQ(h.padding_written.has_value(), c.problem.varlen()) << vc.what;
  }
}

// fp8 is judged under the calibrated fp8 tolerances (verify/TOLERANCE.md): the registry's replica
// declares e4m3 and passes there; e5m2 it declares only on request (registry.h), so those cases are
// refused here (the bitwise test above covers their staging).
TEST(Variants, ReplicaPassesTheJudgeOnEveryVariantAndLayout) {
  auto replica = Registry::builtin().find("replica");
  int judged_cases = 0;
  for (const VariantCase& vc : variant_cases()) {
    const Case c = case_of(vc, 7040);
    if (c.problem.dtype == DType::e5m2) {
      EXPECT_EQ(replica->unsupported(c.problem).value_or(""), "dtype " + std::string(to_string(c.problem.dtype)));
      continue;
    }
    const auto o = judged(*replica, c);
    if (!o) continue;
    ++judged_cases;
    EXPECT_FALSE(o->skipped) << vc.what << ": " << o->skipped.value_or("");
    EXPECT_TRUE(o->passed) << vc.what << "\n" << to_text(o->report);
  }
  EXPECT_GE(judged_cases, 10);
}

TEST(Variants, ExamplePluginComputesEveryVariantAndLayoutThroughAbi2) {
  auto v = kernel_in(FLASHCHECK_EXAMPLE_PLUGIN, "example_cpu_plugin");
  const Capabilities& c = v->caps();
  EXPECT_EQ(c.dtypes.size(), 5u);
  EXPECT_TRUE(c.windows && c.softcap && c.alibi_per_batch && c.sinks && c.seqused && c.paged);
  EXPECT_EQ(c.layouts, (std::vector<Layout>{Layout::bhsd, Layout::bshd, Layout::thd}));
  EXPECT_EQ(c.alibi, (std::vector<Alibi>{Alibi::symmetric, Alibi::signed_}));
  EXPECT_EQ(c.out_dtypes, (std::vector<DType>{DType::f16, DType::bf16}));
  EXPECT_EQ(c.descales, (std::vector<Descale>{Descale::tensor, Descale::head}));
  EXPECT_TRUE(c.page_sizes.empty()) << "any page size";
  int judged_cases = 0;
  for (const VariantCase& vc : variant_cases()) {
    const auto o = judged(*v, case_of(vc, 7050), FLASHCHECK_EXAMPLE_PLUGIN);
    if (!o) continue;
    ++judged_cases;
    EXPECT_FALSE(o->skipped) << vc.what << ": " << o->skipped.value_or("");
    EXPECT_TRUE(o->passed) << vc.what << "\n" << to_text(o->report);
  }
  EXPECT_GE(judged_cases, 12);
}

// A library that exports both entries, loaded through ABI 1 (as a flashcheck that predates ABI 2
// loads it): plain problems only, every variant refused with a reason, a plain campaign passing.
TEST(Variants, Abi1EntryIsGivenPlainProblemsOnly) {
  auto kernels = load_plugin_abi1(FLASHCHECK_EXAMPLE_PLUGIN);
  ASSERT_EQ(kernels.size(), 1u);
  const Variant& v = *kernels[0];
  EXPECT_FALSE(v.caps().windows || v.caps().paged || v.caps().layouts.size() != 1);
  for (const VariantCase& vc : variant_cases()) {
    const auto why = v.unsupported(parse_problem(vc.line));
    ASSERT_TRUE(why) << vc.what << " reached an ABI 1 kernel";
    EXPECT_FALSE(why->empty());
  }
  EXPECT_FALSE(v.unsupported(parse_problem("b=1 hq=2 hkv=1 sq=5 skv=7 d=32 dtype=bf16")));
}

// A kernel of problem model 1 (launch, no launch2) is never handed a variant, whatever it declares;
// one with launch2 is handed the window in its declared convention.
std::optional<Window> g_seen_window;

TEST(Variants, LaunchOnlyKernelsGetPlainProblemsAndLaunch2TheWindowInItsConvention) {
  Capabilities caps;
  caps.windows = true;
  KernelDef plain{"plain_only", caps, [](const Problem&, const void*, const void*, const void*, void*, float*, void*) {}};
  const KernelVariant old(plain);
  const Problem window = parse_problem("b=1 hq=1 hkv=1 sq=9 skv=9 d=32 dtype=f32 window=4,1");
  ASSERT_TRUE(old.unsupported(window));
  EXPECT_NE(old.unsupported(window)->find("launch2"), std::string::npos) << *old.unsupported(window);
  EXPECT_FALSE(old.unsupported(parse_problem("b=1 hq=1 hkv=1 sq=9 skv=9 d=32 dtype=f32")));

  for (auto conv : {WindowConvention::inclusive, WindowConvention::left_exclusive}) {
    KernelDef d{"records_window", caps};
    d.caps.window_convention = conv;
    d.launch2 = [](const Problem& p, const KernelArgs&) { g_seen_window = p.window; };
    const KernelVariant k(d);
    ASSERT_FALSE(k.unsupported(window));
    const Inputs in = make_inputs(window, 1, Dist::normal);
    for (Window w : {Window{4, 1}, Window{-1, 3}, Window{0, -1}}) {
      Problem p = window;
      p.window = w;
      g_seen_window.reset();
      run_variant(k, p, in);
      ASSERT_TRUE(g_seen_window);
      const int64_t want = conv == WindowConvention::left_exclusive && w.left >= 0 ? w.left + 1 : w.left;
      EXPECT_EQ(*g_seen_window, (Window{want, w.right}));
    }
  }
}

// The kernel-module adapter exports ABI 2: a kernel folder's launch2 reached as a plugin, its whole
// declaration (variants, layouts, page sizes, its left-exclusive window) crossing as fc_space2.
TEST(Variants, ModuleOfAVariantKernelRunsThroughAbi2) {
  auto v = kernel_in(FLASHCHECK_HOST_MODULE, "host_attention.module");
  const Capabilities& c = v->caps();
  EXPECT_TRUE(c.windows && c.softcap && c.seqused && c.paged);
  EXPECT_FALSE(c.sinks || !c.alibi.empty());
  EXPECT_EQ(c.layouts, (std::vector<Layout>{Layout::bhsd, Layout::bshd, Layout::thd}));
  EXPECT_EQ(c.page_sizes, (std::vector<int64_t>{1, 3, 16, 64}));
  EXPECT_EQ(c.window_convention, WindowConvention::left_exclusive);
  const char* lines[] = {
      "b=2 hq=4 hkv=2 sq=37 skv=45 d=32 causal=none dtype=f32 window=5,3",
      "b=1 hq=2 hkv=1 sq=50 skv=40 d=64 causal=bottom_right dtype=f32 window=0,0",
      "b=2 hq=2 hkv=2 sq=17 skv=29 d=16 causal=top_left dtype=f32 layout=bshd softcap=4 used=20,29",
      "b=2 hq=2 hkv=1 sq=9 skv=23,40 d=32 causal=bottom_right dtype=f32 page=3 pages=shuffled window=6,-1",
      "b=3 hq=2 hkv=2 sq=4,7,1 skv=20,33,5 d=32 causal=bottom_right dtype=f32 layout=thd page=16 pages=shared",
      "b=3 hq=2 hkv=1 sq=5,0,17 skv=9,4,20 d=32 causal=none dtype=f32 layout=thd used=9,2,11 window=3,2",
  };
  int judged_cases = 0;
  for (const char* line : lines) {
    const Case cs{parse_problem(line), Dist::normal, flashcheck::testing::seed_for(7060)};
    ASSERT_FALSE(v->unsupported(cs.problem)) << line << ": " << *v->unsupported(cs.problem);
    const auto o = judged(*v, cs, FLASHCHECK_HOST_MODULE);
    if (!o) continue;
    ++judged_cases;
    EXPECT_TRUE(o->passed) << line << "\n" << to_text(o->report);
  }
  EXPECT_GE(judged_cases, 4);
  // Outside its declaration (ALiBi, another page size): refused by the module's own supports().
  EXPECT_TRUE(v->unsupported(parse_problem("b=1 hq=2 hkv=1 sq=9 skv=9 d=32 dtype=f32 alibi=signed")));
  EXPECT_TRUE(v->unsupported(parse_problem("b=1 hq=2 hkv=1 sq=9 skv=9 d=32 dtype=f32 page=5")));
}

// Variant kernels broken one way each (gpu/plugin/broken_plugins.c, its ABI 2 block): every one
// failed by the criterion its fault must trip; the two that declare their convention pass.
struct Broken {
  const char* kernel;
  const char* line;
  const char* criterion;  // nullptr: must pass
};
void PrintTo(const Broken& b, std::ostream* os) { *os << b.kernel; }

class BrokenVariants : public ::testing::TestWithParam<Broken> {};

TEST_P(BrokenVariants, AreCaughtByTheirCriterion) {
  const Broken b = GetParam();
  auto v = kernel_in(FLASHCHECK_BROKEN_VARIANT_PLUGINS, b.kernel);
  ASSERT_TRUE(v);
  const Case c{parse_problem(b.line), Dist::normal, flashcheck::testing::seed_for(7070)};
  const auto o = judged(*v, c, FLASHCHECK_BROKEN_VARIANT_PLUGINS);
  ASSERT_TRUE(o.has_value());
  ASSERT_FALSE(o->skipped) << *o->skipped;
  if (!b.criterion) {
    EXPECT_TRUE(o->passed) << to_text(o->report);
    return;
  }
  EXPECT_FALSE(o->passed);
  const auto failed = o->report.failed();
  EXPECT_NE(std::find(failed.begin(), failed.end(), b.criterion), failed.end()) << to_text(o->report);
}

INSTANTIATE_TEST_SUITE_P(
    Harness, BrokenVariants,
    ::testing::Values(
        Broken{"broken_window_left", "b=2 hq=4 hkv=2 sq=37 skv=45 dqk=32 dv=32 causal=none dtype=bf16 window=5,3", "rel_l2"},
        Broken{"broken_window_convention", "b=2 hq=4 hkv=2 sq=37 skv=45 dqk=32 dv=32 causal=none dtype=bf16 window=5,3", "rel_l2"},
        Broken{"variant_window_exclusive", "b=2 hq=4 hkv=2 sq=37 skv=45 dqk=32 dv=32 causal=bottom_right dtype=bf16 window=5,3",
               nullptr},
        Broken{"broken_past_cache", "b=2 hq=2 hkv=1 sq=9 skv=23,40 dqk=32 dv=32 causal=bottom_right dtype=bf16 page=7 pages=shuffled",
               "nan_inf_positions"},
        Broken{"broken_alibi_lse", "b=2 hq=4 hkv=2 sq=21 skv=30 dqk=32 dv=32 causal=bottom_right dtype=f16 alibi=symmetric", "lse"},
        Broken{"variant_alibi_key_offset",
               "b=2 hq=4 hkv=2 sq=21 skv=30 dqk=32 dv=32 causal=bottom_right dtype=f16 alibi=symmetric", nullptr},
        Broken{"broken_softcap_late", "b=1 hq=2 hkv=2 sq=33 skv=47 dqk=32 dv=32 causal=top_left dtype=f32 softcap=5", "rel_l2"},
        Broken{"broken_padding_write",
               "b=3 hq=2 hkv=2 sq=4,7,1 skv=20,33,5 dqk=32 dv=32 causal=bottom_right dtype=bf16 layout=thd page=8 pages=shared",
               "padding_written"},
        Broken{"broken_input_write", "b=1 hq=2 hkv=1 sq=9 skv=13 dqk=32 dv=32 causal=none dtype=bf16 window=2,2", "kernel_error"}),
    [](const ::testing::TestParamInfo<Broken>& i) { return std::string(i.param.kernel); });

// The harness itself, below the judge: a padding write is counted whatever the criteria can judge,
// and an input written in-process is an error naming the buffer and the byte.
TEST(Harness, CountsPaddingWritesAndNamesAWrittenInput) {
  auto pad = kernel_in(FLASHCHECK_BROKEN_VARIANT_PLUGINS, "broken_padding_write");
  const Problem p = parse_problem("b=3 hq=2 hkv=1 sq=5,0,17 skv=9,4,20 dqk=32 dv=32 causal=bottom_right dtype=bf16 layout=thd");
  const Inputs in = make_inputs(p, flashcheck::testing::seed_for(7080), Dist::normal);
  const HarnessResult h = run_variant(*pad, p, in);
  EXPECT_EQ(h.padding_written, p.head_dim_v) << "one padding row of o written";
  auto writer = kernel_in(FLASHCHECK_BROKEN_VARIANT_PLUGINS, "broken_input_write");
  try {
    run_variant(*writer, p, in);
    ADD_FAILURE() << "an input written went unnoticed";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("wrote into its input k at byte 0"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace flashcheck
