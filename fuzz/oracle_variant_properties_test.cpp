// Properties that prove the fp64 oracle right on problem model 2's variants (issue #20): identities
// any true attention obeys — a window that bounds nothing is none, (−1, 0) is bottom-right causal, an
// infinite softcap and zero ALiBi slopes change nothing, a varlen batch is its sequences, a paged
// cache is its keys in any page order, BSHD and BHSD are the same data, fp8 with unit descales is
// bf16, a −inf sink is none, empty rows give O = 0 and LSE = −inf, and NaN no row sees reaches no
// output. Kept apart from oracle_properties_test.cpp (plain attention, the replica's bound).
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include <omp.h>

#include "fuzz/generators.h"
#include "reference/mask.h"
#include "reference/naive.h"
#include "reference/storage.h"
#include "testing/test_seed.h"

namespace flashcheck {
namespace {

Inputs draw(const Case& c) { return make_inputs(c.problem, c.seed, c.dist); }

// The largest |v| a row can average (fp8: times its descale).
double vmax(const Inputs& in) {
  double m = 0;
  for (float x : in.v) m = std::max(m, static_cast<double>(std::fabs(x)));
  if (!in.descale_v.empty()) m *= *std::max_element(in.descale_v.begin(), in.descale_v.end());
  return m;
}

// Each property draws its case from the generators (so a counterexample prints as the problem
// line, dist and seed that rebuild it) and compares the fp64 oracle with itself on an equivalent
// problem; "bitwise" where the two problems make the oracle do the very same arithmetic.

// Every variant allowed, small enough for 100 cases per property on two cores.
ProblemSpace variant_space() {
  ProblemSpace s;
  s.max_seq = 128;
  s.max_work = 5e5;
  s.max_varlen_batch = 4;
  s.dtypes = {DType::f32, DType::f16, DType::bf16, DType::e4m3, DType::e5m2};
  s.windows = s.softcap = s.sinks = s.seqused = s.paged = s.alibi_per_batch = true;
  s.alibi = {Alibi::symmetric, Alibi::signed_};
  s.layouts = {Layout::bhsd, Layout::bshd, Layout::thd};
  s.out_dtypes = {DType::bf16, DType::f16};
  s.descales = {Descale::none, Descale::tensor, Descale::head};
  return s;
}

// A case of `s`, then changed by `f` (which may draw): the counterexample prints the changed case.
rc::Gen<Case> with(const ProblemSpace& s, std::function<void(Case&)> f) {
  return rc::gen::exec([s, f] {
    Case c = *gen_case(s);
    f(c);
    normalize(c.problem);
    return c;
  });
}

// Logical offsets from the definition (reference/sequences.h states them; recomputed here so the
// properties do not lean on the code they check): per sequence, [H, S_b, D] blocks one after another.
struct Offsets {
  std::vector<int64_t> q0{0}, kv0{0};
  explicit Offsets(const Problem& p) {
    for (int64_t b = 0; b < p.batch; ++b) q0.push_back(q0.back() + p.sq(b)), kv0.push_back(kv0.back() + p.skv(b));
  }
  int64_t q(const Problem& p, int64_t b) const { return q0[size_t(b)] * p.heads_q; }    // first q row of b
  int64_t kv(const Problem& p, int64_t b) const { return kv0[size_t(b)] * p.heads_kv; }  // first k/v row of b
};

// "" when both results hold the same bits, else where they first differ.
std::string bit_difference(const Problem& p, const OracleResult& a, const OracleResult& b) {
  if (a.o.size() != b.o.size() || a.lse.size() != b.lse.size()) return "result sizes differ";
  for (size_t i = 0; i < a.lse.size(); ++i)
    if (std::memcmp(&a.lse[i], &b.lse[i], sizeof(double)) != 0)
      return "lse[" + std::to_string(i) + "]: " + std::to_string(a.lse[i]) + " vs " + std::to_string(b.lse[i]);
  for (size_t i = 0; i < a.o.size(); ++i)
    if (std::memcmp(&a.o[i], &b.o[i], sizeof(double)) != 0)
      return "o row " + std::to_string(i / size_t(p.head_dim_v)) + " col " + std::to_string(i % size_t(p.head_dim_v)) + ": " +
             std::to_string(a.o[i]) + " vs " + std::to_string(b.o[i]);
  return "";
}
#define RC_ASSERT_SAME_BITS(p, a, b)                       \
  do {                                                     \
    const std::string why_ = bit_difference((p), (a), (b)); \
    if (!why_.empty()) RC_FAIL(why_);                      \
  } while (0)

// The mask as issue 20 states it, apart from reference/mask.h: i + d − left ≤ j ≤ i + d + right,
// −1 unbounded, d = Skv − Sq unless top-left, a causal mode capping right at 0.
bool textbook_visible(const Problem& p, int64_t b, int64_t i, int64_t j) {
  const int64_t sq = p.sq(b), skv = p.skv(b);
  if (j < 0 || j >= skv) return false;
  const int64_t d = p.causal == Causal::top_left ? 0 : skv - sq;
  if (p.causal != Causal::none && j > i + d) return false;
  if (p.window.left >= 0 && j < i + d - p.window.left) return false;
  if (p.window.right >= 0 && j > i + d + p.window.right) return false;
  return true;
}

// KNOWN ORACLE BUG (reported to the lead, reference/ is theirs): for a row whose window starts past
// the sequence's last key (top-left alignment, left bound, Sq > Skv + left + 1) visible_range
// returns the empty range [lo, lo) with lo > Skv, and naive_attention's row blocks take their key
// span from it: the block's scores and P·V then read rows past the head's keys (the next widened
// head's, or uninitialised scratch), and 0 · NaN or 0 · Inf found there turns the block's other,
// finite rows into NaN. OracleVariants.DISABLED_KeysPastASequencesEndAreNeverRead pins it down; until it
// is fixed these properties skip such problems (they would fail by chance, on whatever memory
// follows). Remove this skip with the fix.
bool reads_past_the_keys(const Problem& p) {
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t i = 0; i < p.sq(b); ++i)
      if (visible_range(p, b, i).hi > p.skv(b)) return true;
  return false;
}
void skip_the_known_oracle_bug(const Problem& p) { RC_PRE(!reads_past_the_keys(p)); }

RC_GTEST_PROP(OracleVariants, AWindowThatBoundsNothingIsNoWindow, ()) {
  // Bounds at least as long as any sequence: every key stays visible, as with (−1, −1) — which is
  // how a problem line spells "no window" too.
  const Case c = *with(variant_space(), [](Case& k) {
    Problem& p = k.problem;
    p.window = {};
    int64_t wide = 0;
    for (int64_t b = 0; b < p.batch; ++b) wide = std::max(wide, p.sq(b) + p.skv(b));
    const int64_t extra = *rc::gen::inRange<int64_t>(0, 1000);
    const int sides = *rc::gen::inRange(1, 4);  // left, right or both bounded
    p.window = {sides & 1 ? wide + extra : -1, sides & 2 ? wide + extra : -1};
  });
  skip_the_known_oracle_bug(c.problem);
  Problem none = c.problem;
  none.window = {};
  RC_ASSERT(parse_problem(to_string(none) + " window=-1,-1") == none);
  const Inputs in = draw(c);
  RC_ASSERT_SAME_BITS(c.problem, naive_attention(c.problem, in), naive_attention(none, in));
}

RC_GTEST_PROP(OracleVariants, AWindowRightOfZeroWithoutCausalIsCausalBottomRight, ()) {
  // Bottom-right causal with window (L, R) sees what no causal mode with (L, 0) sees; L = −1 is the
  // issue's "(−1, 0) ≡ causal bottom-right".
  const Case c = *with(variant_space(), [](Case& k) {
    Problem& p = k.problem;
    p.causal = Causal::bottom_right;
    if (p.window.none() || *rc::gen::inRange(0, 2) == 0) p.window = {-1, *rc::gen::elementOf(std::vector<int64_t>{-1, 0, 3})};
  });
  skip_the_known_oracle_bug(c.problem);
  Problem windowed = c.problem;
  windowed.causal = Causal::none;
  windowed.window.right = 0;
  const Inputs in = draw(c);
  RC_ASSERT_SAME_BITS(c.problem, naive_attention(c.problem, in), naive_attention(windowed, in));
}

// Magnitudes that bound how far two fp64 evaluations of the same scores can drift apart:
// |s| ≤ |scale|·max‖q‖·max‖k‖ (Cauchy–Schwarz, descales included), |bias| ≤ max|slope|·(Sq + Skv).
struct Magnitudes {
  double smax = 0, bmax = 0, vmax = 0;
};
Magnitudes magnitudes(const Problem& p, const Inputs& in) {
  auto max_norm = [](const std::vector<float>& x, int64_t d) {
    double m = 0;
    for (size_t r = 0; r * size_t(d) < x.size(); ++r) {
      double n = 0;
      for (int64_t e = 0; e < d; ++e) n += double(x[r * size_t(d) + size_t(e)]) * x[r * size_t(d) + size_t(e)];
      m = std::max(m, std::sqrt(n));
    }
    return m;
  };
  Magnitudes m;
  m.smax = std::fabs(p.softmax_scale()) * max_norm(in.q, p.head_dim_qk) * max_norm(in.k, p.head_dim_qk);
  for (const auto* d : {&in.descale_q, &in.descale_k})
    if (!d->empty()) m.smax *= *std::max_element(d->begin(), d->end());
  for (float x : in.alibi_slopes) m.bmax = std::max(m.bmax, std::fabs(double(x)) * double(p.seq_q + p.seq_kv));
  m.vmax = vmax(in);
  return m;
}

// a and b agree where every logit of a row differs by at most e: the LSE by e, each softmax weight
// by a factor within exp(±2e), so O by 2e·max|v|; `sum_terms` more for sums of that many terms
// taken in another order (and the last bits of exp and log).
void assert_within(const OracleResult& a, const OracleResult& b, double e, double vmax, int64_t sum_terms) {
  const double u = 0x1p-53;
  for (size_t i = 0; i < a.lse.size(); ++i) {
    if (std::isinf(b.lse[i])) RC_ASSERT(a.lse[i] == b.lse[i]);
    else RC_ASSERT(std::fabs(a.lse[i] - b.lse[i]) <= e + 1e-13 * (1 + std::fabs(b.lse[i])));
  }
  for (size_t i = 0; i < a.o.size(); ++i)
    RC_ASSERT(std::fabs(a.o[i] - b.o[i]) <= vmax * (3 * e + 2 * double(sum_terms + 2) * u + 1e-13));
}

RC_GTEST_PROP(OracleVariants, AnInfiniteSoftcapIsNoCap, ()) {
  const Case c = *with(variant_space(), [](Case& k) { k.problem.softcap = 1e30; });
  skip_the_known_oracle_bug(c.problem);
  Problem plain = c.problem;
  plain.softcap = 0;
  const Inputs in = draw(c);
  // c·tanh(s/c) = s(1 + δ), |δ| ≤ 2u (tanh is the identity this close to 0), and adding the ALiBi
  // bias rounds once more: each logit moves by at most 2u·|s|max + 2u·(|s|max + |bias|max).
  const Magnitudes m = magnitudes(c.problem, in);
  const double u = 0x1p-53;
  assert_within(naive_attention(c.problem, in), naive_attention(plain, in), 2 * u * m.smax + 2 * u * (m.smax + m.bmax), m.vmax, 0);
}

RC_GTEST_PROP(OracleVariants, AlibiWithZeroSlopesIsNoAlibi, ()) {
  const Case c = *with(variant_space(), [](Case& k) {
    Problem& p = k.problem;
    if (p.alibi == Alibi::none) p.alibi = *rc::gen::elementOf(std::vector<Alibi>{Alibi::symmetric, Alibi::signed_});
  });
  skip_the_known_oracle_bug(c.problem);
  Inputs in = draw(c);
  std::fill(in.alibi_slopes.begin(), in.alibi_slopes.end(), 0.0f);
  Problem none = c.problem;
  none.alibi = Alibi::none;
  none.alibi_per_batch = false;
  Inputs in_none = in;
  in_none.alibi_slopes.clear();
  RC_ASSERT_SAME_BITS(c.problem, naive_attention(c.problem, in), naive_attention(none, in_none));
}

RC_GTEST_PROP(OracleVariants, ASinkOfMinusInfinityIsNoSink, ()) {
  const Case c = *with(variant_space(), [](Case& k) { k.problem.sinks = true; });
  skip_the_known_oracle_bug(c.problem);
  const Problem& p = c.problem;
  Inputs in = draw(c);
  // Some heads' sinks −inf (make_inputs draws a few itself): exactly those heads match no sink.
  const auto off = *rc::gen::container<std::vector<bool>>(size_t(p.heads_q), rc::gen::arbitrary<bool>());
  for (int64_t h = 0; h < p.heads_q; ++h)
    if (off[size_t(h)]) in.sinks[size_t(h)] = -INFINITY;
  Problem none = p;
  none.sinks = false;
  Inputs in_none = in;
  in_none.sinks.clear();
  const OracleResult a = naive_attention(p, in), b = naive_attention(none, in_none);
  for (int64_t bb = 0; bb < p.batch; ++bb)
    for (int64_t h = 0; h < p.heads_q; ++h) {
      if (in.sinks[size_t(h)] != -INFINITY) continue;
      for (int64_t r = 0; r < a.rows.count(bb); ++r) {
        const size_t at = size_t(a.rows.index(bb, h, r, p.heads_q));
        RC_ASSERT(std::memcmp(&a.lse[at], &b.lse[at], sizeof(double)) == 0);
        RC_ASSERT(std::memcmp(&a.o[at * size_t(p.head_dim_v)], &b.o[at * size_t(p.head_dim_v)], sizeof(double) * size_t(p.head_dim_v)) == 0);
      }
    }
}

// Sequence b of a batch as a problem of its own: its lengths (keys used only: the logical inputs
// hold no others), its slopes and descales, no paging.
std::pair<Problem, Inputs> one_sequence(const Problem& p, const Inputs& in, int64_t b) {
  Problem s = p;
  s.batch = 1;
  s.layout = Layout::thd;
  s.seqlens_q = {p.sq(b)};
  s.seqlens_kv = {p.skv(b)};
  s.seqused_kv.clear();
  s.page_size = 0;
  s.page_order = PageOrder::identity;
  normalize(s);
  const Offsets at(p);
  Inputs x;
  auto slice = [](const std::vector<float>& v, int64_t from, int64_t n) {
    return std::vector<float>(v.begin() + from, v.begin() + from + n);
  };
  x.q = slice(in.q, at.q(p, b) * p.head_dim_qk, p.sq(b) * p.heads_q * p.head_dim_qk);
  x.k = slice(in.k, at.kv(p, b) * p.head_dim_qk, p.skv(b) * p.heads_kv * p.head_dim_qk);
  x.v = slice(in.v, at.kv(p, b) * p.head_dim_v, p.skv(b) * p.heads_kv * p.head_dim_v);
  x.sinks = in.sinks;
  x.alibi_slopes = p.alibi_per_batch ? slice(in.alibi_slopes, b * p.heads_q, p.heads_q) : in.alibi_slopes;
  for (auto [from, to] : {std::pair{&in.descale_q, &x.descale_q}, {&in.descale_k, &x.descale_k}, {&in.descale_v, &x.descale_v}})
    *to = p.descale == Descale::head ? slice(*from, b * p.heads_kv, p.heads_kv) : *from;
  return {s, x};
}

// Bitwise, the issue says: a row's result must not depend on the batch around it. The oracle's
// row blocks do (their height follows the rows per thread of the whole call), and OpenBLAS's dgemm
// rounds a dot product differently for different block heights (measured: a few ulps of the LSE at
// b=2 hq=1 hkv=1 sq=4,1 skv=4,0 dqk=192 dv=32 causal=top_left dtype=e4m3 scale=2 layout=thd
// descale=tensor, dist large, seed 0). So this property holds the two to the rounding of sums taken
// in another order, and to the bit where FLASHCHECK_ORACLE_ROW_BLOCK=1 fixes the blocks (the
// second CTest entry of this property, fuzz/CMakeLists.txt).
RC_GTEST_PROP(OracleVariants, AVarlenBatchIsItsSequencesOneByOne, ()) {
  ProblemSpace s = variant_space();
  s.layouts = {Layout::thd};
  const Case c = *gen_case(s);
  skip_the_known_oracle_bug(c.problem);
  const Problem& p = c.problem;
  const Inputs in = draw(c);
  const OracleResult whole = naive_attention(p, in);
  const char* rb = std::getenv("FLASHCHECK_ORACLE_ROW_BLOCK");
  const bool bitwise = rb && std::string(rb) == "1";
  const Magnitudes m = magnitudes(p, in);
  const double u = 0x1p-53, e = 2 * double(p.head_dim_qk + 2) * u * m.smax + 2 * u * (m.smax + m.bmax);
  for (int64_t b = 0; b < p.batch; ++b) {
    const auto [sp, sin] = one_sequence(p, in, b);
    const OracleResult part = naive_attention(sp, sin);
    OracleResult mine;  // sequence b's rows of the whole batch, laid out as `part`
    for (int64_t h = 0; h < p.heads_q; ++h)
      for (int64_t r = 0; r < p.sq(b); ++r) {
        const size_t w = size_t(whole.rows.index(b, h, r, p.heads_q));
        mine.lse.push_back(whole.lse[w]);
        mine.o.insert(mine.o.end(), whole.o.begin() + long(w * size_t(p.head_dim_v)), whole.o.begin() + long((w + 1) * size_t(p.head_dim_v)));
      }
    if (bitwise) {
      const std::string why = bit_difference(sp, mine, part);
      if (!why.empty()) RC_FAIL("sequence " + std::to_string(b) + " differs from " + to_string(sp) + " alone: " + why);
    } else {
      assert_within(mine, part, e, m.vmax, p.seq_kv);
    }
  }
}

RC_GTEST_PROP(OracleVariants, PagedCachesHoldTheirKeysInAnyPageOrder, ()) {
  // Any drawn problem's keys put in a paged cache: first with pages in sequence order, which is a
  // contiguous (THD) cache whose sequences are padded to whole pages; then with the pages permuted
  // and the block table with them. Unused slots and the spare page hold NaN.
  const Case c = *with(variant_space(), [](Case& k) {
    Problem& p = k.problem;
    if (p.paged()) return;
    std::vector<int64_t> used;
    for (int64_t b = 0; b < p.batch; ++b) used.push_back(p.skv(b));
    p.seqlens_kv = used;
    p.seqused_kv.clear();
    p.page_size = *rc::gen::elementOf(std::vector<int64_t>{1, 2, 3, 5, 16, 64});
  });
  skip_the_known_oracle_bug(c.problem);
  const Problem& p = c.problem;
  const Inputs in = draw(c);
  const int64_t P = p.page_size, D[2] = {p.head_dim_qk, p.head_dim_v};
  std::vector<int64_t> start{0};
  int64_t max_pages = 1;
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t n = (p.skv(b) + P - 1) / P;
    start.push_back(start.back() + n);
    max_pages = std::max(max_pages, n);
  }
  const int64_t spare = start.back(), num_pages = spare + 1;
  Inputs id = in;
  id.num_pages = num_pages;
  id.block_table.assign(size_t(p.batch * max_pages), int32_t(spare));
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t j = start[size_t(b)]; j < start[size_t(b) + 1]; ++j) id.block_table[size_t(b * max_pages + j - start[size_t(b)])] = int32_t(j);
  // The caches by the definition: key j of sequence b, head h at ((page·P + slot)·Hkv + h)·D.
  const Offsets at(p);
  std::vector<float> cache[2];
  const std::vector<float>* logical[2] = {&in.k, &in.v};
  for (int t = 0; t < 2; ++t) {
    cache[t].assign(size_t(num_pages * P * p.heads_kv * D[t]), NAN);
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t h = 0; h < p.heads_kv; ++h)
        for (int64_t j = 0; j < p.skv(b); ++j)
          std::copy_n(logical[t]->begin() + (at.kv(p, b) + h * p.skv(b) + j) * D[t], D[t],
                      cache[t].begin() + ((start[size_t(b)] * P + j) * p.heads_kv + h) * D[t]);
  }
  // In sequence order, the cache is THD with per-sequence stored lengths of whole pages.
  Problem thd = p;
  thd.layout = Layout::thd;
  thd.page_size = 0;
  thd.page_order = PageOrder::identity;
  thd.seqlens_q.clear();
  thd.seqlens_kv.clear();
  for (int64_t b = 0; b < p.batch; ++b) {
    thd.seqlens_q.push_back(p.sq(b));
    thd.seqlens_kv.push_back((start[size_t(b) + 1] - start[size_t(b)]) * P);
    thd.seqused_kv.push_back(p.skv(b));
  }
  normalize(thd);
  Inputs flat = in;
  flat.block_table.clear();
  flat.num_pages = 0;
  const Tensor kv[2] = {Tensor::k, Tensor::v};
  const Storage paged_st(p, id), thd_st(thd, flat);
  for (int t = 0; t < 2; ++t) {
    std::vector<float> a(logical[t]->size()), b(logical[t]->size());
    paged_st.gather(kv[t], cache[t].data(), a.data());
    thd_st.gather(kv[t], cache[t].data(), b.data());
    RC_ASSERT(std::memcmp(a.data(), logical[t]->data(), a.size() * 4) == 0);
    RC_ASSERT(std::memcmp(b.data(), logical[t]->data(), b.size() * 4) == 0);
  }
  const OracleResult want = naive_attention(p, id);
  RC_ASSERT_SAME_BITS(p, want, naive_attention(thd, flat));
  // Pages permuted: physical page perm[x] holds what page x held, and the table follows.
  std::vector<int64_t> perm(static_cast<size_t>(num_pages));
  std::iota(perm.begin(), perm.end(), 0);
  const auto keys = *rc::gen::container<std::vector<uint32_t>>(perm.size(), rc::gen::arbitrary<uint32_t>());
  std::sort(perm.begin(), perm.end(), [&](int64_t x, int64_t y) { return std::pair{keys[size_t(x)], x} < std::pair{keys[size_t(y)], y}; });
  Inputs moved = id;
  for (int32_t& e : moved.block_table) e = int32_t(perm[size_t(e)]);
  const Storage moved_st(p, moved);
  Inputs gathered = moved;
  for (int t = 0; t < 2; ++t) {
    const int64_t page = P * p.heads_kv * D[t];
    std::vector<float> shuffled(cache[t].size());
    for (int64_t x = 0; x < num_pages; ++x)
      std::copy_n(cache[t].begin() + x * page, page, shuffled.begin() + perm[size_t(x)] * page);
    std::vector<float>& out = t == 0 ? gathered.k : gathered.v;
    moved_st.gather(kv[t], shuffled.data(), out.data());
    RC_ASSERT(std::memcmp(out.data(), logical[t]->data(), out.size() * 4) == 0);
  }
  const OracleResult got = naive_attention(p, gathered);
  RC_ASSERT_SAME_BITS(p, want, got);
  for (double x : got.o) RC_ASSERT(!std::isnan(x));
}

