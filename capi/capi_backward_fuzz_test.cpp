// Backward fuzzing through the C API (API 6): fc_fuzz2 with fc_fuzz_options.backward hands each
// case's callback the inputs `flashcheck run --backward` draws for it (a non-finite value placed
// where no masked pair meets it) and, through fc_callback_d_out, the dO make_d_out draws from the
// case's seed, in o's storage; shrinking's calls get their own case's. fc_make_backward_inputs
// rebuilds a case with its dO. A forward campaign and an API 4 caller are unchanged.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "capi/capi_test_util.h"
#include "capi/flashcheck.h"
#include "reference/random_variant_test_util.h"
#include "runner/staged_problem.h"
#include "testing/test_seed.h"

namespace flashcheck {
namespace {

const int kOneThread = (omp_set_num_threads(1), 1);  // tiny problems (capi_backward_test.cpp says why)

bool holds(const char* text, const std::string& what) { return std::string(text).find(what) != std::string::npos; }

// Equal bit for bit, or both NaN (a NaN's payload may change through a 16-bit encoding).
bool same(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  uint32_t x, y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  return x == y;
}

bool same_all(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), same);
}

::testing::AssertionResult same_values(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << what << ": " << got.size() << " values, expected " << want.size();
  for (size_t i = 0; i < got.size(); ++i)
    if (!same(got[i], want[i]))
      return ::testing::AssertionFailure() << what << " element " << i << ": " << got[i] << ", expected " << want[i];
  return ::testing::AssertionSuccess();
}

Problem problem_of(const fc_attention2& a) {
  char line[8192];
  fc_attention2_to_string(&a, line, sizeof line);
  return parse_problem(line);
}

// What one callback saw: its problem, q, k, v and dO as logical rows (read through the runner's own
// storage of the problem), whether the padding of dO is NaN, and fc_callback_d_out's status.
struct Call {
  Problem p;
  std::vector<float> q, k, v, dout;
  bool dout_shaped_as_o = false, dout_padding_nan = true;
  fc_status d_out_status = FC_OK;
};

struct Recorder {
  std::vector<Call> calls;
  int64_t fail_from_skv = -1;  // >= 0: a case with at least this many keys "fails its gradients" (else declined)

  static int32_t run(void* user, const fc_attention2* a, const fc_tensors* t) {
    auto* self = static_cast<Recorder*>(user);
    Call c;
    c.p = problem_of(*a);
    const Storage st(c.p, Inputs{}, kPadTokens);  // as runner/staged_problem.h stages it (no paged cache here)
    c.q = st.decode(Tensor::q, t->q.data, c.p.dtype);
    c.k = st.decode(Tensor::k, t->k.data, c.p.dtype);
    c.v = st.decode(Tensor::v, t->v.data, c.p.dtype);
    fc_tensor_view d{};
    c.d_out_status = fc_callback_d_out(&d);
    if (c.d_out_status == FC_OK) {
      c.dout_shaped_as_o = d.dtype == static_cast<int32_t>(c.p.o_dtype()) && d.ndim == t->o.ndim &&
                           std::equal(d.shape, d.shape + d.ndim, t->o.shape) && std::equal(d.strides, d.strides + d.ndim, t->o.strides);
      c.dout = st.decode(Tensor::o, d.data, c.p.o_dtype());
      std::vector<char> covered(static_cast<size_t>(st.elems(Tensor::o)), 0);
      st.mark_covered(Tensor::o, covered);
      std::vector<float> all(covered.size());
      decode(c.p.o_dtype(), d.data, static_cast<int64_t>(all.size()), all.data());
      for (size_t i = 0; i < all.size(); ++i) c.dout_padding_nan = c.dout_padding_nan && (covered[i] || std::isnan(all[i]));
    }
    const bool fails = self->fail_from_skv >= 0 && c.p.seq_kv >= self->fail_from_skv;
    self->calls.push_back(std::move(c));
    if (!fails) {
      fc_set_callback_error("recorded");
      return FC_CALLBACK_DECLINE;  // a decline depends on the problem alone, and is never shrunk to
    }
    fc_set_callback_error("dk fails cosine");
    return 1;
  }
};

