// Properties of the backward oracle that its definition implies: GQA is a sum of MHA problems, an
// unbounded window is no window, a paged cache read through an identity table is a contiguous
// one, a varlen batch is its sequences apart, rows that see nothing contribute nothing, and the
// result is bitwise the same for any number of threads.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <random>

#include "reference/backward_test_util.h"
#include "reference/gradient_storage.h"
#include "reference/naive_backward.h"
#include "reference/sequences.h"
#include "reference/storage.h"
#include "testing/test_seed.h"

namespace flashcheck {
namespace {

// |a − b| ≤ tol · (|a| + |b|) elementwise, plus a floor of tol times the largest |b| (for sums
// that cancel to near 0).
template <typename A, typename B>
void expect_near_all(const char* name, const A& a, const B& b, double tol) {
  ASSERT_EQ(a.size(), b.size()) << name;
  double big = 0;
  for (size_t x = 0; x < b.size(); ++x) big = std::max(big, std::fabs(static_cast<double>(b[x])));
  for (size_t x = 0; x < b.size(); ++x) {
    const double u = a[x], v = b[x];
    ASSERT_LE(std::fabs(u - v), tol * (std::fabs(u) + std::fabs(v) + big)) << name << "[" << x << "]: " << u << " vs " << v;
  }
}

template <typename A, typename B>
bool bitwise_equal(const A& a, const B& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0);
}

// The rows of tensor `t` for (sequence b, head h) in the logical layout: [offset, offset + n·w).
std::pair<size_t, size_t> rows_of(const Problem& p, char t, int64_t b, int64_t h) {
  const Sequences s(p);
  switch (t) {
    case 'q': return {static_cast<size_t>(s.q_row(b, h, 0)), static_cast<size_t>(s.sq(b) * p.head_dim_qk)};
    case 'o': return {static_cast<size_t>(s.o_row(b, h, 0)), static_cast<size_t>(s.sq(b) * p.head_dim_v)};
    case 'k': return {static_cast<size_t>(s.k_row(b, h, 0)), static_cast<size_t>(s.skv(b) * p.head_dim_qk)};
    default: return {static_cast<size_t>(s.v_row(b, h, 0)), static_cast<size_t>(s.skv(b) * p.head_dim_v)};
  }
}

template <typename V>
void append(std::vector<float>& out, const V& from, std::pair<size_t, size_t> r) {
  out.insert(out.end(), from.begin() + static_cast<std::ptrdiff_t>(r.first), from.begin() + static_cast<std::ptrdiff_t>(r.first + r.second));
}

// Query head h of a GQA problem as an MHA problem of its own (one query head, its KV head).
void one_head(const Problem& p, const Inputs& in, const std::vector<float>& dout, int64_t h, Problem& p1, Inputs& in1,
              std::vector<float>& dout1) {
  p1 = p;
  p1.heads_q = p1.heads_kv = 1;
  const int64_t hk = p.kv_head(h);
  in1 = Inputs{};
  dout1.clear();
  for (int64_t b = 0; b < p.batch; ++b) {
    append(in1.q, in.q, rows_of(p, 'q', b, h));
    append(dout1, dout, rows_of(p, 'o', b, h));
    append(in1.k, in.k, rows_of(p, 'k', b, hk));
    append(in1.v, in.v, rows_of(p, 'v', b, hk));
    if (p.alibi_per_batch) in1.alibi_slopes.push_back(in.alibi_slopes[static_cast<size_t>(b * p.heads_q + h)]);
    if (p.descale == Descale::head)
      for (auto [from, to] : {std::pair{&in.descale_q, &in1.descale_q}, {&in.descale_k, &in1.descale_k}, {&in.descale_v, &in1.descale_v}})
        to->push_back((*from)[static_cast<size_t>(b * p.heads_kv + hk)]);
  }
  if (p.alibi != Alibi::none && !p.alibi_per_batch) in1.alibi_slopes = {in.alibi_slopes[static_cast<size_t>(h)]};
  if (p.descale == Descale::tensor) in1.descale_q = in.descale_q, in1.descale_k = in.descale_k, in1.descale_v = in.descale_v;
  if (p.sinks) in1.sinks = {in.sinks[static_cast<size_t>(h)]};
  in1.block_table = in.block_table;
  in1.num_pages = in.num_pages;
}

TEST(BackwardProperties, GqaIsTheSumOfItsQueryHeads) {
  std::mt19937_64 g(testing::seed_for(321));
  for (int n = 0, done = 0; done < 40 && n < 1000; ++n) {
    const Problem p = random_variant_problem(g);
    const uint64_t seed = g();
    if (p.group() == 1) continue;
    ++done;
    SCOPED_TRACE(describe(p, seed));
    const Inputs in = make_inputs(p, seed);
    const std::vector<float> dout = random_dout(p, seed);
    const BackwardResult r = naive_attention_backward(p, in, dout);
    std::vector<double> dk(r.dk.size(), 0.0), dv(r.dv.size(), 0.0), dq(r.dq.size(), 0.0), ds(r.dsinks.size(), 0.0);
    for (int64_t h = 0; h < p.heads_q; ++h) {
      Problem p1;
      Inputs in1;
      std::vector<float> dout1;
      one_head(p, in, dout, h, p1, in1, dout1);
      const BackwardResult r1 = naive_attention_backward(p1, in1, dout1);
      const Problem& q1 = p1;
      for (int64_t b = 0; b < p.batch; ++b) {
        auto add = [&](std::vector<double>& to, const UninitVector<double>& from, char t, int64_t head) {
          const auto dst = rows_of(p, t, b, head), src = rows_of(q1, t, b, 0);
          for (size_t x = 0; x < dst.second; ++x) to[dst.first + x] += from[src.first + x];
        };
        add(dq, r1.dq, 'q', h);
        add(dk, r1.dk, 'k', p.kv_head(h));
        add(dv, r1.dv, 'v', p.kv_head(h));
      }
      if (p.sinks) ds[static_cast<size_t>(h)] = r1.dsinks[0];
    }
    expect_near_all("dq", r.dq, dq, 1e-15);
    expect_near_all("dk", r.dk, dk, 1e-14);
    expect_near_all("dv", r.dv, dv, 1e-14);
    expect_near_all("dsinks", r.dsinks, ds, 1e-15);
    if (HasFatalFailure()) return;
  }
}

TEST(BackwardProperties, AnUnboundedWindowIsNoWindow) {
  std::mt19937_64 g(testing::seed_for(322));
  for (int n = 0; n < 40; ++n) {
    Problem p = random_variant_problem(g);
    p.window = {};
    const uint64_t seed = g();
    SCOPED_TRACE(describe(p, seed));
    const Inputs in = make_inputs(p, seed);
    const std::vector<float> dout = random_dout(p, seed);
    const BackwardResult plain = naive_attention_backward(p, in, dout);
    const int64_t wide = p.seq_q + p.seq_kv + 1;
    for (Window w : {Window{-1, -1}, Window{wide, wide}, Window{wide, -1}, Window{-1, wide}}) {
      p.window = w;
      const BackwardResult r = naive_attention_backward(p, in, dout);
      expect_near_all("dq", r.dq, plain.dq, 1e-15);
      expect_near_all("dk", r.dk, plain.dk, 1e-15);
      expect_near_all("dv", r.dv, plain.dv, 1e-15);
      expect_near_all("dsinks", r.dsinks, plain.dsinks, 1e-15);
    }
    if (HasFatalFailure()) return;
  }
}

// An identity block table lays sequence b's keys in pages one after another: the oracle sees the
// same logical keys as a contiguous varlen problem, so every gradient is bitwise the same, and
// laid into the cache each key's gradient sits in its slot (unused slots 0).
TEST(BackwardProperties, PagedWithAnIdentityTableIsContiguous) {
  uint64_t seed = testing::seed_for(323);
  for (const char* line : {"b=3 hq=4 hkv=2 sq=5,0,17 skv=30,7,21 d=16 page=4 causal=bottom_right sinks=1",
                           "b=2 h=2 sq=9 skv=13,1 dqk=8 dv=24 page=5 window=3,2 softcap=4 alibi=signed layout=bshd"}) {
    const Problem paged = parse_problem(line);
    ASSERT_EQ(paged.page_order, PageOrder::identity);
    SCOPED_TRACE(describe(paged, seed));
    const Inputs in = make_inputs(paged, seed);
    const std::vector<float> dout = random_dout(paged, seed);
    Problem flat = paged;
    flat.page_size = 0;
    flat.layout = Layout::thd;
    if (flat.seqlens_q.empty()) flat.seqlens_q.assign(static_cast<size_t>(flat.batch), flat.seq_q);
    Inputs in_flat = in;
    in_flat.block_table.clear();
    in_flat.num_pages = 0;
    const BackwardResult a = naive_attention_backward(paged, in, dout), b = naive_attention_backward(flat, in_flat, dout);
    EXPECT_TRUE(bitwise_equal(a.dq, b.dq));
    EXPECT_TRUE(bitwise_equal(a.dk, b.dk));
    EXPECT_TRUE(bitwise_equal(a.dv, b.dv));
    EXPECT_TRUE(bitwise_equal(a.dsinks, b.dsinks));
    const Storage cache(paged, in), thd(flat, in_flat);
    const std::vector<double> dk_cache = gradient_in_storage(cache, Tensor::k, a.dk);
    const std::vector<double> dk_thd = gradient_in_storage(thd, Tensor::k, b.dk);
    std::vector<char> covered;
    cache.mark_covered(Tensor::k, covered);
    for (size_t x = 0; x < dk_cache.size(); ++x) {
      if (!covered[x]) {
        ASSERT_EQ(dk_cache[x], 0.0) << "unused slot element " << x;
      }
    }
    const Sequences s(paged);
    for (int64_t bb = 0; bb < paged.batch; ++bb)
      for (int64_t j = 0; j < s.skv(bb); ++j)
        for (int64_t c = 0; c < paged.head_dim_qk; ++c)
          ASSERT_EQ(dk_cache[static_cast<size_t>(cache.row(Tensor::k, bb, 1, j) + c)], dk_thd[static_cast<size_t>(thd.row(Tensor::k, bb, 1, j) + c)]);
    ++seed;
  }
}

// Sequence b of a varlen batch as a dense problem of its own (its queries and used keys; side
// inputs per batch take row b).
void one_sequence(const Problem& p, const Inputs& in, const std::vector<float>& dout, int64_t b, Problem& pb, Inputs& ib,
                  std::vector<float>& dout_b) {
  pb = Problem{1, p.heads_q, p.heads_kv, p.sq(b), p.skv(b), p.head_dim_qk, p.head_dim_v, p.causal, p.scale, p.dtype};
  pb.window = p.window, pb.softcap = p.softcap, pb.alibi = p.alibi, pb.sinks = p.sinks;
  pb.out_dtype = p.out_dtype, pb.descale = p.descale, pb.alibi_per_batch = p.alibi_per_batch;
  ib = Inputs{};
  dout_b.clear();
  for (int64_t h = 0; h < p.heads_q; ++h) append(ib.q, in.q, rows_of(p, 'q', b, h)), append(dout_b, dout, rows_of(p, 'o', b, h));
  for (int64_t h = 0; h < p.heads_kv; ++h) append(ib.k, in.k, rows_of(p, 'k', b, h)), append(ib.v, in.v, rows_of(p, 'v', b, h));
  ib.sinks = in.sinks;
  ib.alibi_slopes = in.alibi_slopes;
  if (p.alibi_per_batch) ib.alibi_slopes.assign(in.alibi_slopes.begin() + b * p.heads_q, in.alibi_slopes.begin() + (b + 1) * p.heads_q);
  for (auto [from, to] : {std::pair{&in.descale_q, &ib.descale_q}, {&in.descale_k, &ib.descale_k}, {&in.descale_v, &ib.descale_v}}) {
    if (p.descale == Descale::tensor) *to = *from;
    if (p.descale == Descale::head) to->assign(from->begin() + b * p.heads_kv, from->begin() + (b + 1) * p.heads_kv);
  }
}

TEST(BackwardProperties, AVarlenBatchIsItsSequencesApart) {
  std::mt19937_64 g(testing::seed_for(324));
  for (int n = 0, done = 0; done < 40 && n < 1000; ++n) {
    const Problem p = random_variant_problem(g);
    const uint64_t seed = g();
    if (!p.varlen()) continue;
    ++done;
    SCOPED_TRACE(describe(p, seed));
    const Inputs in = make_inputs(p, seed);
    const std::vector<float> dout = random_dout(p, seed);
    const BackwardResult r = naive_attention_backward(p, in, dout);
    std::vector<double> ds(r.dsinks.size(), 0.0);
    for (int64_t b = 0; b < p.batch; ++b) {
      if (p.sq(b) == 0 || p.skv(b) == 0) {  // no pair: every gradient of the sequence is 0
        for (int64_t h = 0; h < p.heads_kv; ++h) {
          const auto k = rows_of(p, 'k', b, h);
          for (size_t x = 0; x < k.second; ++x) ASSERT_EQ(r.dk[k.first + x], 0.0);
        }
        for (int64_t h = 0; h < p.heads_q; ++h) {
          const auto q = rows_of(p, 'q', b, h);
          for (size_t x = 0; x < q.second; ++x) ASSERT_EQ(r.dq[q.first + x], 0.0);
        }
        continue;
      }
      Problem pb;
      Inputs ib;
      std::vector<float> db;
      one_sequence(p, in, dout, b, pb, ib, db);
      const BackwardResult rb = naive_attention_backward(pb, ib, db);
      std::vector<double> mine;
      for (int64_t h = 0; h < p.heads_q; ++h) {
        const auto q = rows_of(p, 'q', b, h);
        mine.insert(mine.end(), r.dq.begin() + static_cast<std::ptrdiff_t>(q.first), r.dq.begin() + static_cast<std::ptrdiff_t>(q.first + q.second));
      }
      expect_near_all("dq", mine, rb.dq, 1e-15);
      mine.clear();
      for (int64_t h = 0; h < p.heads_kv; ++h) {
        const auto k = rows_of(p, 'k', b, h);
        mine.insert(mine.end(), r.dk.begin() + static_cast<std::ptrdiff_t>(k.first), r.dk.begin() + static_cast<std::ptrdiff_t>(k.first + k.second));
      }
      expect_near_all("dk", mine, rb.dk, 1e-15);
      mine.clear();
      for (int64_t h = 0; h < p.heads_kv; ++h) {
        const auto v = rows_of(p, 'v', b, h);
        mine.insert(mine.end(), r.dv.begin() + static_cast<std::ptrdiff_t>(v.first), r.dv.begin() + static_cast<std::ptrdiff_t>(v.first + v.second));
      }
      expect_near_all("dv", mine, rb.dv, 1e-15);
      for (size_t h = 0; h < ds.size(); ++h) ds[h] += rb.dsinks[h];
    }
    expect_near_all("dsinks", r.dsinks, ds, 1e-14);
    if (HasFatalFailure()) return;
  }
}

// Rows that see no key (bottom-right with Sq > Skv, a window past the used keys, an empty
// sequence): whatever their dO holds — huge, NaN — dK, dV and the sinks' gradient do not move,
// and their own dQ rows are exactly 0.
TEST(BackwardProperties, RowsThatSeeNothingContributeNothing) {
  uint64_t seed = testing::seed_for(325);
  for (const char* line : {"b=2 hq=2 hkv=1 sq=30 skv=12 d=8 causal=bottom_right sinks=1 dtype=f32",
                           "b=2 h=1 sq=40 skv=40 d=16 causal=top_left window=4,0 layout=bshd used=10,40 sinks=1 softcap=3",
                           "b=3 hq=2 hkv=1 sq=6,5,4 skv=0,9,2 d=8 causal=bottom_right alibi=symmetric sinks=1"}) {
    const Problem p = parse_problem(line);
    SCOPED_TRACE(describe(p, seed));
    const Inputs in = make_inputs(p, seed);
    std::vector<float> dout = random_dout(p, seed);
    const BackwardResult before = naive_attention_backward(p, in, dout);
    const Sequences s(p);
    int64_t empty = 0;
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t h = 0; h < p.heads_q; ++h)
        for (int64_t i = 0; i < s.sq(b); ++i) {
          bool sees = false;
          const int64_t d = p.causal == Causal::top_left ? 0 : s.skv(b) - s.sq(b);
          for (int64_t j = 0; j < s.skv(b); ++j)
            sees |= j <= i + d && (p.window.left < 0 || j >= i + d - p.window.left);
          if (sees) continue;
          ++empty;
          for (int64_t c = 0; c < p.head_dim_v; ++c) dout[static_cast<size_t>(s.o_row(b, h, i) + c)] = c % 2 ? NAN : 1e30f;
          for (int64_t c = 0; c < p.head_dim_qk; ++c) EXPECT_EQ(before.dq[static_cast<size_t>(s.q_row(b, h, i) + c)], 0.0);
        }
    ASSERT_GT(empty, 0);
    const BackwardResult after = naive_attention_backward(p, in, dout);
    EXPECT_TRUE(bitwise_equal(after.dq, before.dq));
    EXPECT_TRUE(bitwise_equal(after.dk, before.dk));
    EXPECT_TRUE(bitwise_equal(after.dv, before.dv));
    EXPECT_TRUE(bitwise_equal(after.dsinks, before.dsinks));
    ++seed;
  }
}