RC_GTEST_PROP(OracleVariants, BshdAndBhsdViewsOfTheSameDataGiveTheSameResult, ()) {
  ProblemSpace s = variant_space();
  s.layouts = {Layout::bhsd};
  s.paged = false;
  const Case c = *gen_case(s);
  skip_the_known_oracle_bug(c.problem);
  const Problem& p = c.problem;  // dense, perhaps with seqused (stored rows past the used ones)
  const Inputs in = draw(c);
  Problem bshd = p;
  bshd.layout = Layout::bshd;
  // Both buffers by their definitions, from the logical rows; rows past seqused hold NaN.
  auto buffers = [&](int64_t heads, int64_t stored, int64_t d, bool keys, const std::vector<float>& logical,
                     std::vector<float>& bhsd_buf, std::vector<float>& bshd_buf) {
    const Offsets at(p);
    bhsd_buf.assign(size_t(p.batch * heads * stored * d), NAN);
    bshd_buf = bhsd_buf;
    for (int64_t b = 0; b < p.batch; ++b) {
      const int64_t n = keys ? p.skv(b) : p.sq(b), first = keys ? at.kv(p, b) : at.q(p, b);
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < n; ++i) {
          const auto src = logical.begin() + (first + h * n + i) * d;
          std::copy_n(src, d, bhsd_buf.begin() + ((b * heads + h) * stored + i) * d);
          std::copy_n(src, d, bshd_buf.begin() + ((b * stored + i) * heads + h) * d);
        }
    }
  };
  const Storage st_h(p, in), st_s(bshd, in);
  Inputs from_h = in, from_s = in;
  struct T { Tensor t; int64_t heads, stored, d; bool keys; const std::vector<float>* src; std::vector<float>* dst_h; std::vector<float>* dst_s; };
  const T tensors[] = {{Tensor::q, p.heads_q, p.seq_q, p.head_dim_qk, false, &in.q, &from_h.q, &from_s.q},
                       {Tensor::k, p.heads_kv, p.seq_kv, p.head_dim_qk, true, &in.k, &from_h.k, &from_s.k},
                       {Tensor::v, p.heads_kv, p.seq_kv, p.head_dim_v, true, &in.v, &from_h.v, &from_s.v}};
  for (const T& t : tensors) {
    std::vector<float> bh, bs;
    buffers(t.heads, t.stored, t.d, t.keys, *t.src, bh, bs);
    st_h.gather(t.t, bh.data(), t.dst_h->data());
    st_s.gather(t.t, bs.data(), t.dst_s->data());
    RC_ASSERT(std::memcmp(t.dst_h->data(), t.src->data(), t.src->size() * 4) == 0);
    RC_ASSERT(std::memcmp(t.dst_s->data(), t.src->data(), t.src->size() * 4) == 0);
  }
  const OracleResult a = naive_attention(p, from_h), b = naive_attention(bshd, from_s);
  RC_ASSERT_SAME_BITS(p, a, b);
  // And the outputs land where each layout puts them: the BSHD buffer is the BHSD one transposed.
  const std::vector<float> o(a.o.begin(), a.o.end());
  std::vector<float> oh(size_t(st_h.elems(Tensor::o)), NAN), os(size_t(st_s.elems(Tensor::o)), NAN);
  st_h.scatter(Tensor::o, o.data(), oh.data());
  st_s.scatter(Tensor::o, o.data(), os.data());
  for (int64_t bb = 0; bb < p.batch; ++bb)
    for (int64_t h = 0; h < p.heads_q; ++h)
      for (int64_t i = 0; i < p.seq_q; ++i)
        RC_ASSERT(std::memcmp(&oh[size_t(((bb * p.heads_q + h) * p.seq_q + i) * p.head_dim_v)],
                              &os[size_t(((bb * p.seq_q + i) * p.heads_q + h) * p.head_dim_v)], size_t(p.head_dim_v) * 4) == 0);
}

