// The C API's problem model 2 (API 3), called as a C caller would through libflashcheck.so, against
// the C++ it wraps: fc_reference is the fp64 oracle on every variant and layout, strided views give
// bitwise what contiguous buffers give, fc_check2 is the judge's verdict, bad input is named, and a
// caller built against API 2 keeps working.
#include <gtest/gtest.h>

#include <set>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "capi/capi_test_util.h"
#include "capi/flashcheck.h"
#include "reference/mask.h"
#include "reference/naive.h"
#include "reference/random_variant_test_util.h"
#include "reference/sequences.h"
#include "reference/storage.h"
#include "runner/campaign.h"
#include "runner/registry.h"
#include "testing/test_seed.h"
#include "verify/judge.h"

namespace flashcheck {
namespace {

constexpr float kNaNf = std::numeric_limits<float>::quiet_NaN();

bool holds(const char* text, const std::string& what) { return std::string(text).find(what) != std::string::npos; }

// The oracle's result as fc_reference wrote it, read back through the storage rows.
struct Written {
  std::vector<double> o, lse;
};

Written reference(Staged& s) {
  Written w;
  w.o.assign(static_cast<size_t>(s.st->elems(Tensor::o)), 12345.0);
  w.lse.assign(static_cast<size_t>(s.st->elems(Tensor::lse)), 12345.0);
  const fc_tensor_view o = view(w.o.data(), FC_F64, s.st->shape(Tensor::o));
  const fc_tensor_view lse = view(w.lse.data(), FC_F64, s.st->shape(Tensor::lse));
  EXPECT_EQ(fc_reference(&s.a, &s.t, &o, &lse), FC_OK) << fc_last_error() << "\n" << to_string(s.p);
  return w;
}

uint64_t bits(double x) {
  uint64_t u;
  std::memcpy(&u, &x, 8);
  return u;
}

TEST(CApi2, ReferenceIsTheOracleOnEveryVariant) {
  std::mt19937_64 g(testing::seed_for(601));
  int thd = 0, paged = 0, empty_rows = 0;
  for (int n = 0; n < 60; ++n) {
    const Problem p = random_variant_problem(g);
    Staged s(p, testing::seed_for(602) + static_cast<uint64_t>(n), p.layout == Layout::thd ? 3 : 0);
    const Written w = reference(s);
    const OracleResult want = naive_attention(p, s.in);
    const Sequences seqs(p);
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t h = 0; h < p.heads_q; ++h)
        for (int64_t i = 0; i < p.sq(b); ++i) {
          const int64_t at = s.st->row(Tensor::o, b, h, i);
          for (int64_t c = 0; c < p.head_dim_v; ++c)
            ASSERT_EQ(bits(w.o[static_cast<size_t>(at + c)]), bits(want.o[static_cast<size_t>(seqs.o_row(b, h, i) + c)]))
                << to_string(p) << " b=" << b << " h=" << h << " i=" << i << " c=" << c;
          const double lse = w.lse[static_cast<size_t>(s.st->row(Tensor::lse, b, h, i))];
          ASSERT_EQ(bits(lse), bits(want.lse[static_cast<size_t>(seqs.lse_at(b, h, i))])) << to_string(p);
          empty_rows += lse == -INFINITY;
        }
    // Every element no query row maps to (THD padding rows) is NaN: no row's output.
    std::vector<char> covered;
    s.st->mark_covered(Tensor::o, covered);
    for (size_t e = 0; e < covered.size(); ++e) {
      if (!covered[e]) {
        ASSERT_TRUE(std::isnan(w.o[e])) << to_string(p) << " element " << e;
      }
    }
    thd += p.layout == Layout::thd;
    paged += p.paged();
  }
  EXPECT_GT(thd, 0);
  EXPECT_GT(paged, 0);
  EXPECT_GT(empty_rows, 0) << "no row without keys drawn: the -inf convention was not exercised";
}

// The same data through a strided view (rows spread in a larger buffer, heads and positions in
// another order): fc_reference and fc_check2 see bitwise the same inputs.
TEST(CApi2, StridedViewsGiveBitwiseTheSameResult) {
  std::mt19937_64 g(testing::seed_for(603));
  for (int n = 0; n < 20; ++n) {
    Problem p = random_variant_problem(g);
    Staged s(p, testing::seed_for(604) + static_cast<uint64_t>(n), 0);
    const Written contiguous = reference(s);
    // q in a buffer with two spare columns per row and a spare row per head: any strided view.
    const fc_tensor_view& cq = s.t.q;
    const int n_dims = cq.ndim;
    std::vector<int64_t> big(cq.shape, cq.shape + n_dims);
    big[static_cast<size_t>(n_dims - 1)] += 2;
    big[static_cast<size_t>(n_dims - 2)] += 1;
    std::vector<uint8_t> wide(static_cast<size_t>(dtype_bytes(p.dtype)) * [&] {
      int64_t e = 1;
      for (int64_t d : big) e *= d;
      return static_cast<size_t>(e);
    }(), 0xEE);
    fc_tensor_view sq = view(wide.data(), cq.dtype, big);
    for (int i = 0; i < n_dims; ++i) sq.shape[i] = cq.shape[i];
    // Copy element by element (contiguous source).
    int64_t count = 1;
    for (int i = 0; i < n_dims; ++i) count *= cq.shape[i];
    const size_t eb = static_cast<size_t>(dtype_bytes(p.dtype));
    for (int64_t flat = 0; flat < count; ++flat) {
      int64_t rest = flat, off = 0;
      for (int i = n_dims - 1; i >= 0; --i) {
        off += (rest % cq.shape[i]) * sq.strides[i];
        rest /= cq.shape[i];
      }
      std::memcpy(wide.data() + static_cast<size_t>(off) * eb, s.q.data() + static_cast<size_t>(flat) * eb, eb);
    }
    const fc_tensor_view saved = s.t.q;
    s.t.q = sq;
    const Written strided = reference(s);
    s.t.q = saved;
    ASSERT_EQ(strided.o.size(), contiguous.o.size());
    for (size_t e = 0; e < strided.o.size(); ++e) ASSERT_EQ(bits(strided.o[e]), bits(contiguous.o[e])) << to_string(p);
    for (size_t e = 0; e < strided.lse.size(); ++e) ASSERT_EQ(bits(strided.lse[e]), bits(contiguous.lse[e])) << to_string(p);
  }
}

// Every sequence of a listed problem given the lengths of its longest (used keys at most those
// stored): the variants stay, the sequences are alike.
Problem equal_sequences(Problem p) {
  auto fill = [](std::vector<int64_t>& v) {
    if (!v.empty()) v.assign(v.size(), *std::max_element(v.begin(), v.end()));
  };
  fill(p.seqlens_q);
  fill(p.seqlens_kv);
  if (!p.seqused_kv.empty()) p.seqused_kv.assign(p.seqused_kv.size(), std::min(p.seqused_kv[0], p.skv_stored(0)));
  normalize(p);
  validate(p);
  return p;
}

// The oracle rounded to the output dtype passes fc_check2; one element moved fails it. The verdict
// and the text are the judge's on the logical inputs, with the sequences of a batch alike and, in
// the second test, of different lengths (the criteria judge each row against its own sequence).
void check2_rounded_oracle(uint64_t salt, bool equal) {
  std::mt19937_64 g(testing::seed_for(salt));
  int judged = 0;
  for (int n = 0; n < 40; ++n) {
    const Problem drawn = random_variant_problem(g);
    const Problem p = equal ? equal_sequences(drawn) : drawn;
    if (p.total_q() == 0) continue;
    Staged s(p, testing::seed_for(606) + static_cast<uint64_t>(n), p.layout == Layout::thd ? 2 : 0);
    const OracleResult want = naive_attention(p, s.in);
    std::vector<float> o32(want.o.begin(), want.o.end()), lse32(want.lse.begin(), want.lse.end());
    round_all(o32, p.o_dtype());
    auto staged_o = [&](const std::vector<float>& logical, std::vector<uint8_t>& bytes) {
      std::vector<float> st(static_cast<size_t>(s.st->elems(Tensor::o)), kNaNf);
      s.st->scatter(Tensor::o, logical.data(), st.data());
      bytes.resize(st.size() * static_cast<size_t>(dtype_bytes(p.o_dtype())));
      encode(p.o_dtype(), st.data(), static_cast<int64_t>(st.size()), bytes.data());
      return view(bytes.data(), c_dtype(p.o_dtype()), s.st->shape(Tensor::o));
    };
    std::vector<float> lse_st(static_cast<size_t>(s.st->elems(Tensor::lse)), kNaNf);
    s.st->scatter(Tensor::lse, lse32.data(), lse_st.data());
    std::vector<uint8_t> ob;
    s.t.o = staged_o(o32, ob);
    s.t.lse = view(lse_st.data(), FC_F32, s.st->shape(Tensor::lse));
    fc_check_options opt;
    fc_check_options_init2(&opt);
    fc_report* r = nullptr;
    ASSERT_EQ(fc_check2(&s.a, &s.t, &opt, &r), FC_OK) << fc_last_error() << "\n" << to_string(p);
    EXPECT_EQ(fc_report_pass(r), 1) << fc_report_text(r);
    const Report direct = judge(p, s.in, KernelOutput{o32, lse32, std::nullopt}, Declared{});
    EXPECT_EQ(std::string(fc_report_text(r)), to_text(direct));
    fc_attention2 back;
    fc_attention2_init(&back);
    ASSERT_EQ(fc_report_problem2(r, &back), FC_OK);
    char line[4096];
    fc_attention2_to_string(&back, line, sizeof line);
    EXPECT_EQ(std::string(line), to_string(p));
    fc_attention old;
    EXPECT_EQ(fc_report_problem(r, &old), p.plain() ? FC_OK : FC_ERR_INVALID);
    fc_report_free(r);

    // One element of a random row moved by far more than any rounding, and than the fp8 limits'
    // allowance (a fraction of max|o|: verify/TOLERANCE.md).
    std::vector<float> bad = o32;
    const size_t e = static_cast<size_t>(g() % bad.size());
    float max_o = 0;
    for (float x : o32)
      if (std::isfinite(x)) max_o = std::max(max_o, std::abs(x));
    bad[e] += 1.0f + 2.0f * std::abs(bad[e]) + max_o;
    std::vector<uint8_t> badb;
    s.t.o = staged_o(bad, badb);
    ASSERT_EQ(fc_check2(&s.a, &s.t, &opt, &r), FC_OK) << fc_last_error();
    EXPECT_EQ(fc_report_pass(r), 0) << to_string(p) << " element " << e << "\n" << fc_report_text(r);
    fc_report_free(r);
    ++judged;
  }
  EXPECT_GT(judged, 20);
}

TEST(CApi2, Check2PassesTheRoundedOracleAndFailsABrokenOne) { check2_rounded_oracle(605, true); }
TEST(CApi2, Check2PassesTheRoundedOracleOfSequencesOfDifferentLengths) { check2_rounded_oracle(614, false); }

// The inputs fc_make_inputs2 stages are make_inputs' values in the problem's storage.
TEST(CApi2, MakeInputs2IsTheDrawnInputsInTheirStorage) {
  std::mt19937_64 g(testing::seed_for(607));
  for (int n = 0; n < 20; ++n) {
    const Problem p = random_variant_problem(g);
    const uint64_t seed = testing::seed_for(608) + static_cast<uint64_t>(n);
    std::vector<int32_t> lens(512);
    fc_attention2 a;
    fc_attention2_init(&a);
    ASSERT_EQ(fc_attention2_parse(to_string(p).c_str(), &a, lens.data(), lens.size(), nullptr), FC_OK);
    fc_inputs* h = nullptr;
    ASSERT_EQ(fc_make_inputs2(&a, FC_DIST_OUTLIER_KEYS, seed, &h), FC_OK) << fc_last_error();
    fc_attention2 got;
    fc_attention2_init(&got);
    fc_tensors t;
    fc_tensors_init(&t);
    ASSERT_EQ(fc_inputs_get(h, &got, &t), FC_OK);
    char line[4096];
    fc_attention2_to_string(&got, line, sizeof line);
    EXPECT_EQ(std::string(line), to_string(p));
    const Inputs want = make_inputs(p, seed, Dist::outlier_keys);
    const Storage st(p, want);
    for (auto [which, view, logical] : {std::tuple{Tensor::q, t.q, &want.q}, {Tensor::k, t.k, &want.k}, {Tensor::v, t.v, &want.v}}) {
      std::vector<float> wide(static_cast<size_t>(st.elems(which)));
      decode(p.dtype, view.data, st.elems(which), wide.data());
      std::vector<float> back(logical->size());
      st.gather(which, wide.data(), back.data());
      EXPECT_EQ(back, *logical) << to_string(p);
    }
    if (p.paged()) {
      ASSERT_NE(t.block_table.data, nullptr);
      EXPECT_EQ(std::vector<int32_t>(static_cast<int32_t*>(t.block_table.data),
                                     static_cast<int32_t*>(t.block_table.data) + want.block_table.size()),
                want.block_table);
    }
    if (p.alibi != Alibi::none) {
      ASSERT_NE(t.alibi_slopes.data, nullptr);
      EXPECT_EQ(*static_cast<float*>(t.alibi_slopes.data), want.alibi_slopes[0]);
    }
    EXPECT_EQ(t.sinks.data != nullptr, p.sinks);
    EXPECT_EQ(t.descale_v.data != nullptr, p.descale != Descale::none);
    fc_inputs_free(h);
  }
}

TEST(CApi2, ProblemLinesRoundTripWithTheirVariants) {
  const char* line = "b=3 hq=4 hkv=2 sq=5,0,7 skv=9,3,12 dqk=32 dv=16 causal=bottom_right dtype=e4m3 window=4,0 softcap=30 "
                     "alibi=signed slopes=batch sinks=1 layout=thd used=9,1,12 odtype=f16 descale=head";
  fc_attention2 a;
  fc_attention2_init(&a);
  size_t needed = 0;
  int32_t small[3];
  EXPECT_EQ(fc_attention2_parse(line, &a, small, 3, &needed), FC_ERR_INVALID);
  EXPECT_EQ(needed, 4u + 4u + 3u);
  EXPECT_TRUE(holds(fc_last_error(), "need 11 entries")) << fc_last_error();
  std::vector<int32_t> lens(needed);
  ASSERT_EQ(fc_attention2_parse(line, &a, lens.data(), lens.size(), &needed), FC_OK) << fc_last_error();
  EXPECT_EQ(a.layout, FC_THD);
  EXPECT_EQ(a.dtype, FC_E4M3);
  EXPECT_EQ(a.out_dtype, FC_F16);
  EXPECT_EQ(a.window_left, 4);
  EXPECT_EQ(a.alibi, FC_BIAS_ALIBI_SIGNED);
  EXPECT_EQ(a.descale, FC_DESCALE_PER_HEAD);
  EXPECT_EQ(std::vector<int32_t>(a.cu_seqlens_q, a.cu_seqlens_q + 4), (std::vector<int32_t>{0, 5, 5, 12}));
  EXPECT_EQ(std::vector<int32_t>(a.cu_seqlens_k, a.cu_seqlens_k + 4), (std::vector<int32_t>{0, 9, 12, 24}));
  EXPECT_EQ(std::vector<int32_t>(a.seqused_k, a.seqused_k + 3), (std::vector<int32_t>{9, 1, 12}));
  EXPECT_EQ(a.cache_seqlens, nullptr);
  char out[1024];
  ASSERT_LT(fc_attention2_to_string(&a, out, sizeof out), sizeof out);
  EXPECT_EQ(parse_problem(out), parse_problem(line));
  // Paged, and a paged dense batch.
  const char* paged = "b=2 hq=2 hkv=1 sq=4 skv=7,13 dqk=16 dv=16 causal=none dtype=bf16 layout=bshd page=3 pages=shared";
  ASSERT_EQ(fc_attention2_parse(paged, &a, lens.data(), lens.size(), nullptr), FC_OK) << fc_last_error();
  EXPECT_EQ(a.page_size, 3);
  EXPECT_EQ(a.page_order, FC_PAGES_SHARED);
  EXPECT_EQ(std::vector<int32_t>(a.cache_seqlens, a.cache_seqlens + 2), (std::vector<int32_t>{7, 13}));
  ASSERT_LT(fc_attention2_to_string(&a, out, sizeof out), sizeof out);
  EXPECT_EQ(parse_problem(out), parse_problem(paged));
  // API 2's struct cannot hold variants: its parser says so instead of dropping them.
  fc_attention old;
  EXPECT_EQ(fc_attention_parse(line, &old), FC_ERR_INVALID);
  EXPECT_TRUE(holds(fc_last_error(), "fc_attention2")) << fc_last_error();
  EXPECT_EQ(fc_attention_parse("b=1 h=2 s=8 d=16 dtype=f32", &old), FC_OK);
}

// Bad input of every kind the issue lists: FC_ERR_INVALID with the field named.
TEST(CApi2, BadInputIsNamed) {
  const Problem thd = parse_problem("b=2 hq=4 hkv=2 sq=5,7 skv=6,9 dqk=16 dv=16 causal=bottom_right dtype=f32 alibi=symmetric");
  Staged s(thd, testing::seed_for(609), 1);
  std::vector<double> o(static_cast<size_t>(s.st->elems(Tensor::o)));
  const fc_tensor_view ov = view(o.data(), FC_F64, s.st->shape(Tensor::o));
  ASSERT_EQ(fc_reference(&s.a, &s.t, &ov, nullptr), FC_OK) << fc_last_error();
  auto expect_invalid = [&](const fc_attention2& a, const fc_tensors& t, const std::string& named) {
    EXPECT_EQ(fc_reference(&a, &t, &ov, nullptr), FC_ERR_INVALID) << "accepted; expected an error naming " << named;
    EXPECT_TRUE(holds(fc_last_error(), named)) << fc_last_error();
  };
  fc_attention2 a = s.a;
  a.window_left = -2;
  expect_invalid(a, s.t, "window");
  a = s.a;
  a.softcap = -1;
  expect_invalid(a, s.t, "softcap");
  a.softcap = std::nan("");
  expect_invalid(a, s.t, "softcap");
  int32_t cu[3] = {1, 5, 12};
  a = s.a;
  a.cu_seqlens_q = cu;
  expect_invalid(a, s.t, "cu_seqlens_q[0] is 1");
  cu[0] = 0, cu[1] = 6, cu[2] = 5;
  expect_invalid(a, s.t, "cu_seqlens_q decreases");
  cu[1] = 5, cu[2] = 14;  // q holds 12 + 1 padding rows
  expect_invalid(a, s.t, "cu_seqlens_q ends at 14, past the 13 rows of q");
  int32_t cuk[3] = {0, 9, 3};
  a = s.a;
  a.cu_seqlens_k = cuk;
  expect_invalid(a, s.t, "cu_seqlens_k decreases");
  // Slopes of the wrong length.
  fc_tensors t = s.t;
  t.alibi_slopes.shape[0] = 3;
  expect_invalid(s.a, t, "alibi_slopes has shape [3]");
  t = s.t;
  t.alibi_slopes = fc_tensor_view{};
  expect_invalid(s.a, t, "alibi_slopes");
  // Overlapping and negative strides, a shape that does not fit, a wrong dtype.
  t = s.t;
  t.q.strides[0] = 8;  // tokens 8 elements apart, rows of 4 heads x 16
  expect_invalid(s.a, t, "tensor q: its strides overlap");
  t = s.t;
  t.k.strides[1] = -16;
  expect_invalid(s.a, t, "tensor k: negative strides");
  t = s.t;
  t.v.shape[2] = 8;
  expect_invalid(s.a, t, "v has shape");
  t = s.t;
  t.k.dtype = FC_F16;
  expect_invalid(s.a, t, "k is FC_F16");
  t = s.t;
  t.q.strides[2] = 2;
  expect_invalid(s.a, t, "last dimension");

  // Paged: block table entries negative or past the pages, page_size 0, cache lengths.
  const Problem pg = parse_problem("b=2 hq=2 hkv=1 sq=4 skv=7,13 dqk=16 dv=16 causal=none dtype=bf16 layout=bshd page=3 "
                                   "pages=shuffled");
  Staged sp(pg, testing::seed_for(610), 0);
  std::vector<double> po(static_cast<size_t>(sp.st->elems(Tensor::o)));
  const fc_tensor_view pov = view(po.data(), FC_F64, sp.st->shape(Tensor::o));
  ASSERT_EQ(fc_reference(&sp.a, &sp.t, &pov, nullptr), FC_OK) << fc_last_error();
  auto expect_invalid_paged = [&](const fc_attention2& a, const fc_tensors& t, const std::string& named) {
    EXPECT_EQ(fc_reference(&a, &t, &pov, nullptr), FC_ERR_INVALID) << "accepted; expected an error naming " << named;
    EXPECT_TRUE(holds(fc_last_error(), named)) << fc_last_error();
  };
  std::vector<int32_t> table = sp.in.block_table;
  t = sp.t;
  t.block_table.data = table.data();
  table[1] = -1;
  expect_invalid_paged(sp.a, t, "block_table[0][1] = -1");
  table = sp.in.block_table;
  table[static_cast<size_t>(sp.in.max_pages(2))] = static_cast<int32_t>(sp.in.num_pages);
  expect_invalid_paged(sp.a, t, "block_table[1][0] = " + std::to_string(sp.in.num_pages) + " is outside");
  a = sp.a;
  a.page_size = 0;
  expect_invalid_paged(a, sp.t, "page_size is 0");
  a.cache_seqlens = nullptr;
  expect_invalid_paged(a, sp.t, "block_table is given but page_size is 0");
  a = sp.a;
  a.page_size = -3;
  expect_invalid_paged(a, sp.t, "page_size");
  int32_t cache[2] = {7, -1};
  a = sp.a;
  a.cache_seqlens = cache;
  expect_invalid_paged(a, sp.t, "cache_seqlens[1] is negative");

  // fp8 descales of 0, NaN and Inf.
  const Problem f8 = parse_problem("b=1 hq=2 hkv=1 sq=5 skv=6 dqk=16 dv=16 dtype=e5m2 descale=tensor");
  Staged s8(f8, testing::seed_for(611), 0);
  std::vector<double> o8(static_cast<size_t>(s8.st->elems(Tensor::o)));
  const fc_tensor_view o8v = view(o8.data(), FC_F64, s8.st->shape(Tensor::o));
  ASSERT_EQ(fc_reference(&s8.a, &s8.t, &o8v, nullptr), FC_OK) << fc_last_error();
  for (float bad : {0.0f, std::nanf(""), INFINITY}) {
    float d = bad;
    t = s8.t;
    t.descale_k.data = &d;
    EXPECT_EQ(fc_reference(&s8.a, &t, &o8v, nullptr), FC_ERR_INVALID);
    EXPECT_TRUE(holds(fc_last_error(), "descale_k must be finite and positive")) << fc_last_error();
  }
  // And fc_check2 names its own arguments the same way.
  fc_report* r = nullptr;
  a = s.a;
  a.window_right = -5;
  fc_tensors with_o = s.t;
  std::vector<float> o32(static_cast<size_t>(s.st->elems(Tensor::o)));
  with_o.o = view(o32.data(), FC_F32, s.st->shape(Tensor::o));
  EXPECT_EQ(fc_check2(&a, &with_o, nullptr, &r), FC_ERR_INVALID);
  EXPECT_TRUE(holds(fc_last_error(), "window")) << fc_last_error();
  EXPECT_EQ(r, nullptr);
}

// Frozen copies of API 2's option structs, as a binary built against that header has them.
struct CheckOptionsApi2 {
  uint32_t struct_size;
  int32_t lse_base, empty_row_lse, allow_nonfinite_inputs;
  int64_t max_rows, tile_q, tile_kv;
  int32_t error_maps;
};
struct FuzzOptionsApi2 {
  uint32_t struct_size;
  const char* name;
  int64_t cases;
  uint64_t seed;
  int64_t max_seq;
  double max_work;
  int64_t max_rows;
  uint32_t dtypes, causals;
  const int64_t* head_dims;
  int64_t num_head_dims;
  int32_t dv_ne_dqk, gqa, lse_base, empty_row_lse;
  int64_t tile_q, tile_kv;
  int32_t shrink, fail_fast;
  int64_t max_failures;
  int32_t progress;
};

int32_t plain_replica(void*, const fc_attention* a, const void* q, const void* k, const void* v, void* o, float* lse) {
  char line[256];
  fc_attention_to_string(a, line, sizeof line);
  const Problem p = parse_problem(line);
  auto widen = [&](const void* src, int64_t n) {
    std::vector<float> x(static_cast<size_t>(n));
    decode(p.dtype, src, n, x.data());
    return x;
  };
  const Inputs in{widen(q, p.q_elems()), widen(k, p.k_elems()), widen(v, p.v_elems())};
  const OracleResult r = naive_attention(p, in);
  std::vector<float> o32(r.o.begin(), r.o.end());
  encode(p.dtype, o32.data(), p.o_elems(), o);
  for (size_t i = 0; i < r.lse.size(); ++i) lse[i] = static_cast<float>(r.lse[i]);
  return 0;
}

TEST(CApi2, ACallerOfApi2StillWorks) {
  // Its init functions write API 2's struct and nothing past it.
  struct {
    CheckOptionsApi2 opt;
    unsigned char guard[64];
  } c;
  std::memset(&c, 0xAB, sizeof c);
  fc_check_options_init(reinterpret_cast<fc_check_options*>(&c.opt));
  EXPECT_EQ(c.opt.struct_size, sizeof(CheckOptionsApi2));
  EXPECT_EQ(c.opt.max_rows, 4096);
  for (unsigned char x : c.guard) ASSERT_EQ(x, 0xAB) << "fc_check_options_init wrote past API 2's struct";
  struct {
    FuzzOptionsApi2 opt;
    unsigned char guard[128];
  } f;
  std::memset(&f, 0xAB, sizeof f);
  fc_fuzz_options_init(reinterpret_cast<fc_fuzz_options*>(&f.opt));
  EXPECT_EQ(f.opt.struct_size, sizeof(FuzzOptionsApi2));
  EXPECT_EQ(f.opt.cases, 200);
  for (unsigned char x : f.guard) ASSERT_EQ(x, 0xAB) << "fc_fuzz_options_init wrote past API 2's struct";

  // fc_check with API 2's options struct (garbage past it is never read).
  const Problem p = parse_problem("b=2 hq=4 hkv=2 sq=33 skv=20 dqk=32 dv=32 causal=bottom_right dtype=bf16");
  const Inputs in = make_inputs(p, testing::seed_for(612));
  std::vector<uint16_t> q(static_cast<size_t>(p.q_elems())), k(static_cast<size_t>(p.k_elems())), v(static_cast<size_t>(p.v_elems())),
      o(static_cast<size_t>(p.o_elems()));
  encode(p.dtype, in.q.data(), p.q_elems(), q.data());
  encode(p.dtype, in.k.data(), p.k_elems(), k.data());
  encode(p.dtype, in.v.data(), p.v_elems(), v.data());
  const OracleResult want = naive_attention(p, in);
  std::vector<float> o32(want.o.begin(), want.o.end());
  encode(p.dtype, o32.data(), p.o_elems(), o.data());
  std::vector<float> lse2(want.lse.begin(), want.lse.end());
  for (float& x : lse2) x = std::isfinite(x) ? static_cast<float>(x / std::log(2.0)) : x;
  c.opt.lse_base = FC_LSE_LOG_2;
  fc_attention a{2, 4, 2, 33, 20, 32, 32, FC_BF16, FC_MASK_BOTTOM_RIGHT, NAN};
  fc_report* r = nullptr;
  ASSERT_EQ(fc_check(&a, q.data(), k.data(), v.data(), o.data(), lse2.data(), reinterpret_cast<fc_check_options*>(&c.opt), &r),
            FC_OK)
      << fc_last_error();
  EXPECT_EQ(fc_report_pass(r), 1) << fc_report_text(r);
  fc_attention back;
  ASSERT_EQ(fc_report_problem(r, &back), FC_OK);
  EXPECT_EQ(back.seq_q, 33);
  fc_report_free(r);

  // fc_fuzz and fc_draw_case with API 2's fuzz options: the campaign `flashcheck run` draws.
  f.opt.cases = 6;
  f.opt.max_seq = 40;
  f.opt.seed = testing::seed_for(613);
  fc_campaign* camp = nullptr;
  ASSERT_EQ(fc_fuzz(&plain_replica, nullptr, reinterpret_cast<fc_fuzz_options*>(&f.opt), &camp), FC_OK) << fc_last_error();
  fc_campaign_summary sum;
  fc_campaign_get_summary(camp, &sum);
  EXPECT_EQ(sum.passed, 6) << fc_campaign_log(camp);
  fc_campaign_free(camp);
  fc_case drawn;
  ASSERT_EQ(fc_draw_case(reinterpret_cast<fc_fuzz_options*>(&f.opt), 3, &drawn), FC_OK) << fc_last_error();
  CampaignOptions copt;  // the replica's plain draw: API 2 options allow no variant
  copt.seed = f.opt.seed;
  copt.max_seq = 40;
  copt.variants.allowed = std::set<VariantName>{};
  const Case want_case = campaign_case(space_for(Registry::builtin().find("replica")->caps(), copt), f.opt.seed, 3);
  EXPECT_EQ(drawn.problem.seq_q, want_case.problem.seq_q);
  EXPECT_EQ(drawn.input_seed, want_case.seed);
  // A struct too small even for API 2 is refused, naming struct_size.
  f.opt.struct_size = 16;
  EXPECT_EQ(fc_fuzz(&plain_replica, nullptr, reinterpret_cast<fc_fuzz_options*>(&f.opt), &camp), FC_ERR_INVALID);
  EXPECT_TRUE(holds(fc_last_error(), "struct_size")) << fc_last_error();
}

// A problem model 2 kernel for fc_fuzz2: the fp64 oracle (fc_reference on its own arguments), written
// into its output views element by element through their strides, whatever the layout.
struct Kernel2 {
  std::vector<std::string> seen;
  bool broken = false;  // one element of o off by more than the output's scale
  // `rows`: for a packed (THD) batch, the tokens that are some row's (cu_seqlens_q[B]); the padding
  // after them is no row's output and is not written. -1: every element is.
  static void write(const std::vector<double>& src, const fc_tensor_view& dst, int64_t rows, bool lse) {
    int64_t n = 1;
    for (int i = 0; i < dst.ndim; ++i) n *= dst.shape[i];
    const DType d = static_cast<DType>(dst.dtype);
    for (int64_t flat = 0; flat < n; ++flat) {
      // o [Tq, Hq, Dv], lse [Hq, Tq]: the token of the element.
      const int64_t token = lse ? flat % dst.shape[dst.ndim - 1] : flat / (dst.shape[1] * dst.shape[2]);
      if (rows >= 0 && token >= rows) continue;
      int64_t rest = flat, off = 0;
      for (int i = dst.ndim - 1; i >= 0; --i) {
        off += (rest % dst.shape[i]) * dst.strides[i];
        rest /= dst.shape[i];
      }
      const float x = static_cast<float>(src[static_cast<size_t>(flat)]);
      encode(d, &x, 1, static_cast<char*>(dst.data) + off * dtype_bytes(d));
    }
  }
  static int32_t run(void* user, const fc_attention2* a, const fc_tensors* t) {
    auto* self = static_cast<Kernel2*>(user);
    char line[4096];
    fc_attention2_to_string(a, line, sizeof line);
    self->seen.push_back(line);
    auto f64_like = [](const fc_tensor_view& v, std::vector<double>& store) {
      int64_t n = 1;
      std::vector<int64_t> shape(v.shape, v.shape + v.ndim);
      for (int64_t x : shape) n *= x;
      store.assign(static_cast<size_t>(n), 0.0);
      return view(store.data(), FC_F64, shape);
    };
    std::vector<double> o, lse;
    const fc_tensor_view ov = f64_like(t->o, o);
    fc_tensor_view lv{};
    if (t->lse.data) lv = f64_like(t->lse, lse);
    if (fc_reference(a, t, &ov, t->lse.data ? &lv : nullptr) != FC_OK) {
      fc_set_callback_error(fc_last_error());
      return 1;
    }
    // NaN where a row sees a NaN input is that row's output (dist=nonfinite) and is written.
    const int64_t rows = a->layout == FC_THD ? a->cu_seqlens_q[a->batch] : -1;
    if (self->broken && !o.empty()) {
      // Off by 1 + twice the largest |O|: an absolute 1 hides under the tolerance of a large output
      // (seen with "dist=large scale=1 dqk=256", whose outputs reach the hundreds). The element is
      // a written, finite one from the middle on: NaN + 1 is NaN, and a non-finite input's rows
      // are NaN by design (one case in ten draws one), so breaking such an element broke nothing.
      double scale = 0;
      for (double x : o)
        if (std::isfinite(x)) scale = std::max(scale, std::abs(x));
      // With every written element NaN (a NaN key all rows see), a finite 0 is the fault instead.
      const size_t written = rows >= 0 ? static_cast<size_t>(rows * t->o.shape[1] * t->o.shape[2]) : o.size();
      size_t k = 0;
      while (k < written && !std::isfinite(o[(written / 2 + k) % written])) ++k;
      if (k < written)
        o[(written / 2 + k) % written] += 1.0 + 2.0 * scale;
      else if (written > 0)
        o[written / 2] = 0.0;
    }
    write(o, t->o, rows, false);
    if (t->lse.data) write(lse, t->lse, rows, true);
    return 0;
  }
};

TEST(CApi2, Fuzz2RunsTheCampaignOfFlashcheckRun) {
  fc_fuzz_options opt;
  fc_fuzz_options_init2(&opt);
  opt.cases = 8;
  opt.seed = testing::seed_for(615);
  opt.max_seq = 48;
  Kernel2 kern;
  fc_campaign* c = nullptr;
  ASSERT_EQ(fc_fuzz2(&Kernel2::run, &kern, &opt, &c), FC_OK) << fc_last_error();
  fc_campaign_summary sum;
  fc_campaign_get_summary(c, &sum);
  EXPECT_EQ(sum.passed, 8) << fc_campaign_log(c);
  fc_campaign_free(c);
  CampaignOptions copt;  // the replica's plain draw: these options allow no variant
  copt.seed = opt.seed;
  copt.max_seq = 48;
  copt.variants.allowed = std::set<VariantName>{};
  const ProblemSpace space = space_for(Registry::builtin().find("replica")->caps(), copt);
  ASSERT_EQ(kern.seen.size(), 8u);
  for (int64_t i = 0; i < 8; ++i) {
    Problem want = campaign_case(space, opt.seed, i).problem;
    want.scale = want.softmax_scale();  // a callback gets the scale resolved
    EXPECT_EQ(kern.seen[static_cast<size_t>(i)], to_string(want)) << "case " << i;
    fc_case2 drawn;
    drawn.problem.struct_size = sizeof(fc_attention2);
    int32_t lens[64];
    ASSERT_EQ(fc_draw_case2(&opt, i, &drawn, lens, 64, nullptr), FC_OK) << fc_last_error();
    char line[4096];
    fc_attention2_to_string(&drawn.problem, line, sizeof line);
    EXPECT_EQ(std::string(line), to_string(campaign_case(space, opt.seed, i).problem));
  }

  // A broken kernel fails, shrinks, and its kept case comes back as problem model 2's struct.
  kern.broken = true;
  opt.cases = 6;
  opt.max_failures = 1;
  ASSERT_EQ(fc_fuzz2(&Kernel2::run, &kern, &opt, &c), FC_OK) << fc_last_error();
  fc_campaign_get_summary(c, &sum);
  EXPECT_EQ(sum.failed, 6) << fc_campaign_log(c);
  fc_case2 failed;
  failed.problem.struct_size = sizeof(fc_attention2);
  fc_report* r = nullptr;
  ASSERT_EQ(fc_campaign_failure2(c, 0, &failed, &r), FC_OK) << fc_last_error();
  EXPECT_EQ(fc_report_pass(r), 0);
  EXPECT_EQ(failed.problem.batch, 1) << "shrunk";
  fc_campaign_free(c);

  // fc_fuzz's callback cannot be handed a variant: it refuses options that allow one.
  opt.windows = 1;
  EXPECT_EQ(fc_fuzz(&plain_replica, nullptr, &opt, &c), FC_ERR_INVALID);
  EXPECT_TRUE(holds(fc_last_error(), "fc_fuzz2")) << fc_last_error();
}

// Variants allowed are either drawn and handed to the callback, or refused by name up front: never
// a campaign that silently leaves them out.
TEST(CApi2, Fuzz2NeverLeavesOutAVariantSilently) {
  fc_fuzz_options opt;
  fc_fuzz_options_init2(&opt);
  // 40 cases: each drawn dtype is one of four, so e4m3 is missed by all of them with odds (3/4)^40.
  opt.cases = 40;
  opt.seed = testing::seed_for(616);
  opt.max_seq = 40;
  opt.windows = 1;
  opt.softcap = 1;
  opt.layouts = (1u << FC_BHSD) | (1u << FC_THD);
  // fp8 is drawn as a dtype by this build's generators; a runner that cannot stage it must not
  // count its cases as declined and pass the rest.
  opt.dtypes |= 1u << FC_E4M3;
  Kernel2 kern;
  fc_campaign* c = nullptr;
  const fc_status st = fc_fuzz2(&Kernel2::run, &kern, &opt, &c);
  if (st == FC_ERR_CANNOT_TEST) {
    // This build's campaign does not draw them or cannot hand them over (yet): each one is named.
    for (const char* v : {"windows", "softcap", "layout thd", "dtype e4m3"})
      EXPECT_TRUE(holds(fc_last_error(), v)) << fc_last_error();
    EXPECT_TRUE(kern.seen.empty());
    return;
  }
  ASSERT_EQ(st, FC_OK) << fc_last_error();
  fc_campaign_summary sum;
  fc_campaign_get_summary(c, &sum);
  EXPECT_EQ(sum.failed, 0) << fc_campaign_log(c);
  EXPECT_EQ(sum.skipped, 0) << fc_campaign_log(c);
  bool window = false, thd = false, fp8 = false;
  for (const std::string& line : kern.seen) {
    window |= line.find("window=") != std::string::npos;
    thd |= line.find("layout=thd") != std::string::npos;
    fp8 |= line.find("dtype=e4m3") != std::string::npos;
  }
  EXPECT_TRUE(window && thd && fp8) << "the campaign drew the variants but no callback was handed one";
  fc_campaign_free(c);
}

}  // namespace
}  // namespace flashcheck
