// The C API's backward pass (API 5), called as a C caller would through libflashcheck.so, against
// the C++ it wraps: fc_reference_backward is the fp64 backward oracle laid into the caller's storage
// on every variant and layout, fc_check_backward is verify_backward's verdict (and the forward
// judge's beside it), deliberately broken gradients fail, and bad input — dO or a gradient of the
// wrong shape or dtype, a gradient aliasing an input — is named.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "capi/capi_test_util.h"
#include "capi/flashcheck.h"
#include "reference/gradient_storage.h"
#include "reference/naive.h"
#include "reference/naive_backward.h"
#include "reference/random_variant_test_util.h"
#include "reference/replica_backward.h"
#include "reference/rng.h"
#include "testing/test_seed.h"
#include "verify/backward_criteria.h"
#include "verify/backward_expected.h"
#include "verify/backward_report.h"

namespace flashcheck {
namespace {

// One thread: every problem here is tiny, and a parallel region on this loaded 2-core machine costs
// more than its work (verify/backward_criteria_test.cpp measured 1 s against 39 s). Verdicts never
// depend on the thread count.
const int kOneThread = (omp_set_num_threads(1), 1);

bool holds(const char* text, const std::string& what) { return std::string(text).find(what) != std::string::npos; }

uint64_t bits(double x) {
  uint64_t u;
  std::memcpy(&u, &x, 8);
  return u;
}

// A staged problem with a fresh dO (N(0,1) rounded to the output dtype) in o's storage.
struct Backward : Staged {
  std::vector<float> dout;
  std::vector<uint8_t> dout_bytes;
  fc_gradients g{};
  Backward(const Problem& problem, uint64_t seed, int64_t pad) : Staged(problem, seed, pad) {
    const CounterRng rng(seed, 77);
    dout.resize(static_cast<size_t>(p.o_elems()));
    for (size_t x = 0; x < dout.size(); ++x) dout[x] = round_to(p.o_dtype(), static_cast<float>(rng.normal(x)));
    fc_gradients_init(&g);
    g.d_out = stage_in(Tensor::o, dout, p.o_dtype(), dout_bytes);
  }
  std::string line() const { return to_string(p); }
};

// fp64 buffers of q's, k's, v's storage, filled with a value no gradient has, so every element the
// call leaves alone shows.
struct Outputs {
  std::vector<double> dq, dk, dv, dsinks;
  void attach(Backward& b) {
    const Storage& st = *b.st;
    dq.assign(static_cast<size_t>(st.elems(Tensor::q)), 12345.0);
    dk.assign(static_cast<size_t>(st.elems(Tensor::k)), 12345.0);
    dv.assign(static_cast<size_t>(st.elems(Tensor::v)), 12345.0);
    b.g.dq = view(dq.data(), FC_F64, st.shape(Tensor::q));
    b.g.dk = view(dk.data(), FC_F64, st.shape(Tensor::k));
    b.g.dv = view(dv.data(), FC_F64, st.shape(Tensor::v));
    if (b.p.sinks) {
      dsinks.assign(static_cast<size_t>(b.p.heads_q), 12345.0);
      b.g.dsinks = view(dsinks.data(), FC_F64, {b.p.heads_q});
    }
  }
};

TEST(CApiBackward, ReferenceIsTheOracleInTheCallersStorageOnEveryVariant) {
  std::mt19937_64 g(testing::seed_for(2401));
  int thd = 0, paged = 0, sinks = 0, nonzero = 0;
  for (int n = 0; n < 50; ++n) {
    const Problem p = random_variant_problem(g);
    Backward b(p, testing::seed_for(2402) + static_cast<uint64_t>(n), p.layout == Layout::thd ? 3 : 0);
    Outputs out;
    out.attach(b);
    ASSERT_EQ(fc_reference_backward(&b.a, &b.t, &b.g), FC_OK) << fc_last_error() << "\n" << b.line();
    const BackwardResult want = naive_attention_backward(p, b.in, b.dout);
    // Every element of the caller's buffers, padding and unused pages included: the oracle's
    // gradients laid into the storage (0 where nothing reads, sums where pages are shared).
    for (const auto& [t, got, logical] : {std::tuple{Tensor::q, &out.dq, &want.dq}, {Tensor::k, &out.dk, &want.dk},
                                          {Tensor::v, &out.dv, &want.dv}}) {
      const std::vector<double> expect = gradient_in_storage(*b.st, t, std::span<const double>(logical->data(), logical->size()));
      ASSERT_EQ(expect.size(), got->size());
      for (size_t e = 0; e < expect.size(); ++e) {
        ASSERT_EQ(bits((*got)[e]), bits(expect[e])) << b.line() << " " << to_string(t) << " element " << e;
        nonzero += (*got)[e] != 0;
      }
    }
    if (p.sinks) {
      for (int64_t h = 0; h < p.heads_q; ++h) ASSERT_EQ(bits(out.dsinks[static_cast<size_t>(h)]), bits(want.dsinks[static_cast<size_t>(h)]));
    }
    thd += p.layout == Layout::thd;
    paged += p.paged();
    sinks += p.sinks;
  }
  EXPECT_GT(thd, 0);
  EXPECT_GT(paged, 0);
  EXPECT_GT(sinks, 0);
  EXPECT_GT(nonzero, 1000) << "the gradients were all zero: nothing was compared";
}

// dq through a strided output view (two spare columns per row, rows spread out) holds bitwise what
// the contiguous one does, and nothing is written between its rows.
TEST(CApiBackward, AStridedOutputViewGetsTheSameGradient) {
  std::mt19937_64 g(testing::seed_for(2403));
  for (int n = 0; n < 10; ++n) {
    Problem p = random_variant_problem(g);
    Backward b(p, testing::seed_for(2404) + static_cast<uint64_t>(n), 0);
    Outputs out;
    out.attach(b);
    ASSERT_EQ(fc_reference_backward(&b.a, &b.t, &b.g), FC_OK) << fc_last_error();
    const fc_tensor_view cq = b.g.dq;
    std::vector<int64_t> big(cq.shape, cq.shape + cq.ndim);
    big.back() += 2;
    std::vector<double> wide(static_cast<size_t>([&] {
      int64_t e = 1;
      for (int64_t d : big) e *= d;
      return e;
    }()), -7.0);
    fc_tensor_view sq = view(wide.data(), FC_F64, big);
    sq.shape[cq.ndim - 1] = cq.shape[cq.ndim - 1];
    b.g.dq = sq;
    ASSERT_EQ(fc_reference_backward(&b.a, &b.t, &b.g), FC_OK) << fc_last_error();
    int64_t count = 1;
    for (int i = 0; i < cq.ndim; ++i) count *= cq.shape[i];
    int64_t spare = 0;
    for (int64_t flat = 0; flat < count; ++flat) {
      int64_t rest = flat, off = 0;
      for (int i = cq.ndim - 1; i >= 0; --i) {
        off += (rest % cq.shape[i]) * sq.strides[i];
        rest /= cq.shape[i];
      }
      ASSERT_EQ(bits(wide[static_cast<size_t>(off)]), bits(out.dq[static_cast<size_t>(flat)])) << b.line();
    }
    for (double x : wide) spare += x == -7.0;
    EXPECT_EQ(spare, static_cast<int64_t>(wide.size()) - count) << "written outside the view's elements";
  }
}

// Whether two sequences of a paged problem read one cache slot (fc_check_backward refuses those).
bool shares_slots(const Backward& b) {
  if (!b.p.paged()) return false;
  std::vector<int64_t> rows;
  b.st->for_each_row(Tensor::k, [&](int64_t, int64_t s, int64_t) { rows.push_back(s); });
  std::sort(rows.begin(), rows.end());
  return std::adjacent_find(rows.begin(), rows.end()) != rows.end();
}

// A backward kernel's gradients staged in the gradient dtype, and the forward's o and lse.
struct Kernel {
  std::vector<uint8_t> dq, dk, dv, o;
  std::vector<float> lse, dsinks;
  void stage(Backward& b, const KernelGradients& k, const OracleResult& fwd) {
    const DType gd = gradient_dtype(b.p);
    b.g.dq = b.stage_in(Tensor::q, k.dq, gd, dq);
    b.g.dk = b.stage_in(Tensor::k, k.dk, gd, dk);
    b.g.dv = b.stage_in(Tensor::v, k.dv, gd, dv);
    b.g.dsinks = fc_tensor_view{};
    if (k.dsinks) {
      dsinks = *k.dsinks;
      b.g.dsinks = view(dsinks.data(), FC_F32, {b.p.heads_q});
    }
    std::vector<float> o32(fwd.o.begin(), fwd.o.end()), lse32(fwd.lse.begin(), fwd.lse.end());
    b.t.o = b.stage_in(Tensor::o, o32, b.p.o_dtype(), o);
    lse.assign(static_cast<size_t>(b.st->elems(Tensor::lse)), kStagedNaN);
    b.st->scatter(Tensor::lse, lse32.data(), lse.data());
    b.t.lse = view(lse.data(), FC_F32, b.st->shape(Tensor::lse));
  }
};

KernelGradients rounded_oracle(const Problem& p, const BackwardResult& r) {
  const DType gd = gradient_dtype(p);
  auto rounded = [&](const UninitVector<double>& x) {
    std::vector<float> out(x.begin(), x.end());
    round_all(out, gd);
    return out;
  };
  KernelGradients k{rounded(r.dq), rounded(r.dk), rounded(r.dv), std::nullopt};
  if (p.sinks) k.dsinks = std::vector<float>(r.dsinks.begin(), r.dsinks.end());
  return k;
}

// The oracle's gradients rounded to the gradient dtype pass, with the verdict and text
// verify_backward gives on the logical tensors; a dK scaled by 2 fails it. The forward verdict
// beside it is the judge's on the rounded oracle's O and LSE.
TEST(CApiBackward, CheckPassesTheRoundedOracleAndFailsADoubledDk) {
  std::mt19937_64 g(testing::seed_for(2405));
  int judged = 0, broken = 0, shared = 0;
  for (int n = 0; n < 40; ++n) {
    const Problem p = random_variant_problem(g);
    Backward b(p, testing::seed_for(2406) + static_cast<uint64_t>(n), p.layout == Layout::thd ? 2 : 0);
    const BackwardResult truth = naive_attention_backward(p, b.in, b.dout);
    OracleResult fwd = naive_attention(p, b.in);
    std::vector<float> o32(fwd.o.begin(), fwd.o.end());
    round_all(o32, p.o_dtype());
    fwd.o.assign(o32.begin(), o32.end());
    const KernelGradients good = rounded_oracle(p, truth);
    Kernel k;
    k.stage(b, good, fwd);
    fc_backward_report* r = nullptr;
    const fc_status st = fc_check_backward(&b.a, &b.t, &b.g, nullptr, &r);
    if (shares_slots(b)) {
      EXPECT_EQ(st, FC_ERR_CANNOT_TEST) << b.line();
      EXPECT_TRUE(holds(fc_last_error(), "same slot")) << fc_last_error();
      ++shared;
      continue;
    }
    ASSERT_EQ(st, FC_OK) << fc_last_error() << "\n" << b.line();
    EXPECT_EQ(fc_backward_report_pass(r), 1) << b.line() << "\n" << fc_backward_report_text(r);
    const BackwardReport direct = verify_backward(p, make_backward_expected(p, b.in, b.dout), good);
    EXPECT_EQ(std::string(fc_backward_report_text(r)), to_text(direct));
    ASSERT_NE(fc_backward_report_forward(r), nullptr);
    EXPECT_EQ(fc_report_pass(fc_backward_report_forward(r)), 1) << fc_report_text(fc_backward_report_forward(r));
    EXPECT_EQ(fc_backward_report_gradient_count(r), p.sinks ? 4 : 3);
    EXPECT_STREQ(fc_backward_report_gradient_name(r, 1), "dk");
    EXPECT_EQ(fc_backward_report_gradient_name(r, 4), nullptr);
    const std::string json = fc_backward_report_json(r);
    EXPECT_TRUE(json.find("\"backward\"") != std::string::npos && json.find("\"forward\"") != std::string::npos) << json;
    fc_attention2 back;
    fc_attention2_init(&back);
    ASSERT_EQ(fc_backward_report_problem2(r, &back), FC_OK);
    char text[4096];
    fc_attention2_to_string(&back, text, sizeof text);
    EXPECT_EQ(std::string(text), b.line());
    fc_backward_report_free(r);
    ++judged;

    double max_dk = 0;
    for (float x : good.dk) max_dk = std::max(max_dk, std::fabs(static_cast<double>(x)));
    if (max_dk < 1e-3) continue;  // no key gets a gradient worth scaling (every key unseen, or a sink takes all)
    KernelGradients bad = good;
    // Twice the truth: cosine 0.8 and rel_l2 1 in any dtype. (1.5x gives cosine 0.923 and rel_l2 0.5,
    // exactly at fp8's limits (0.92, 0.5): a 1.5x dK of an e5m2 problem passes, by the tolerance.)
    for (float& x : bad.dk) x = round_to(gradient_dtype(p), 2.0f * x);
    Kernel kb;
    kb.stage(b, bad, fwd);
    ASSERT_EQ(fc_check_backward(&b.a, &b.t, &b.g, nullptr, &r), FC_OK) << fc_last_error();
    const BackwardReport direct_bad = verify_backward(p, make_backward_expected(p, b.in, b.dout), bad);
    EXPECT_EQ(std::string(fc_backward_report_text(r)), to_text(direct_bad));
    EXPECT_EQ(fc_backward_report_gradient_pass(r, 0), 1) << "dq was not touched";
    // fp8 backwards are judged loosely: a dK that cancels to its terms' rounding (a few keys, e4m3)
    // is judged by the baseline rule alone, whose fp8 allowance can hold a doubled noise. In 16 and
    // 32 bits a doubled dK always fails.
    if (!is_fp8(p.dtype) || fc_backward_report_pass(r) == 0) {
      EXPECT_EQ(fc_backward_report_pass(r), 0) << b.line() << "\n" << fc_backward_report_text(r);
      EXPECT_EQ(fc_backward_report_gradient_pass(r, 1), 0) << "dk was scaled";
      ASSERT_GE(fc_backward_report_failed_count(r), 1);
      EXPECT_TRUE(holds(fc_backward_report_failed_name(r, 0), "dk: ")) << fc_backward_report_failed_name(r, 0);
      fc_location w;
      EXPECT_EQ(fc_backward_report_gradient_worst(r, 1, &w), 1);
      EXPECT_EQ(w.q_tile, -1);
      ++broken;
    }
    fc_backward_report_free(r);
  }
  EXPECT_GT(judged, 15);
  EXPECT_GT(broken, 10);  // failed, of those with a dK worth doubling
  std::printf("judged %d, broken %d failed, %d refused for shared pages\n", judged, broken, shared);
}

// A forward output that is wrong fails the combined verdict, named as the forward's, while every
// gradient passes; without o there is no forward verdict.
TEST(CApiBackward, TheForwardVerdictIsReportedApart) {
  Problem p = parse_problem("b=1 hq=4 hkv=2 sq=9 skv=13 dqk=16 dv=16 causal=bottom_right dtype=bf16");
  Backward b(p, testing::seed_for(2407), 0);
  const BackwardResult truth = naive_attention_backward(p, b.in, b.dout);
  OracleResult fwd = naive_attention(p, b.in);
  for (double& x : fwd.o) x = round_to(DType::bf16, static_cast<float>(x * 1.25));
  Kernel k;
  k.stage(b, rounded_oracle(p, truth), fwd);
  fc_backward_report* r = nullptr;
  ASSERT_EQ(fc_check_backward(&b.a, &b.t, &b.g, nullptr, &r), FC_OK) << fc_last_error();
  EXPECT_EQ(fc_backward_report_pass(r), 0);
  for (int32_t i = 0; i < fc_backward_report_gradient_count(r); ++i) EXPECT_EQ(fc_backward_report_gradient_pass(r, i), 1);
  ASSERT_GE(fc_backward_report_failed_count(r), 1);
  EXPECT_TRUE(holds(fc_backward_report_failed_name(r, 0), "forward: ")) << fc_backward_report_failed_name(r, 0);
  fc_backward_report_free(r);
  b.t.o = fc_tensor_view{};
  b.t.lse = fc_tensor_view{};
  ASSERT_EQ(fc_check_backward(&b.a, &b.t, &b.g, nullptr, &r), FC_OK) << fc_last_error();
  EXPECT_EQ(fc_backward_report_pass(r), 1) << fc_backward_report_text(r);
  EXPECT_EQ(fc_backward_report_forward(r), nullptr);
  fc_backward_report_free(r);
}

// The report's page (API 6): with o, the forward's sections and then the gradients', the failing
// one named with its worst element and its tiles (the options' tiles) and, with error_maps, its
// heatmap; the reproduction set on the report shows, escaped. Without o, the gradients alone and a
// line saying the forward was not judged.
TEST(CApiBackward, TheReportPageShowsTheGradientsWithOrWithoutTheForward) {
  Problem p = parse_problem("b=1 hq=4 hkv=2 sq=20 skv=29 dqk=16 dv=16 causal=bottom_right dtype=bf16");
  Backward b(p, testing::seed_for(2410), 0);
  const BackwardResult truth = naive_attention_backward(p, b.in, b.dout);
  OracleResult fwd = naive_attention(p, b.in);
  for (double& x : fwd.o) x = round_to(DType::bf16, static_cast<float>(x));
  KernelGradients bad = rounded_oracle(p, truth);
  for (float& x : bad.dk) x = round_to(DType::bf16, 2.0f * x);
  Kernel k;
  k.stage(b, bad, fwd);
  fc_check_options opt;
  fc_check_options_init2(&opt);
  opt.error_maps = 1;
  opt.tile_q = 16, opt.tile_kv = 8;
  fc_backward_report* r = nullptr;
  ASSERT_EQ(fc_check_backward(&b.a, &b.t, &b.g, &opt, &r), FC_OK) << fc_last_error();
  ASSERT_EQ(fc_backward_report_gradient_pass(r, 1), 0) << fc_backward_report_text(r);
  ASSERT_EQ(fc_backward_report_set_repro(r, "replay('<dk>')"), FC_OK);
  fc_location w;
  ASSERT_EQ(fc_backward_report_gradient_worst(r, 1, &w), 1);
  std::string page = fc_backward_report_html(r);
  EXPECT_TRUE(holds(page.c_str(), "<title>flashcheck FAIL"));
  EXPECT_LT(page.find("<h2>Forward verdict (o, lse)</h2>"), page.find("<h2 id=\"backward\">")) << page.substr(0, 2000);
  EXPECT_TRUE(holds(page.c_str(), "data-gradient=\"dk\" data-pass=\"false\""));
  EXPECT_TRUE(holds(page.c_str(), "data-gradient=\"dq\" data-pass=\"true\""));
  EXPECT_TRUE(holds(page.c_str(), "key=" + std::to_string(w.row) + ", col=" + std::to_string(w.col)));
  EXPECT_TRUE(holds(page.c_str(), "in kv-tile " + std::to_string(w.row / 8) + " (its key)")) << "the options' tiles";
  EXPECT_TRUE(holds(page.c_str(), "<canvas id=\"grad-map-dk\">")) << "error_maps: the gradient's heatmap";
  EXPECT_TRUE(holds(page.c_str(), "replay(&#39;&lt;dk&gt;&#39;)"));
  EXPECT_TRUE(holds(fc_backward_report_text(r), "replay('<dk>')"));
  fc_backward_report_free(r);

  opt.error_maps = 0;  // no maps asked for: no canvas
  ASSERT_EQ(fc_check_backward(&b.a, &b.t, &b.g, &opt, &r), FC_OK) << fc_last_error();
  EXPECT_FALSE(holds(fc_backward_report_html(r), "grad-map-dk"));
  fc_backward_report_free(r);

  b.t.o = fc_tensor_view{};
  b.t.lse = fc_tensor_view{};
  opt.error_maps = 1;
  ASSERT_EQ(fc_check_backward(&b.a, &b.t, &b.g, &opt, &r), FC_OK) << fc_last_error();
  page = fc_backward_report_html(r);
  EXPECT_TRUE(holds(page.c_str(), "<title>flashcheck FAIL"));
  EXPECT_TRUE(holds(page.c_str(), "forward <span class=\"na\">not judged</span>")) << page.substr(0, 2000);
  EXPECT_FALSE(holds(page.c_str(), "Forward verdict"));
  EXPECT_TRUE(holds(page.c_str(), "<canvas id=\"grad-map-dk\">"));
  EXPECT_TRUE(holds(page.c_str(), "(no reproducing command was given)"));
  fc_backward_report_free(r);
}

// FlashAttention's packed layout: q, k, v and dq, dk, dv as interleaved views of one [B, S, 3, H, D]
// buffer each. The gradients share a buffer but no element, which is no aliasing.
TEST(CApiBackward, PackedGradientViewsAreNotAliasing) {
  const Problem p = parse_problem("b=2 hq=3 hkv=3 sq=7 skv=7 dqk=8 dv=8 causal=none dtype=f16 layout=bshd");
  Backward b(p, testing::seed_for(2408), 0);
  const BackwardResult truth = naive_attention_backward(p, b.in, b.dout);
  const KernelGradients good = rounded_oracle(p, truth);
  std::vector<uint16_t> packed(static_cast<size_t>(2 * 7 * 3 * 3 * 8));
  auto part = [&](int which, const std::vector<float>& logical, Tensor t) {
    fc_tensor_view v{};
    v.data = packed.data() + which * 3 * 8;
    v.dtype = FC_F16;
    v.ndim = 4;
    const int64_t shape[4] = {2, 7, 3, 8}, strides[4] = {7 * 3 * 3 * 8, 3 * 3 * 8, 8, 1};
    for (int i = 0; i < 4; ++i) v.shape[i] = shape[i], v.strides[i] = strides[i];
    const Storage st(p, b.in);  // bshd, contiguous: logical → [B, S, H, D]
    std::vector<float> dense(static_cast<size_t>(st.elems(t)));
    st.scatter(t, logical.data(), dense.data());
    for (int64_t bb = 0; bb < 2; ++bb)
      for (int64_t s = 0; s < 7; ++s)
        for (int64_t h = 0; h < 3; ++h)
          encode(DType::f16, &dense[static_cast<size_t>(((bb * 7 + s) * 3 + h) * 8)], 8,
                 static_cast<uint16_t*>(v.data) + bb * strides[0] + s * strides[1] + h * strides[2]);
    return v;
  };
  b.g.dq = part(0, good.dq, Tensor::q);
  b.g.dk = part(1, good.dk, Tensor::k);
  b.g.dv = part(2, good.dv, Tensor::v);
  fc_backward_report* r = nullptr;
  ASSERT_EQ(fc_check_backward(&b.a, &b.t, &b.g, nullptr, &r), FC_OK) << fc_last_error();
  EXPECT_EQ(fc_backward_report_pass(r), 1) << fc_backward_report_text(r);
  fc_backward_report_free(r);
  // The same buffer with dk's view shifted one head onto dq's neighbour: now elements are shared.
  b.g.dk = b.g.dq;
  b.g.dk.data = static_cast<uint16_t*>(b.g.dq.data) + 8;
  ASSERT_EQ(fc_check_backward(&b.a, &b.t, &b.g, nullptr, &r), FC_ERR_INVALID);
  EXPECT_TRUE(holds(fc_last_error(), "dq shares memory with dk")) << fc_last_error();
}

// Each bad input is refused with FC_ERR_INVALID (FC_ERR_CANNOT_TEST for NaN in dO) and a message
// naming the view and what is wrong; the good call beside them succeeds, so the refusals are the
// inputs' doing.
TEST(CApiBackward, BadInputIsNamed) {
  const Problem p = parse_problem("b=2 hq=4 hkv=2 sq=5 skv=6 dqk=16 dv=8 causal=top_left dtype=bf16 sinks=1");
  Backward b(p, testing::seed_for(2409), 0);
  const KernelGradients good = rounded_oracle(p, naive_attention_backward(p, b.in, b.dout));
  OracleResult fwd = naive_attention(p, b.in);
  Kernel k;
  k.stage(b, good, fwd);
  fc_backward_report* r = nullptr;
  ASSERT_EQ(fc_check_backward(&b.a, &b.t, &b.g, nullptr, &r), FC_OK) << fc_last_error();
  fc_backward_report_free(r);
  Outputs out;
  Backward ref(p, testing::seed_for(2409), 0);
  out.attach(ref);
  ASSERT_EQ(fc_reference_backward(&ref.a, &ref.t, &ref.g), FC_OK) << fc_last_error();

  auto refused = [&](fc_gradients g, fc_tensors t, fc_status want, const std::string& says) {
    fc_backward_report* rr = nullptr;
    EXPECT_EQ(fc_check_backward(&b.a, &t, &g, nullptr, &rr), want) << says;
    EXPECT_EQ(rr, nullptr);
    EXPECT_TRUE(holds(fc_last_error(), says)) << "wanted '" << says << "', got: " << fc_last_error();
  };
  fc_gradients g = b.g;
  g.d_out.dtype = FC_F16;
  refused(g, b.t, FC_ERR_INVALID, "d_out is FC_F16; the problem needs FC_BF16");
  g = b.g;
  g.d_out.shape[3] = 16;  // Dqk where Dv belongs
  refused(g, b.t, FC_ERR_INVALID, "d_out has shape [2, 4, 5, 16]; the problem needs [B, Hq, Sq, Dv] (bhsd) = [2, 4, 5, 8]");
  g = b.g;
  g.d_out = fc_tensor_view{};
  refused(g, b.t, FC_ERR_INVALID, "d_out (dO, the output's gradient) is absent");
  g = b.g;
  g.dq.dtype = FC_F32;
  refused(g, b.t, FC_ERR_INVALID, "dq is FC_F32; the problem needs FC_BF16");
  g = b.g;
  g.dk.shape[1] = 4;  // Hq where Hkv belongs
  refused(g, b.t, FC_ERR_INVALID, "dk has shape [2, 4, 6, 16]");
  g = b.g;
  g.dv = fc_tensor_view{};
  refused(g, b.t, FC_ERR_INVALID, "dv is absent");
  g = b.g;
  g.dsinks.dtype = FC_BF16;
  refused(g, b.t, FC_ERR_INVALID, "dsinks is FC_BF16; the problem needs FC_F32");
  // An input moved onto a gradient's memory (each input here is no larger than dq, so it lies within
  // dq's buffer and overlaps nothing else): the aliasing is named, before any value is read.
  for (fc_tensor_view fc_tensors::*input : {&fc_tensors::q, &fc_tensors::k, &fc_tensors::v, &fc_tensors::o}) {
    fc_tensors t = b.t;
    (t.*input).data = b.g.dq.data;
    const char* name = input == &fc_tensors::q ? "q" : input == &fc_tensors::k ? "k" : input == &fc_tensors::v ? "v" : "o";
    refused(b.g, t, FC_ERR_INVALID, std::string("dq shares memory with ") + name);
  }
  g = b.g;
  g.d_out.data = b.g.dq.data;
  refused(g, b.t, FC_ERR_INVALID, "dq shares memory with d_out");
  fc_tensors t = b.t;
  t.v.data = b.g.dv.data;  // the same shape and dtype: exactly dv's elements
  refused(b.g, t, FC_ERR_INVALID, "dv shares memory with v");
  t = b.t;
  t.sinks.data = b.g.dsinks.data;
  refused(b.g, t, FC_ERR_INVALID, "dsinks shares memory with sinks");
  // NaN in dO is refused as NaN in q is, unless allowed.
  std::vector<uint8_t> nan_dout = k.o;  // o's storage shape and dtype
  const uint16_t qnan = 0x7FC0;
  std::memcpy(nan_dout.data() + 2 * 13, &qnan, 2);
  g = b.g;
  g.d_out.data = nan_dout.data();
  refused(g, b.t, FC_ERR_CANNOT_TEST, "input 'd_out' holds NaN");
  // A struct too small is refused by name.
  g = b.g;
  g.struct_size = 8;
  refused(g, b.t, FC_ERR_INVALID, "fc_gradients.struct_size");

  // fc_reference_backward: its outputs are FC_F64 and must not alias inputs or each other.
  auto ref_refused = [&](fc_gradients gg, const std::string& says) {
    EXPECT_EQ(fc_reference_backward(&ref.a, &ref.t, &gg), FC_ERR_INVALID) << says;
    EXPECT_TRUE(holds(fc_last_error(), says)) << "wanted '" << says << "', got: " << fc_last_error();
  };
  g = ref.g;
  g.dq.dtype = FC_F32;
  ref_refused(g, "dq is FC_F32; the problem needs FC_F64");
  g = ref.g;
  g.d_out.dtype = FC_F32;
  ref_refused(g, "d_out is FC_F32; the problem needs FC_BF16");
  g = ref.g;
  g.dv.data = ref.g.dk.data;  // dv (fp64 [2, 2, 6, 8]) inside dk's buffer ([2, 2, 6, 16])
  ref_refused(g, "dk shares memory with dv");
  fc_tensors rt = ref.t;
  rt.k.data = ref.g.dk.data;  // k (bf16) inside dk's buffer
  EXPECT_EQ(fc_reference_backward(&ref.a, &rt, &ref.g), FC_ERR_INVALID);
  EXPECT_TRUE(holds(fc_last_error(), "dk shares memory with k")) << fc_last_error();
  fc_gradients no_sinks = ref.g;
  Backward plain(parse_problem("b=1 hq=2 hkv=1 sq=3 skv=4 dqk=8 dv=8 causal=none dtype=f32"), testing::seed_for(2410), 0);
  Outputs po;
  po.attach(plain);
  plain.g.dsinks = no_sinks.dsinks;
  EXPECT_EQ(fc_reference_backward(&plain.a, &plain.t, &plain.g), FC_ERR_INVALID);
  EXPECT_TRUE(holds(fc_last_error(), "dsinks is given but the problem has no sinks")) << fc_last_error();
}

}  // namespace
}  // namespace flashcheck