// An fp8 problem's inputs in bf16 (every e4m3 and e5m2 value is a bf16 value), each times its
// descale factor (powers of two keep that exact): what the fp8 path computes with.
std::pair<Problem, Inputs> as_bf16(const Problem& p, const Inputs& in) {
  Problem q = p;
  q.dtype = DType::bf16;
  q.out_dtype.reset();
  q.descale = Descale::none;
  Inputs x = in;
  x.descale_q.clear(), x.descale_k.clear(), x.descale_v.clear();
  const Offsets at(p);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t hk = 0; hk < p.heads_kv; ++hk) {
      const double dq = descale_of(p, in.descale_q, b, hk), dk = descale_of(p, in.descale_k, b, hk), dv = descale_of(p, in.descale_v, b, hk);
      for (int64_t h = hk * p.group(); h < (hk + 1) * p.group(); ++h)
        for (int64_t e = 0; e < p.sq(b) * p.head_dim_qk; ++e) x.q[size_t((at.q(p, b) + h * p.sq(b)) * p.head_dim_qk + e)] *= float(dq);
      for (int64_t e = 0; e < p.skv(b) * p.head_dim_qk; ++e) x.k[size_t((at.kv(p, b) + hk * p.skv(b)) * p.head_dim_qk + e)] *= float(dk);
      for (int64_t e = 0; e < p.skv(b) * p.head_dim_v; ++e) x.v[size_t((at.kv(p, b) + hk * p.skv(b)) * p.head_dim_v + e)] *= float(dv);
    }
  return {q, x};
}

