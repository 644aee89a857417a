// Problem model 2 against its definition: every variant of the fp64 oracle compared with a
// textbook statement written from the specification (reference/problem.h) with none of the
// oracle's code — its own mask predicate, its own index arithmetic, long double throughout.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "reference/naive.h"
#include "reference/random_variant_test_util.h"
#include "reference/mask.h"
#include "reference/sequences.h"
#include "reference/storage.h"
#include "testing/test_seed.h"

namespace flashcheck {
namespace {

// The mask, as the issue states it: i + d − left ≤ j ≤ i + d + right, −1 unbounded; d = Skv − Sq
// unless top-left; a causal mode caps right at 0.
bool textbook_visible(const Problem& p, int64_t sq, int64_t skv, int64_t i, int64_t j) {
  if (j < 0 || j >= skv) return false;
  const int64_t d = p.causal == Causal::top_left ? 0 : skv - sq;
  bool ok = true;
  if (p.causal != Causal::none) ok = ok && j <= i + d;
  if (p.window.left >= 0) ok = ok && j >= i + d - p.window.left;
  if (p.window.right >= 0) ok = ok && j <= i + d + p.window.right;
  return ok;
}

struct Row {
  std::vector<long double> o;
  long double lse = -INFINITY;
  // How far an fp64 computation of this row may honestly stray (the oracle's order of summation is
  // not the textbook's): a score sums head_dim products, so it may move by (head_dim + 2)·2^-52 of
  // Σ|q·k|·scale + |bias| (score_error); a weight exp(s − m) then moves by twice that, relative, and
  // O by that times the largest |v|. With Dist::large that reaches 1e-11 of O (CI saw 1.4e-11 at f16,
  // d = 24); a wrong mask, bias or softcap moves O by a whole weight.
  long double score_error = 0;
  long double v_max = 0;
};

// One query row of sequence b, head h: every key of the sequence tested against the mask.
Row textbook_row(const Problem& p, const Inputs& in, int64_t b, int64_t h, int64_t i) {
  // Logical offsets from first principles: sequences one after another, [H, S_b, D] each.
  int64_t q_before = 0, kv_before = 0;
  for (int64_t x = 0; x < b; ++x) q_before += p.sq(x), kv_before += p.skv(x);
  const int64_t sq = p.sq(b), skv = p.skv(b), hk = h / (p.heads_q / p.heads_kv);
  const float* q = &in.q[static_cast<size_t>(((q_before * p.heads_q) + h * sq + i) * p.head_dim_qk)];
  auto desc = [&](const std::vector<float>& d) -> long double {
    if (d.empty()) return 1.0L;
    return d.size() == 1 ? d[0] : d[static_cast<size_t>(b * p.heads_kv + hk)];
  };
  const long double dq = desc(in.descale_q), dk = desc(in.descale_k), dvs = desc(in.descale_v);
  std::vector<long double> s;
  std::vector<int64_t> keys;
  long double score_size = 0;
  for (int64_t j = 0; j < skv; ++j) {
    if (!textbook_visible(p, sq, skv, i, j)) continue;
    const float* k = &in.k[static_cast<size_t>((kv_before * p.heads_kv + hk * skv + j) * p.head_dim_qk)];
    long double dot = 0, dot_abs = 0;
    for (int64_t c = 0; c < p.head_dim_qk; ++c) {
      const long double term = (q[c] * dq) * (k[c] * dk);
      dot += term;
      dot_abs += std::fabs(term);
    }
    long double x = dot * static_cast<long double>(p.softmax_scale());
    long double size = dot_abs * static_cast<long double>(p.softmax_scale());
    if (p.softcap > 0) x = p.softcap * std::tanh(x / p.softcap);
    if (p.alibi != Alibi::none) {
      const long double slope = in.alibi_slopes[static_cast<size_t>(p.alibi_per_batch ? b * p.heads_q + h : h)];
      const int64_t d = p.causal == Causal::top_left ? 0 : skv - sq;
      const long double bias = p.alibi == Alibi::symmetric ? -slope * std::fabs(static_cast<long double>(i + d - j)) : slope * (j - i);
      x += bias;
      size += std::fabs(bias);
    }
    score_size = std::max(score_size, size);
    s.push_back(x);
    keys.push_back(j);
  }
  Row r;
  r.o.assign(static_cast<size_t>(p.head_dim_v), 0.0L);
  r.score_error = static_cast<long double>(p.head_dim_qk + 2) * std::numeric_limits<double>::epsilon() * score_size;
  if (s.empty()) return r;  // no key: O = 0, LSE = −inf, sink or not
  long double m = *std::max_element(s.begin(), s.end());
  const long double sink = p.sinks ? in.sinks[static_cast<size_t>(h)] : -INFINITY;
  m = std::max(m, sink);
  long double l = p.sinks ? std::exp(sink - m) : 0.0L;
  for (auto x : s) l += std::exp(x - m);
  r.lse = m + std::log(l);
  for (size_t t = 0; t < s.size(); ++t) {
    const float* v = &in.v[static_cast<size_t>((kv_before * p.heads_kv + hk * skv + keys[t]) * p.head_dim_v)];
    for (int64_t c = 0; c < p.head_dim_v; ++c) {
      r.o[static_cast<size_t>(c)] += std::exp(s[t] - m) / l * (v[c] * dvs);
      r.v_max = std::max(r.v_max, std::fabs(v[c] * dvs));
    }
  }
  return r;
}

void expect_matches_textbook(const Problem& p, const Inputs& in) {
  const OracleResult r = naive_attention(p, in);
  ASSERT_TRUE(r.rows.is_all());
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_q; ++h)
      for (int64_t i = 0; i < p.sq(b); ++i) {
        const Row t = textbook_row(p, in, b, h, i);
        const size_t at = static_cast<size_t>(r.rows.index(b, h, i, p.heads_q));
        const double lse = static_cast<double>(t.lse);
        if (std::isinf(lse)) {
          ASSERT_EQ(r.lse[at], lse) << p << " b=" << b << " h=" << h << " i=" << i;
        } else {
          ASSERT_NEAR(r.lse[at], lse, 1e-11 * (1 + std::fabs(lse)) + 2 * static_cast<double>(t.score_error)) << p << " b=" << b << " h=" << h << " i=" << i;
        }
        for (int64_t c = 0; c < p.head_dim_v; ++c)
          ASSERT_NEAR(r.o[at * static_cast<size_t>(p.head_dim_v) + static_cast<size_t>(c)], static_cast<double>(t.o[static_cast<size_t>(c)]),
                      1e-11 * (1 + std::fabs(static_cast<double>(t.o[static_cast<size_t>(c)]))) +
                          2 * static_cast<double>(t.score_error * t.v_max))
              << p << " b=" << b << " h=" << h << " i=" << i << " c=" << c;
      }
}

TEST(Variants, OracleMatchesTheTextbookOnEveryVariant) {
  std::mt19937_64 g(testing::seed_for(201));
  for (int n = 0; n < 300; ++n) {
    const Problem p = random_variant_problem(g);
    const Dist dist = kAllDists[static_cast<size_t>(n) % std::size(kAllDists)];
    SCOPED_TRACE(to_string(p) + " dist=" + std::string(to_string(dist)));
    const Inputs in = make_inputs(p, g(), dist);
    expect_matches_textbook(p, in);
    if (HasFatalFailure()) return;
  }
}

// A row whose window lies wholly past its sequence's used keys sees nothing; its empty range must
// not send the row's block past those keys into the next sequence's (found by the GPU oracle's
// tests: an Inf there turned rows of another sequence NaN). The key planted there is large but
// finite: the next sequence's own rows see it, and must agree with the textbook too.
TEST(Variants, AWindowPastTheUsedKeysReadsNothingBeyondThem) {
  const Problem p = parse_problem("b=2 h=1 sq=40 skv=40 d=16 causal=top_left window=4,0 layout=bshd used=10,40");
  Inputs in = make_inputs(p, testing::seed_for(206));
  const Sequences seqs(p);
  for (int64_t c = 0; c < p.head_dim_qk; ++c) in.k[static_cast<size_t>(seqs.k_row(1, 0, 2) + c)] = 32.0f;
  const KeyRange r = visible_range(p, 0, 30);
  EXPECT_TRUE(r.empty());
  EXPECT_LE(r.lo, p.skv(0));
  expect_matches_textbook(p, in);
}

TEST(Variants, ProblemLinesRoundTrip) {
  std::mt19937_64 g(testing::seed_for(202));
  for (int n = 0; n < 500; ++n) {
    const Problem p = random_variant_problem(g);
    EXPECT_EQ(parse_problem(to_string(p)), p) << to_string(p);
  }
  // A list of lengths alone makes a varlen problem.
  const Problem v = parse_problem("b=3 h=2 sq=3,0,17 skv=5,9,20 d=16");
  EXPECT_EQ(v.layout, Layout::thd);
  EXPECT_EQ(v.seq_q, 17);
  EXPECT_EQ(v.total_q(), 20);
  EXPECT_EQ(v.skv(2), 20);
  // A plain problem prints as problem model 1 did.
  EXPECT_EQ(to_string(parse_problem("b=1 hq=8 hkv=2 sq=97 skv=113 d=128 causal=bottom_right dtype=bf16")),
            "b=1 hq=8 hkv=2 sq=97 skv=113 dqk=128 dv=128 causal=bottom_right dtype=bf16");
}

void expect_refused(const std::string& line, const std::string& field) {
  try {
    const Problem p = parse_problem(line);
    FAIL() << "accepted '" << line << "' as " << p;
  } catch (const InvalidProblem& e) {
    EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << line << ": " << e.what();
  }
}

TEST(Variants, BadFieldsAreNamed) {
  expect_refused("b=1 s=8 d=16 window=-2,0", "window");
  expect_refused("b=1 s=8 d=16 window=3", "window");
  expect_refused("b=1 s=8 d=16 softcap=-1", "softcap");
  expect_refused("b=1 s=8 d=16 softcap=nan", "softcap");
  expect_refused("b=2 sq=3,4,5 skv=3,4 d=16", "seqlens_q");
  expect_refused("b=2 sq=3,-4 skv=3,4 d=16", "seqlens_q[1]");
  expect_refused("b=2 sq=3,4 skv=3,4 used=3,5 d=16", "seqused_kv[1]");
  expect_refused("b=2 sq=4 skv=3,4 d=16", "seqlens_kv");
  expect_refused("b=1 s=8 d=16 page=0", "page");
  expect_refused("b=1 s=8 d=16 page=-4", "page");
  expect_refused("b=1 s=8 d=16 dtype=bf16 odtype=f16", "out_dtype");
  expect_refused("b=1 s=8 d=16 dtype=e4m3 odtype=f32", "out_dtype");
  expect_refused("b=1 s=8 d=16 dtype=f16 descale=head", "descale");
  expect_refused("b=1 s=8 d=16 slopes=batch", "alibi_per_batch");
  expect_refused("b=1 s=8 d=16 layout=wide", "layout");
}

TEST(Variants, SideInputsAreCheckedByName) {
  Problem p = parse_problem("b=2 h=2 sq=4 skv=9,7 d=16 page=4 alibi=symmetric sinks=1 dtype=e4m3 descale=head");
  const Inputs good = make_inputs(p, testing::seed_for(203));
  EXPECT_NO_THROW(validate_side_inputs(p, good));
  auto refused = [&](auto mutate, const std::string& field) {
    Inputs in = good;
    mutate(in);
    try {
      validate_side_inputs(p, in);
      ADD_FAILURE() << "accepted a bad " << field;
    } catch (const InvalidProblem& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  refused([](Inputs& in) { in.alibi_slopes.pop_back(); }, "alibi_slopes");
  refused([](Inputs& in) { in.alibi_slopes[0] = NAN; }, "alibi_slopes");
  refused([](Inputs& in) { in.sinks[1] = NAN; }, "sinks");
  refused([](Inputs& in) { in.descale_k[0] = 0; }, "descale_k");
  refused([](Inputs& in) { in.descale_v[0] = INFINITY; }, "descale_v");
  refused([](Inputs& in) { in.block_table[0] = -1; }, "block_table[0][0]");
  refused([](Inputs& in) { in.block_table[1] = static_cast<int32_t>(in.num_pages); }, "block_table[0][1]");
  refused([](Inputs& in) { in.num_pages = 0; }, "page");
}

TEST(Fp8, EveryBitPatternRoundTripsAndNearestEvenHolds) {
  for (int b = 0; b < 256; ++b) {
    const uint8_t bits = static_cast<uint8_t>(b);
    const float x4 = e4m3_bits_to_f32(bits), x5 = e5m2_bits_to_f32(bits);
    if (!std::isnan(x4)) {
      EXPECT_EQ(f32_to_e4m3_bits(x4), bits) << b;
    }
    if (!std::isnan(x5)) {
      EXPECT_EQ(f32_to_e5m2_bits(x5), bits) << b;
    }
    EXPECT_EQ(std::isnan(x4), (b & 0x7F) == 0x7F) << b;
    EXPECT_EQ(std::isnan(x5), (b & 0x7F) > 0x7C) << b;
  }
  EXPECT_EQ(e4m3_bits_to_f32(0x7E), 448.0f);  // S.1111.110: e4m3's largest
  EXPECT_TRUE(std::isnan(e4m3_bits_to_f32(0x7F)));
  EXPECT_EQ(e5m2_bits_to_f32(0x7B), 57344.0f);
  EXPECT_EQ(e5m2_bits_to_f32(0x7C), INFINITY);
  EXPECT_EQ(e4m3_bits_to_f32(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  // Ties to even: 1 + 1/16 lies between 1 and 1.125 (e4m3 step 1/8 at 1): even is 1.
  EXPECT_EQ(round_to(DType::e4m3, 1.0625f), 1.0f);
  EXPECT_EQ(round_to(DType::e4m3, 1.1875f), 1.25f);  // between 1.125 and 1.25: even is 1.25
  EXPECT_EQ(round_to(DType::e4m3, 464.0f), 448.0f);  // the tie past the largest rounds to it (even)
  EXPECT_TRUE(std::isnan(round_to(DType::e4m3, 465.0f)));  // no infinity in e4m3
  EXPECT_EQ(round_to(DType::e5m2, 61440.0f), INFINITY);
  EXPECT_EQ(round_to(DType::e5m2, 61439.0f), 57344.0f);
  EXPECT_EQ(round_toward_zero(DType::e4m3, 1.2f), 1.125f);
}

TEST(Storage, EveryLayoutScattersAndGathersBackExactly) {
  std::mt19937_64 g(testing::seed_for(204));
  for (int n = 0; n < 200; ++n) {
    const Problem p = random_variant_problem(g);
    SCOPED_TRACE(to_string(p));
    const Inputs in = make_inputs(p, g());
    const Storage st(p, in, /*pad_tokens=*/3);
    for (auto [t, logical] : {std::pair{Tensor::q, &in.q}, {Tensor::k, &in.k}, {Tensor::v, &in.v}}) {
      std::vector<float> store(static_cast<size_t>(st.elems(t)), NAN), back(logical->size(), -1.0f);
      st.scatter(t, logical->data(), store.data());
      st.gather(t, store.data(), back.data());
      ASSERT_EQ(std::memcmp(back.data(), logical->data(), back.size() * 4), 0) << to_string(t);
      // The shape covers exactly the span of a contiguous layout.
      int64_t elems = 1;
      for (int64_t d : st.shape(t)) elems *= d;
      ASSERT_EQ(elems, st.elems(t)) << to_string(t);
    }
  }
}

TEST(Storage, BshdAndPagedRowsSitWhereTheirDefinitionsPutThem) {
  Problem p = parse_problem("b=2 hq=4 hkv=2 sq=5 skv=7 d=8 layout=bshd");
  Inputs in = make_inputs(p, 1);
  Storage st(p, in);
  EXPECT_EQ(st.row(Tensor::q, 1, 3, 2), ((1 * 5 + 2) * 4 + 3) * 8);
  EXPECT_EQ(st.row(Tensor::k, 1, 1, 6), ((1 * 7 + 6) * 2 + 1) * 8);
  EXPECT_EQ(st.row(Tensor::lse, 1, 3, 2), (1 * 4 + 3) * 5 + 2);
  p = parse_problem("b=2 hq=2 hkv=1 sq=3 skv=9,4 d=8 page=4 pages=shuffled");
  in = make_inputs(p, 7);
  const Storage paged(p, in);
  const int64_t mp = in.max_pages(p.batch);
  // Key 5 of sequence 0 lies in its second page, slot 1.
  EXPECT_EQ(paged.row(Tensor::k, 0, 0, 5), (in.block_table[1] * 4 + 1) * 1 * 8);
  EXPECT_EQ(paged.row(Tensor::v, 1, 0, 3), (in.block_table[static_cast<size_t>(mp)] * 4 + 3) * 8);
}

TEST(Storage, StridesThatOverlapAreRefusedByTensorName) {
  const Problem p = parse_problem("b=2 h=2 s=4 d=8");
  const Inputs in = make_inputs(p, 1);
  const Storage dense(p, in);
  RowStrides s[5];
  for (int t = 0; t < 5; ++t) s[t] = dense.strides(static_cast<Tensor>(t));
  s[1].head = 4;  // k's heads 4 elements apart, rows 8 wide: they overlap
  try {
    Storage bad(p, in, 0, s);
    FAIL() << "accepted overlapping strides";
  } catch (const InvalidProblem& e) {
    EXPECT_NE(std::string(e.what()).find("tensor k"), std::string::npos) << e.what();
  }
  // A padded view (row stride larger than needed) is fine, and spans more.
  for (int t = 0; t < 5; ++t) s[t] = dense.strides(static_cast<Tensor>(t));
  s[0] = {2 * 4 * 16, 16, 4 * 16};
  const Storage padded(p, in, 0, s);
  EXPECT_GT(padded.elems(Tensor::q), dense.elems(Tensor::q));
}

TEST(Paging, SharedPagesGiveBothSequencesTheSameKeys) {
  const Problem p = parse_problem("b=3 h=1 sq=2 skv=10,9,3 d=8 page=4 pages=shared");
  const Inputs in = make_inputs(p, testing::seed_for(205));
  const int64_t mp = in.max_pages(p.batch);
  // Sequence 1 shares sequence 0's two full pages, sequence 2 none (it has no full page).
  EXPECT_EQ(in.block_table[static_cast<size_t>(mp)], in.block_table[0]);
  EXPECT_EQ(in.block_table[static_cast<size_t>(mp + 1)], in.block_table[1]);
  EXPECT_NE(in.block_table[static_cast<size_t>(mp + 2)], in.block_table[2]);
  for (int64_t j = 0; j < 8; ++j)
    for (int64_t c = 0; c < 8; ++c)
      EXPECT_EQ(in.k[static_cast<size_t>(j * 8 + c)], in.k[static_cast<size_t>((10 + j) * 8 + c)]);
  // Unused pages exist for the harness to poison.
  std::vector<char> used(static_cast<size_t>(in.num_pages), 0);
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t j = 0; j < (p.skv(b) + 3) / 4; ++j) used[static_cast<size_t>(in.block_table[static_cast<size_t>(b * mp + j)])] = 1;
  EXPECT_LT(std::count(used.begin(), used.end(), 1), in.num_pages);
}

}  // namespace
}  // namespace flashcheck