fc_fuzz_options options(uint64_t seed, int64_t cases, bool backward) {
  fc_fuzz_options o;
  fc_fuzz_options_init4(&o);
  o.cases = cases;
  o.seed = seed;
  o.max_seq = 24;
  o.windows = 1;  // rows that see only some keys: where the two placements part
  o.layouts = (1u << FC_BHSD) | (1u << FC_BSHD) | (1u << FC_THD);
  o.backward = backward ? 1 : 0;
  return o;
}

fc_case2 drawn(const fc_fuzz_options& o, int64_t i, std::vector<int32_t>& lengths) {
  fc_case2 c{};
  c.problem.struct_size = sizeof(fc_attention2);
  lengths.assign(4096, 0);
  EXPECT_EQ(fc_draw_case2(&o, i, &c, lengths.data(), lengths.size(), nullptr), FC_OK) << fc_last_error();
  return c;
}

// Every case of a backward campaign: the callback's q, k, v are make_inputs(..., backward) of the
// case fc_draw_case2 names, and its dO is make_d_out of the case's seed, laid as o is (o's shape,
// strides and dtype; NaN on THD padding). On the non-finite cases the forward's placement differs
// in some, so a campaign that planted the forward's way fails here.
TEST(CApiBackwardFuzz, EachCaseGetsTheBackwardsInputsAndItsOwnDOut) {
  const uint64_t seed = testing::seed_for(2501);
  const fc_fuzz_options o = options(seed, 300, true);
  Recorder rec;
  fc_campaign* camp = nullptr;
  ASSERT_EQ(fc_fuzz2(&Recorder::run, &rec, &o, &camp), FC_OK) << fc_last_error();
  fc_campaign_summary sum;
  fc_campaign_get_summary(camp, &sum);
  fc_campaign_free(camp);
  ASSERT_EQ(sum.skipped, 300);
  ASSERT_EQ(rec.calls.size(), 300u) << "one call per case, in case order";
  int64_t nonfinite = 0, moved = 0, thd = 0;
  for (int64_t i = 0; i < 300; ++i) {
    std::vector<int32_t> lengths;
    const fc_case2 c = drawn(o, i, lengths);
    const Problem p = problem_of(c.problem);
    const Call& got = rec.calls[static_cast<size_t>(i)];
    SCOPED_TRACE("campaign seed " + std::to_string(seed) + " case " + std::to_string(i) + ": " + to_string(p));
    ASSERT_EQ(got.p.seq_q, p.seq_q);
    ASSERT_EQ(got.p.layout, p.layout);
    const Dist dist = static_cast<Dist>(c.dist);  // FC_DIST_* follow Dist's order
    const Inputs want = make_inputs(p, c.input_seed, dist, /*backward=*/true);
    ASSERT_TRUE(same_values(got.q, want.q, "q"));
    ASSERT_TRUE(same_values(got.k, want.k, "k"));
    ASSERT_TRUE(same_values(got.v, want.v, "v"));
    ASSERT_EQ(got.d_out_status, FC_OK);
    EXPECT_TRUE(got.dout_shaped_as_o);
    EXPECT_TRUE(got.dout_padding_nan);
    ASSERT_TRUE(same_values(got.dout, make_d_out(p, c.input_seed), "dO"));
    thd += p.layout == Layout::thd;
    if (dist != Dist::nonfinite) continue;
    ++nonfinite;
    const Inputs fwd = make_inputs(p, c.input_seed, dist);
    moved += !same_all(fwd.q, want.q) || !same_all(fwd.k, want.k) || !same_all(fwd.v, want.v);
  }
  EXPECT_GT(thd, 0);
  EXPECT_GE(nonfinite, 15) << "campaign seed " << seed;
  EXPECT_GE(moved, 1) << "no non-finite case placed apart from the forward's: the test cannot tell them apart (seed " << seed << ")";
  std::printf("%lld non-finite cases, %lld placed apart from the forward's\n", static_cast<long long>(nonfinite),
              static_cast<long long>(moved));
}