RC_GTEST_PROP(OracleVariants, Fp8WithUnitDescalesIsTheBf16Path, ()) {
  ProblemSpace s = variant_space();
  s.dtypes = {DType::e4m3, DType::e5m2};
  const Case c = *gen_case(s);
  skip_the_known_oracle_bug(c.problem);
  Inputs in = draw(c);
  for (auto* d : {&in.descale_q, &in.descale_k, &in.descale_v}) std::fill(d->begin(), d->end(), 1.0f);
  const auto [p16, in16] = as_bf16(c.problem, in);
  for (const auto* x : {&in16.q, &in16.k, &in16.v})
    for (float e : *x) RC_ASSERT(round_to(DType::bf16, e) == e);
  RC_ASSERT(in16.q == in.q && in16.k == in.k && in16.v == in.v);
  RC_ASSERT_SAME_BITS(c.problem, naive_attention(c.problem, in), naive_attention(p16, in16));
}

RC_GTEST_PROP(OracleVariants, Fp8PowerOfTwoDescalesArePrescaledBf16Inputs, ()) {
  // Per tensor or per (batch, KV head): each factor must reach exactly its own rows.
  ProblemSpace s = variant_space();
  s.dtypes = {DType::e4m3, DType::e5m2};
  s.descales = {Descale::tensor, Descale::head};
  const Case c = *gen_case(s);
  skip_the_known_oracle_bug(c.problem);
  Inputs in = draw(c);
  for (auto* d : {&in.descale_q, &in.descale_k, &in.descale_v})
    for (float& x : *d) x = std::ldexp(1.0f, *rc::gen::inRange(-3, 4));
  const auto [p16, in16] = as_bf16(c.problem, in);
  for (const auto* x : {&in16.q, &in16.k, &in16.v})
    for (float e : *x) RC_ASSERT(round_to(DType::bf16, e) == e);
  RC_ASSERT_SAME_BITS(c.problem, naive_attention(c.problem, in), naive_attention(p16, in16));
}