// The gradients are sized without a zero pass (big_vector.h): every element must be written by
// the task that owns it, zeros included — rows that see nothing, keys no row sees, empty sequences.
TEST(BackwardProperties, EveryGradientElementIsWritten) {
  poison_uninit_for_tests() = true;  // fresh gradient buffers start as NaN
  uint64_t seed = testing::seed_for(327);
  for (const char* line : {"b=3 hq=2 hkv=1 sq=6,0,300 skv=0,9,700 d=8 causal=bottom_right window=20,0 sinks=1",
                           "b=2 h=1 sq=600 skv=40 d=16 causal=top_left window=4,0 layout=bshd used=10,40",
                           "b=1 hq=4 hkv=2 sq=900 skv=300 dqk=16 dv=8 causal=bottom_right softcap=2"}) {
    const Problem p = parse_problem(line);
    SCOPED_TRACE(describe(p, seed));
    const Inputs in = make_inputs(p, seed);
    const BackwardResult r = naive_attention_backward(p, in, random_dout(p, seed));
    for (const auto* g : {&r.dq, &r.dk, &r.dv})
      for (size_t x = 0; x < g->size(); ++x) ASSERT_TRUE(std::isfinite((*g)[x])) << x;
    ++seed;
  }
  poison_uninit_for_tests() = false;
}