// The same options without backward: the forward's placement, and no dO to read.
TEST(CApiBackwardFuzz, AForwardCampaignIsUnchangedAndLendsNoDOut) {
  const fc_fuzz_options o = options(testing::seed_for(2502), 60, false);
  Recorder rec;
  fc_campaign* camp = nullptr;
  ASSERT_EQ(fc_fuzz2(&Recorder::run, &rec, &o, &camp), FC_OK) << fc_last_error();
  fc_campaign_free(camp);
  ASSERT_EQ(rec.calls.size(), 60u);
  for (int64_t i = 0; i < 60; ++i) {
    std::vector<int32_t> lengths;
    const fc_case2 c = drawn(o, i, lengths);
    const Call& got = rec.calls[static_cast<size_t>(i)];
    const Inputs want = make_inputs(problem_of(c.problem), c.input_seed, static_cast<Dist>(c.dist));
    ASSERT_TRUE(same_values(got.q, want.q, "q")) << "case " << i;
    ASSERT_TRUE(same_values(got.k, want.k, "k")) << "case " << i;
    EXPECT_EQ(got.d_out_status, FC_ERR_INVALID);
  }
  fc_tensor_view d{};
  EXPECT_EQ(fc_callback_d_out(&d), FC_ERR_INVALID);  // outside any callback
  EXPECT_TRUE(holds(fc_last_error(), "backward campaign")) << fc_last_error();
}

// A failing case shrinks through the same runner: every call, shrinking's included, has its own
// case's dO, so the kept (shrunk) case's inputs and dO are what fc_make_backward_inputs rebuilds.
TEST(CApiBackwardFuzz, ShrinkingCallsGetTheirOwnCasesDOut) {
  fc_fuzz_options o = options(testing::seed_for(2503), 30, true);
  o.max_failures = 1;
  Recorder rec;
  rec.fail_from_skv = 3;
  fc_campaign* camp = nullptr;
  ASSERT_EQ(fc_fuzz2(&Recorder::run, &rec, &o, &camp), FC_OK) << fc_last_error();
  ASSERT_EQ(fc_campaign_failure_count(camp), 1) << fc_campaign_log(camp);
  fc_case2 kept{};
  kept.problem.struct_size = sizeof(fc_attention2);
  fc_report* report = nullptr;
  ASSERT_EQ(fc_campaign_failure2(camp, 0, &kept, &report), FC_OK) << fc_last_error();
  const Problem p = problem_of(kept.problem);
  EXPECT_EQ(p.seq_kv, 3) << to_string(p) << ": not shrunk to the smallest failing key count";
  EXPECT_GT(rec.calls.size(), 30u) << "no shrinking call was made";
  // The calls on the kept problem (the shrinking step that found it, and the confirming re-runs).
  const std::vector<float> want = make_d_out(p, kept.input_seed);
  const Inputs inputs = make_inputs(p, kept.input_seed, static_cast<Dist>(kept.dist), true);
  int64_t on_kept = 0;
  for (const Call& c : rec.calls) {
    if (c.p.batch != p.batch || c.p.heads_q != p.heads_q || c.p.heads_kv != p.heads_kv || c.p.seq_q != p.seq_q ||
        c.p.seq_kv != p.seq_kv || c.p.head_dim_qk != p.head_dim_qk || c.p.head_dim_v != p.head_dim_v || !same_all(c.q, inputs.q))
      continue;
    ++on_kept;
    EXPECT_TRUE(same_values(c.dout, want, "the kept case's dO"));
  }
  EXPECT_GE(on_kept, 1);
  // fc_make_backward_inputs rebuilds it.
  fc_inputs* in = nullptr;
  ASSERT_EQ(fc_make_backward_inputs(&kept.problem, kept.dist, kept.input_seed, &in), FC_OK) << fc_last_error();
  fc_tensor_view d{};
  ASSERT_EQ(fc_inputs_d_out(in, &d), FC_OK) << fc_last_error();
  const Storage st(p, Inputs{});
  EXPECT_TRUE(same_values(st.decode(Tensor::o, d.data, p.o_dtype()), want, "fc_inputs_d_out"));
  fc_inputs_free(in);
  fc_campaign_free(camp);
}