RC_GTEST_PROP(OracleVariants, ARowThatSeesNoKeyHasOZeroAndLseMinusInfinity, ()) {
  ProblemSpace s = variant_space();
  const Case c = *with(s, [](Case& k) {
    if (k.problem.window.none()) k.problem.window = {*rc::gen::inRange<int64_t>(0, 4), *rc::gen::inRange<int64_t>(-1, 4)};
  });
  skip_the_known_oracle_bug(c.problem);
  const Problem& p = c.problem;
  const OracleResult r = naive_attention(p, draw(c));
  bool any_empty = false;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t i = 0; i < p.sq(b); ++i) {
      bool empty = true;
      for (int64_t j = 0; j < p.skv(b) && empty; ++j) empty = !textbook_visible(p, b, i, j);
      any_empty |= empty;
      for (int64_t h = 0; h < p.heads_q; ++h) {
        const size_t at = size_t(r.rows.index(b, h, i, p.heads_q));
        if (!empty) {
          RC_ASSERT(std::isfinite(r.lse[at]));
          continue;
        }
        RC_ASSERT(r.lse[at] == -INFINITY);
        for (int64_t x = 0; x < p.head_dim_v; ++x) RC_ASSERT(r.o[at * size_t(p.head_dim_v) + size_t(x)] == 0.0);
      }
    }
  RC_CLASSIFY(any_empty, "some row sees no key");
}