// Every block size depends on the problem alone and every output element has one writer, so the
// result is the same bits on 1 thread and on 4, and from one call to the next.
TEST(BackwardProperties, BitwiseTheSameOnOneThreadAndOnFour) {
  const int saved = omp_get_max_threads();
  uint64_t seed = testing::seed_for(326);
  for (const char* line : {"b=2 hq=4 hkv=2 sq=700 skv=900 dqk=32 dv=16 causal=bottom_right softcap=8 sinks=1 alibi=symmetric",
                           "b=1 hq=2 hkv=1 sq=1500 skv=1500 d=16 window=100,20 dtype=f16",
                           "b=3 hq=3 hkv=1 sq=300,0,520 skv=610,40,530 d=8 page=16 pages=shared sinks=1 dtype=e5m2 descale=head"}) {
    const Problem p = parse_problem(line);
    SCOPED_TRACE(describe(p, seed));
    const Inputs in = make_inputs(p, seed);
    const std::vector<float> dout = random_dout(p, seed);
    omp_set_num_threads(1);
    const BackwardResult one = naive_attention_backward(p, in, dout);
    omp_set_num_threads(4);
    const BackwardResult four = naive_attention_backward(p, in, dout), again = naive_attention_backward(p, in, dout);
    omp_set_num_threads(saved);
    for (const BackwardResult* r : {&four, &again}) {
      EXPECT_TRUE(bitwise_equal(r->dq, one.dq));
      EXPECT_TRUE(bitwise_equal(r->dk, one.dk));
      EXPECT_TRUE(bitwise_equal(r->dv, one.dv));
      EXPECT_TRUE(bitwise_equal(r->dsinks, one.dsinks));
    }
    ++seed;
  }
}

}  // namespace
}  // namespace flashcheck