// fc_make_backward_inputs on every variant (paged caches and shared pages too): q, k, v as
// make_inputs(..., backward) stores them and dO as make_d_out's in o's storage; fc_make_inputs2's
// handle draws no dO and says so.
TEST(CApiBackwardFuzz, MakeBackwardInputsIsTheCaseWithItsDOut) {
  std::mt19937_64 g(testing::seed_for(2504));
  for (int n = 0; n < 40; ++n) {
    const Problem p = random_variant_problem(g);
    const uint64_t seed = testing::seed_for(2505) + static_cast<uint64_t>(n);
    Staged s(p, seed, 0);  // its C problem struct
    fc_inputs* in = nullptr;
    ASSERT_EQ(fc_make_backward_inputs(&s.a, FC_DIST_NONFINITE, seed, &in), FC_OK) << fc_last_error() << "\n" << to_string(p);
    fc_tensors t;
    fc_tensors_init(&t);
    ASSERT_EQ(fc_inputs_get(in, nullptr, &t), FC_OK);
    const Inputs want = make_inputs(p, seed, Dist::nonfinite, true);
    const Storage st(p, want);
    EXPECT_TRUE(same_values(st.decode(Tensor::q, t.q.data, p.dtype), want.q, "q")) << to_string(p);
    EXPECT_TRUE(same_values(st.decode(Tensor::k, t.k.data, p.dtype), want.k, "k")) << to_string(p);
    EXPECT_TRUE(same_values(st.decode(Tensor::v, t.v.data, p.dtype), want.v, "v")) << to_string(p);
    fc_tensor_view d{};
    ASSERT_EQ(fc_inputs_d_out(in, &d), FC_OK) << fc_last_error();
    EXPECT_EQ(d.dtype, static_cast<int32_t>(p.o_dtype()));
    EXPECT_EQ(std::vector<int64_t>(d.shape, d.shape + d.ndim), st.shape(Tensor::o));
    EXPECT_TRUE(same_values(st.decode(Tensor::o, d.data, p.o_dtype()), make_d_out(p, seed), "dO")) << to_string(p);
    fc_inputs_free(in);
    ASSERT_EQ(fc_make_inputs2(&s.a, FC_DIST_NORMAL, seed, &in), FC_OK) << fc_last_error();
    EXPECT_EQ(fc_inputs_d_out(in, &d), FC_ERR_INVALID);
    EXPECT_TRUE(holds(fc_last_error(), "fc_make_backward_inputs")) << fc_last_error();
    fc_inputs_free(in);
  }
}

// A binary built against API 4 or 5: fc_fuzz_options_init3 writes their struct and nothing past it,
// and such a struct fuzzes a forward (no dO lent). fc_fuzz's callback has no dO: backward is refused.
TEST(CApiBackwardFuzz, AnApi4CallerKeepsItsLayoutAndFcFuzzRefusesBackward) {
  struct {
    fc_fuzz_options opt;  // the API 4 prefix is what init3 may write
    unsigned char guard[64];
  } f;
  std::memset(&f, 0xAB, sizeof f);
  fc_fuzz_options_init3(&f.opt);
  const size_t api4 = offsetof(fc_fuzz_options, backward);
  EXPECT_EQ(f.opt.struct_size, api4);
  const auto* bytes = reinterpret_cast<const unsigned char*>(&f.opt);
  for (size_t i = api4; i < sizeof f.opt; ++i) ASSERT_EQ(bytes[i], 0xAB) << "fc_fuzz_options_init3 wrote byte " << i;
  f.opt.cases = 5;
  f.opt.max_seq = 16;
  f.opt.seed = testing::seed_for(2506);
  f.opt.backward = 1;  // past its struct_size: never read
  Recorder rec;
  fc_campaign* camp = nullptr;
  ASSERT_EQ(fc_fuzz2(&Recorder::run, &rec, &f.opt, &camp), FC_OK) << fc_last_error();
  fc_campaign_free(camp);
  ASSERT_EQ(rec.calls.size(), 5u);
  for (const Call& c : rec.calls) EXPECT_EQ(c.d_out_status, FC_ERR_INVALID) << "an API 4 struct asked for a backward";

  fc_fuzz_options full;
  fc_fuzz_options_init4(&full);
  EXPECT_EQ(full.struct_size, sizeof(fc_fuzz_options));
  EXPECT_EQ(full.backward, 0);
  full.backward = 1;
  auto plain = [](void*, const fc_attention*, const void*, const void*, const void*, void*, float*) -> int32_t { return 0; };
  EXPECT_EQ(fc_fuzz(plain, nullptr, &full, &camp), FC_ERR_INVALID);
  EXPECT_TRUE(holds(fc_last_error(), "backward")) << fc_last_error();
}

}  // namespace
}  // namespace flashcheck