RC_GTEST_PROP(OracleVariants, NaNInKeysNoRowSeesReachesNoOutput, ()) {
  // The kernel-side buffers (reference/storage.h) start as NaN and take the logical rows; then
  // every key and value slot that no row of any sequence reading it sees (outside every window,
  // past a causal diagonal) turns NaN too. What the oracle gathers from them must give the clean
  // result: NaN past seqused, in THD padding, in unused pages or in unseen keys reaches nothing.
  // Slots, not logical rows: a page shared by two sequences is unseen only if neither sees it.
  const Case c = *gen_case(variant_space());
  skip_the_known_oracle_bug(c.problem);
  const Problem& p = c.problem;
  const Inputs in = draw(c);
  const Storage st(p, in, /*pad_tokens=*/3);
  Inputs dirty = in;
  int64_t unseen = 0;
  for (auto [t, x] : {std::pair{Tensor::q, &dirty.q}, {Tensor::k, &dirty.k}, {Tensor::v, &dirty.v}}) {
    std::vector<float> buf(size_t(st.elems(t)), NAN);
    st.scatter(t, x->data(), buf.data());
    std::vector<float> back(x->size());
    st.gather(t, buf.data(), back.data());
    RC_ASSERT(std::memcmp(back.data(), x->data(), back.size() * 4) == 0);
    if (t == Tensor::q) continue;
    std::vector<char> seen(buf.size(), 0), stored(buf.size(), 0);
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t j = 0; j < p.skv(b); ++j) {
        bool any = false;
        for (int64_t i = 0; i < p.sq(b) && !any; ++i) any = textbook_visible(p, b, i, j);
        for (int64_t h = 0; h < p.heads_kv; ++h) {
          const size_t at = size_t(st.row(t, b, h, j));
          stored[at] = 1;
          seen[at] |= any;
        }
      }
    for (size_t at = 0; at < buf.size(); ++at)
      if (stored[at] && !seen[at]) {
        std::fill_n(buf.begin() + long(at), st.width(t), NAN);
        unseen += t == Tensor::k;
      }
    st.gather(t, buf.data(), x->data());
  }
  const OracleResult clean = naive_attention(p, in), got = naive_attention(p, dirty);
  // The LSE never reads V; with NaN in a head's values the oracle takes its row-by-row P·V, whose
  // sums differ from the block GEMM's in rounding only.
  for (size_t i = 0; i < got.lse.size(); ++i) RC_ASSERT(std::memcmp(&got.lse[i], &clean.lse[i], sizeof(double)) == 0);
  const double vm = vmax(in);
  for (size_t i = 0; i < got.o.size(); ++i) {
    RC_ASSERT(!std::isnan(got.o[i]));
    RC_ASSERT(std::fabs(got.o[i] - clean.o[i]) <= 1e-12 * vm);
  }
  RC_CLASSIFY(unseen > 0, "keys no row sees");
}

// The bug the skip above stands for, made deterministic: with two threads rows 4..7 of sequence 0
// share a row block; rows 6 and 7 see no key and row 7's empty range sits past the sequence's 6
// keys, so the block's P·V reads "key 6" of sequence 0 — the first key of sequence 1, here NaN —
// into rows 4 and 5, which see only their own finite key. Enable with the fix.
TEST(OracleVariants, DISABLED_KeysPastASequencesEndAreNeverRead) {
  const Problem p = parse_problem("b=2 hq=1 hkv=1 sq=8 skv=6 d=16 causal=top_left window=0,2 dtype=f32");
  Inputs in = make_inputs(p, testing::seed_for(0x0b));
  std::fill_n(in.k.begin() + 6 * 16, 16, NAN);  // key 0 of sequence 1: only its row 0 sees it
  const int threads = omp_get_max_threads();
  omp_set_num_threads(2);
  const OracleResult r = naive_attention(p, in);
  omp_set_num_threads(threads);
  for (int64_t i = 0; i < 8; ++i)
    for (int64_t c = 0; c < 16; ++c) EXPECT_FALSE(std::isnan(r.o[size_t(i * 16 + c)])) << "sequence 0 row " << i << " col " << c;
  EXPECT_TRUE(std::isnan(r.o[size_t(8 * 16)]));  // sequence 1's row 0 does see it
}

}  // namespace
}  // namespace flashcheck
