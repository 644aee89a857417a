// The blocked replica on every variant of problem model 2: against the fp64 oracle within the bound
// derived from its numerics (fuzz/replica_bound.h), and against itself — identities that hold
// bitwise because they change no arithmetic (tile skipping, a sequence alone, an identity page
// table, a −inf sink) or up to rounding (another tiling, a huge softcap, FlashAttention 2's ALiBi).
// Every problem and input is drawn from the run seed (testing/test_seed.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <tuple>

#include "fuzz/replica_bound.h"
#include "reference/mask.h"
#include "reference/naive.h"
#include "reference/random_variant_test_util.h"
#include "reference/replica.h"
#include "reference/score_mod.h"
#include "reference/sequences.h"
#include "reference/storage.h"
#include "testing/test_seed.h"

namespace flashcheck {
namespace {

constexpr double kEps = std::numeric_limits<float>::epsilon();

int64_t pick(std::mt19937_64& g, int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(g); }

// Tiles small enough that the short sequences of random_variant_problem span several of them.
ReplicaConfig random_config(std::mt19937_64& g) {
  constexpr int64_t tiles[] = {1, 2, 3, 5, 8, 16};
  ReplicaConfig c;
  c.block_q = tiles[pick(g, 0, 5)];
  c.block_kv = tiles[pick(g, 0, 5)];
  c.use_exp2 = pick(g, 0, 1);
  c.round_p = pick(g, 0, 1);
  c.finite_neg_inf = pick(g, 0, 1);
  c.skip_masked_tiles = pick(g, 0, 1);
  return c;
}

std::string describe(const Problem& p, const ReplicaConfig& c, Dist d) {
  return to_string(p) + " dist=" + std::string(to_string(d)) + " Br=" + std::to_string(c.block_q) +
         " Bc=" + std::to_string(c.block_kv) + (c.use_exp2 ? " exp2" : " exp") + (c.round_p ? " P-rounded" : " P-fp32") +
         (c.finite_neg_inf ? " fill=-2^30" : " fill=-inf") + (c.skip_masked_tiles ? " skip" : " no-skip");
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The scale of one row's rounding: the largest score magnitude a rounding of the raw scores can
// move (natural units: Σ_d |q_d k_d| of the dot product, which a reordered sum moves by that much
// times eps however much it cancels, plus |ALiBi bias|; a softcap only damps them) and the largest
// |v| (dequantized).
struct RowScale {
  double smax = 0, vmax = 0;
};
RowScale row_scale(const Problem& p, const Inputs& in, int64_t b, int64_t h, int64_t i) {
  const Sequences seqs(p);
  const KeyRange vis = visible_range(p, b, i);
  const int64_t hk = p.kv_head(h);
  const bool fp8 = is_fp8(p.dtype);
  const double qk = fp8 ? descale_of(p, in.descale_q, b, hk) * descale_of(p, in.descale_k, b, hk) : 1.0;
  const double vd = fp8 ? descale_of(p, in.descale_v, b, hk) : 1.0;
  const AlibiBias<double> bias = alibi_for<double>(p, in.alibi_slopes.data(), b, h);
  const float* q = &in.q[static_cast<size_t>(seqs.q_row(b, h, i))];
  RowScale r;
  for (int64_t j = vis.lo; j < vis.hi; ++j) {
    const float* k = &in.k[static_cast<size_t>(seqs.k_row(b, hk, j))];
    double abs_dot = 0;
    for (int64_t x = 0; x < p.head_dim_qk; ++x) abs_dot += std::fabs(static_cast<double>(q[x]) * k[x]);
    r.smax = std::max(r.smax, abs_dot * qk * std::fabs(p.softmax_scale()) + std::fabs(bias(i, j)));
    const float* v = &in.v[static_cast<size_t>(seqs.v_row(b, hk, j))];
    for (int64_t x = 0; x < p.head_dim_v; ++x) r.vmax = std::max(r.vmax, std::fabs(v[x] * vd));
  }
  return r;
}

// An upper bound on every |score| of the problem (natural units).
double largest_score(const Problem& p, const Inputs& in) {
  double m = 0;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_q; ++h)
      for (int64_t i = 0; i < p.sq(b); ++i) m = std::max(m, row_scale(p, in, b, h, i).smax);
  return m;
}

int mantissa_bits(DType d) { return d == DType::f16 ? 10 : d == DType::bf16 ? 7 : 23; }

// Compares two replica results row by row within k units of eps·(max|o| + (smax + T)·vmax) (LSE:
// eps·(1 + |LSE| + smax + T)), T the row's KV tiles, plus one output ulp for 16-bit outputs (a
// final rounding may flip): what reordered sums, one more rescale per tile and re-rounded scores
// may move. With P rounded to a narrow dtype of unit roundoff u_p, a score an ulp off may also
// round some P to its neighbour: each moves O by at most 2u_p·p_j·vmax/ℓ, all of them together by
// 2u_p·vmax. Returns the worst difference in the units (beyond those allowances).
double expect_close(const Problem& p, const Inputs& in, const ReplicaResult& a, const ReplicaResult& b, double k,
                    int64_t block_kv, bool key_offset = false, double u_p = 0) {
  double worst = 0;
  const int64_t dv = p.head_dim_v;
  for (int64_t bb = 0; bb < p.batch; ++bb)
    for (int64_t h = 0; h < p.heads_q; ++h)
      for (int64_t r = 0; r < a.rows.count(bb); ++r) {
        const int64_t i = a.rows.row(bb, r);
        const size_t at = static_cast<size_t>(a.rows.index(bb, h, r, p.heads_q));
        const RowScale s = row_scale(p, in, bb, h, i);
        const KeyRange vis = visible_range(p, bb, i);
        const double tiles = vis.empty() ? 0.0 : static_cast<double>((vis.hi - 1) / block_kv - vis.lo / block_kv + 1);
        // b under FlashAttention 2's causal ALiBi: every score raised by slope·(i + d), and the LSE.
        const double shift =
            key_offset ? alibi_lse_shift(p, AlibiLse::key_offset, alibi_slope(p, in.alibi_slopes.data(), bb, h), bb, i) : 0.0;
        double omax = 0;
        for (int64_t c = 0; c < dv; ++c) omax = std::max(omax, std::fabs(static_cast<double>(a.o[at * dv + c])));
        const double unit = kEps * (omax + (s.smax + std::fabs(shift) + tiles) * s.vmax);
        const double flip =
            (p.o_dtype() == DType::f32 ? 0.0 : std::ldexp(omax, -mantissa_bits(p.o_dtype()))) + 2 * u_p * s.vmax;
        for (int64_t c = 0; c < dv; ++c) {
          const double d = std::fabs(static_cast<double>(a.o[at * dv + c]) - b.o[at * dv + c]);
          EXPECT_LE(d, k * unit + flip) << "b " << bb << " h " << h << " row " << i << " col " << c << ": " << a.o[at * dv + c]
                                        << " vs " << b.o[at * dv + c];
          if (unit > 0) worst = std::max(worst, std::max(0.0, d - flip) / unit);
        }
        if (std::isinf(a.lse[at])) {
          EXPECT_EQ(a.lse[at], b.lse[at]) << "b " << bb << " h " << h << " row " << i;
          continue;
        }
        const double lunit = kEps * (1 + std::fabs(a.lse[at]) + std::fabs(shift) + s.smax + tiles);
        const double d = std::fabs(static_cast<double>(b.lse[at]) - (a.lse[at] + shift));
        EXPECT_LE(d, k * lunit) << "LSE b " << bb << " h " << h << " row " << i << ": " << a.lse[at] << " vs " << b.lse[at];
        worst = std::max(worst, d / lunit);
      }
  return worst;
}

// ---- Against the fp64 oracle, within the derived bound, on every variant. ----

// Every element of every row within fp32_kernel_row_bound, for random variant problems, inputs and
// tile shapes. Prints, per dtype, the largest error as a fraction of the bound (how much of it a
// correct replica uses: the bound is not vacuous) and the largest error relative to max|v|.
TEST(ReplicaVariants, AgreeWithTheOracleWithinTheDerivedBound) {
  std::mt19937_64 g(testing::seed_for(301));
  struct Worst {
    double o_of_bound = 0, lse_of_bound = 0, o_of_vmax = 0;
    int cases = 0;
  };
  std::map<std::string, Worst> worst;
  for (int n = 0; n < 400; ++n) {
    const Problem p = random_variant_problem(g);
    ReplicaConfig cfg = random_config(g);
    const Dist dist = kAllDists[static_cast<size_t>(n) % std::size(kAllDists)];
    // The -2^30 fill stands in for -inf only while raw scores stay above it (Replica.FiniteNegInf...):
    // scores near 1e8·√D of Dist::large can pass it.
    if (dist == Dist::large) cfg.finite_neg_inf = false;
    const Inputs in = make_inputs(p, g(), dist);
    // FlashAttention 3 subtracts its P offset from the scaled max in fp32: past 2^27 the 8 is lost
    // and P reaches 2^16, past every fp8 value (Fp8MaxOffsetIsLostPastTwoTo27 pins it). exp takes
    // the offset as an exact 2^8.
    if (is_fp8(p.dtype) && cfg.p_offset(p) > 0 && largest_score(p, in) * kLog2e >= 0x1p26) cfg.use_exp2 = false;
    SCOPED_TRACE(describe(p, cfg, dist));
    const OracleResult truth = naive_attention(p, in);
    const ReplicaResult rep = replica_attention(p, in, cfg);
    ASSERT_EQ(rep.rows, truth.rows);
    const double u_p = cfg.round_p ? unit_roundoff(p.dtype) : 0.0, u_out = unit_roundoff(p.o_dtype());
    Worst& w = worst[std::string(to_string(p.dtype))];
    ++w.cases;
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t h = 0; h < p.heads_q; ++h)
        for (int64_t i = 0; i < p.sq(b); ++i) {
          const size_t at = static_cast<size_t>(truth.rows.index(b, h, i, p.heads_q));
          const size_t dv = static_cast<size_t>(p.head_dim_v);
          if (visible_range(p, b, i).empty()) {
            ASSERT_EQ(rep.lse[at], -INFINITY) << "b " << b << " h " << h << " row " << i;
            for (size_t c = 0; c < dv; ++c) ASSERT_EQ(rep.o[at * dv + c], 0.0f);
            continue;
          }
          const RowBound bound = fp32_kernel_row_bound(p, in, b, h, i, u_p, cfg.block_kv, truth.lse[at], cfg.p_offset(p));
          const double lse_err = std::fabs(rep.lse[at] - truth.lse[at]);
          ASSERT_LE(lse_err, bound.lse) << "b " << b << " h " << h << " row " << i << ": " << rep.lse[at] << " vs " << truth.lse[at];
          w.lse_of_bound = std::max(w.lse_of_bound, lse_err / bound.lse);
          const double vmax = row_scale(p, in, b, h, i).vmax;
          for (size_t c = 0; c < dv; ++c) {
            const double t = truth.o[at * dv + c], err = std::fabs(rep.o[at * dv + c] - t);
            const double limit = bound.o + 1.01 * u_out * std::fabs(t);
            ASSERT_LE(err, limit) << "b " << b << " h " << h << " row " << i << " col " << c << ": " << rep.o[at * dv + c]
                                  << " vs " << t;
            if (limit > 0) w.o_of_bound = std::max(w.o_of_bound, err / limit);
            if (vmax > 0) w.o_of_vmax = std::max(w.o_of_vmax, err / vmax);
          }
        }
  }
  for (const auto& [dtype, w] : worst) {
    std::printf("%s (%d cases): worst O error %.3g of the bound, %.3g of max|v|; worst LSE error %.3g of the bound\n",
                dtype.c_str(), w.cases, w.o_of_bound, w.o_of_vmax, w.lse_of_bound);
    // Not vacuous: a correct replica uses a visible part of the bound on some element.
    EXPECT_GT(w.o_of_bound, 1e-3) << dtype;
  }
}

// fp8: P is scaled by 2^8 before its rounding to e4m3 (FlashAttention 3's max offset). Weights
// e^-8 ≈ 3.4e-4 lie below half of e4m3's smallest subnormal (2^-10): unscaled they round to 0 and
// their keys are lost from O (ℓ still counts them), scaled they are normal e4m3 values. 1023 such
// keys hold a quarter of the weight: losing them moves O far more than its f16 rounding does.
TEST(ReplicaVariants, Fp8PIsScaledBeforeItIsRounded) {
  Problem p = parse_problem("b=1 h=1 sq=1 skv=1024 d=16 dtype=e4m3 odtype=f16");
  p.scale = 1.0;
  Inputs in = make_inputs(p, testing::seed_for(302));
  // q = e_0; key 0 scores 0, every other key -8 (exact in e4m3): one weight 1, 1023 of e^-8.
  std::fill(in.q.begin(), in.q.end(), 0.0f);
  in.q[0] = 1.0f;
  for (int64_t j = 0; j < p.seq_kv; ++j) in.k[static_cast<size_t>(j * p.head_dim_qk)] = j == 0 ? 0.0f : -8.0f;
  const OracleResult truth = naive_attention(p, in);
  ReplicaConfig fa3{.block_q = 16, .block_kv = 16, .round_p = true, .finite_neg_inf = false};  // default offset for fp8: 8
  ReplicaConfig unscaled = fa3;
  unscaled.p_scale_log2 = 0;
  ASSERT_EQ(fa3.p_offset(p), 8);
  const ReplicaResult a = replica_attention(p, in, fa3), b = replica_attention(p, in, unscaled);
  double err_scaled = 0, err_unscaled = 0;
  for (size_t c = 0; c < a.o.size(); ++c) {
    err_scaled += std::pow(a.o[c] - truth.o[c], 2);
    err_unscaled += std::pow(b.o[c] - truth.o[c], 2);
  }
  // Unscaled, O is v_0 / ℓ exactly (up to its bf16 rounding): the small keys contribute nothing.
  const double l = 1 + 1023 * std::exp(-8.0);
  for (int64_t c = 0; c < p.head_dim_v; ++c)
    EXPECT_NEAR(b.o[static_cast<size_t>(c)], in.v[static_cast<size_t>(c)] / l, 0x1p-10 * std::fabs(in.v[static_cast<size_t>(c)]) + 1e-6);
  EXPECT_LT(std::sqrt(err_scaled), std::sqrt(err_unscaled) / 4);
  EXPECT_NEAR(a.lse[0], truth.lse[0], 1e-5);
  EXPECT_NEAR(b.lse[0], truth.lse[0], 1e-5);  // ℓ is summed before rounding either way
}

// A finding the replica reproduces, as FlashAttention 3 computes it: the offset is subtracted from
// the scaled max in fp32 (exp2(s·sc − (m·sc − 8))), so once |m·sc| reaches 2^27 (fp32 steps of 16)
// m·sc − 8 is a tie and rounds to m·sc or m·sc − 16: the top P is 1 or 2^16, never 2^8, and 2^16
// is past every fp8 value (e4m3 NaN, e5m2 inf). Only scores near 10^8 get there.
TEST(ReplicaVariants, Fp8MaxOffsetIsLostPastTwoTo27) {
  Problem p = parse_problem("b=1 h=1 sq=1 skv=1 d=16 dtype=e4m3 odtype=bf16");
  Inputs in = make_inputs(p, testing::seed_for(312));
  std::fill(in.q.begin(), in.q.end(), 0.0f);
  std::fill(in.k.begin(), in.k.end(), 0.0f);
  in.q[0] = in.k[0] = 448.0f;  // one score of 448² = 200704
  const std::vector<int64_t> trace{0};
  for (double scale : {1.0, 512.0}) {  // scaled max 2.9e5, then 1.5e8 ≥ 2^27 (log2 units)
    p.scale = scale;
    const ReplicaResult r = replica_attention(p, in, ReplicaConfig{}, trace);
    ASSERT_EQ(r.trace.size(), 1u);
    const float x = static_cast<float>(200704.0f * static_cast<float>(scale) * static_cast<float>(kLog2e));
    if (scale == 1.0) {
      EXPECT_EQ(r.trace[0].l, 256.0f);
      EXPECT_NEAR(r.o[0], in.v[0], std::fabs(in.v[0]) * 0x1p-8);
    } else {
      ASSERT_GE(std::fabs(x), 0x1p27);
      EXPECT_TRUE(r.trace[0].l == 1.0f || r.trace[0].l == 65536.0f) << r.trace[0].l;
      if (r.trace[0].l == 65536.0f) {
        EXPECT_TRUE(std::isnan(r.o[0]));  // e4m3 has no infinity
      }
    }
  }
}

// ---- Identities that change no arithmetic: bitwise. ----

// A KV tile that no row of a q-tile sees, left of a window or right of the diagonal, changes no
// row when visited (every p is exactly 0, every rescale exactly 1): skipping it changes nothing.
TEST(ReplicaVariants, SkippingMaskedTilesChangesNothingOnEitherSide) {
  std::mt19937_64 g(testing::seed_for(303));
  int left_skips = 0;  // cases where some q-tile skips tiles left of its keys
  for (int n = 0; n < 300; ++n) {
    const Problem p = random_variant_problem(g);
    ReplicaConfig on = random_config(g), off = on;
    on.skip_masked_tiles = true;
    off.skip_masked_tiles = false;
    const Dist dist = kAllDists[static_cast<size_t>(n) % std::size(kAllDists)];
    SCOPED_TRACE(describe(p, on, dist));
    const Inputs in = make_inputs(p, g(), dist);
    const ReplicaResult a = replica_attention(p, in, on), b = replica_attention(p, in, off);
    ASSERT_TRUE(same_bits(a.o, b.o));
    ASSERT_TRUE(same_bits(a.lse, b.lse));
    bool left = false;
    for (int64_t bb = 0; bb < p.batch && !left; ++bb)
      for (int64_t r0 = 0; r0 < p.sq(bb) && !left; r0 += on.block_q) {
        int64_t lo = p.skv(bb);
        for (int64_t i = r0; i < std::min(p.sq(bb), r0 + on.block_q); ++i)
          if (const KeyRange r = visible_range(p, bb, i); !r.empty()) lo = std::min(lo, r.lo);
        left = lo >= on.block_kv && lo < p.skv(bb);
      }
    left_skips += left;
  }
  std::printf("%d of 300 cases skipped tiles left of a window\n", left_skips);
  EXPECT_GT(left_skips, 10);
}

// Sequence b of a batch on its own: a batch of one with its lengths (used keys), its rows of q,
// k, v and its side inputs. q-tiles and KV tiles start at the sequence's first row and key in both.
std::pair<Problem, Inputs> sequence_alone(const Problem& p, const Inputs& in, int64_t b) {
  const Sequences seqs(p);
  Problem one = p;
  one.batch = 1;
  one.layout = Layout::thd;
  one.seqlens_q = {p.sq(b)};
  one.seqlens_kv = {p.skv(b)};
  one.seqused_kv.clear();
  one.page_size = 0;
  one.page_order = PageOrder::identity;
  normalize(one);
  Inputs r;
  const auto slice = [](const std::vector<float>& v, int64_t at, int64_t n) {
    return std::vector<float>(v.begin() + at, v.begin() + at + n);
  };
  r.q = slice(in.q, seqs.q_row(b, 0, 0), p.heads_q * p.sq(b) * p.head_dim_qk);
  r.k = slice(in.k, seqs.k_row(b, 0, 0), p.heads_kv * p.skv(b) * p.head_dim_qk);
  r.v = slice(in.v, seqs.v_row(b, 0, 0), p.heads_kv * p.skv(b) * p.head_dim_v);
  r.alibi_slopes = p.alibi_per_batch ? slice(in.alibi_slopes, b * p.heads_q, p.heads_q) : in.alibi_slopes;
  r.sinks = in.sinks;
  for (auto [from, to] : {std::pair{&in.descale_q, &r.descale_q}, {&in.descale_k, &r.descale_k}, {&in.descale_v, &r.descale_v}})
    *to = p.descale == Descale::head ? slice(*from, b * p.heads_kv, p.heads_kv) : *from;
  return {one, r};
}

TEST(ReplicaVariants, EachSequenceOfABatchGetsWhatItGetsAlone) {
  std::mt19937_64 g(testing::seed_for(304));
  int compared = 0;
  for (int n = 0; n < 200; ++n) {
    const Problem p = random_variant_problem(g);
    if (p.batch < 2) continue;
    const ReplicaConfig cfg = random_config(g);
    const Dist dist = kAllDists[static_cast<size_t>(n) % std::size(kAllDists)];
    SCOPED_TRACE(describe(p, cfg, dist));
    const Inputs in = make_inputs(p, g(), dist);
    const ReplicaResult all = replica_attention(p, in, cfg);
    for (int64_t b = 0; b < p.batch; ++b) {
      const auto [one, in1] = sequence_alone(p, in, b);
      SCOPED_TRACE("sequence " + std::to_string(b) + " alone: " + to_string(one));
      const ReplicaResult r = replica_attention(one, in1, cfg);
      const size_t q0 = static_cast<size_t>(all.rows.index(b, 0, 0, p.heads_q)), nr = static_cast<size_t>(p.heads_q * p.sq(b));
      const size_t dv = static_cast<size_t>(p.head_dim_v);
      ASSERT_EQ(r.o.size(), nr * dv);
      ASSERT_EQ(std::memcmp(r.o.data(), all.o.data() + q0 * dv, nr * dv * sizeof(float)), 0);
      ASSERT_EQ(std::memcmp(r.lse.data(), all.lse.data() + q0, nr * sizeof(float)), 0);
      ++compared;
    }
  }
  EXPECT_GT(compared, 100);
}

// The replica reads a paged cache through the logical inputs (the table gathers them): with an
// identity table the result is bitwise that of the same keys in a contiguous cache.
TEST(ReplicaVariants, PagedWithAnIdentityTableIsTheContiguousCache) {
  std::mt19937_64 g(testing::seed_for(305));
  int compared = 0;
  for (int n = 0; n < 600 && compared < 60; ++n) {
    Problem p = random_variant_problem(g);
    if (!p.paged()) continue;
    p.page_order = PageOrder::identity;
    const ReplicaConfig cfg = random_config(g);
    const Dist dist = kAllDists[static_cast<size_t>(n) % std::size(kAllDists)];
    SCOPED_TRACE(describe(p, cfg, dist));
    const Inputs in = make_inputs(p, g(), dist);
    // K and V as a kernel finds them: scattered into the pages, then read back through the table.
    const Storage st(p, in);
    Inputs paged = in;
    for (auto [t, logical] : {std::pair{Tensor::k, &paged.k}, {Tensor::v, &paged.v}}) {
      std::vector<float> cache(static_cast<size_t>(st.elems(t)), NAN);
      st.scatter(t, (t == Tensor::k ? in.k : in.v).data(), cache.data());
      std::fill(logical->begin(), logical->end(), NAN);
      st.gather(t, cache.data(), logical->data());
    }
    Problem flat = p;
    flat.page_size = 0;
    flat.layout = Layout::thd;
    if (flat.seqlens_q.empty()) flat.seqlens_q.assign(static_cast<size_t>(p.batch), p.seq_q);
    normalize(flat);
    Inputs contiguous = in;
    contiguous.block_table.clear();
    contiguous.num_pages = 0;
    const ReplicaResult a = replica_attention(p, paged, cfg), b = replica_attention(flat, contiguous, cfg);
    ASSERT_TRUE(same_bits(a.o, b.o));
    ASSERT_TRUE(same_bits(a.lse, b.lse));
    ++compared;
  }
  EXPECT_GE(compared, 30);
}

TEST(ReplicaVariants, ASinkOfMinusInfinityIsNoSink) {
  std::mt19937_64 g(testing::seed_for(306));
  for (int n = 0; n < 150; ++n) {
    Problem p = random_variant_problem(g);
    p.sinks = true;
    const ReplicaConfig cfg = random_config(g);
    const Dist dist = kAllDists[static_cast<size_t>(n) % std::size(kAllDists)];
    SCOPED_TRACE(describe(p, cfg, dist));
    Inputs in = make_inputs(p, g(), dist);
    std::fill(in.sinks.begin(), in.sinks.end(), -INFINITY);
    Problem none = p;
    none.sinks = false;
    Inputs no_sinks = in;
    no_sinks.sinks.clear();
    const ReplicaResult a = replica_attention(p, in, cfg), b = replica_attention(none, no_sinks, cfg);
    ASSERT_TRUE(same_bits(a.o, b.o));
    ASSERT_TRUE(same_bits(a.lse, b.lse));
  }
}

// ---- Identities up to rounding. ----

// f32 with P in fp32: one tile covering every key and row against any other tiling. They differ
// only in the order of the sums and in one rescale per tile (see expect_close's units).
TEST(ReplicaVariants, AnyTilingIsOneTileUpToSummationOrder) {
  std::mt19937_64 g(testing::seed_for(307));
  double worst = 0;
  for (int n = 0; n < 200; ++n) {
    Problem p = random_variant_problem(g);
    if (is_fp8(p.dtype)) p.out_dtype.reset(), p.descale = Descale::none;
    p.dtype = DType::f32;
    ReplicaConfig tiled = random_config(g);
    tiled.round_p = false;
    tiled.finite_neg_inf = false;
    ReplicaConfig one = tiled;
    one.block_q = one.block_kv = 64;  // past every sequence random_variant_problem draws
    const Dist dist = kAllDists[static_cast<size_t>(n) % std::size(kAllDists)];
    SCOPED_TRACE(describe(p, tiled, dist));
    const Inputs in = make_inputs(p, g(), dist);
    worst = std::max(worst, expect_close(p, in, replica_attention(p, in, one), replica_attention(p, in, tiled), 8, tiled.block_kv));
    if (HasFailure()) return;
  }
  std::printf("worst difference %.3f units\n", worst);
}

// c·tanh(s/c) → s as c → ∞: with c = 2^60 the tanh is the identity in fp32, and the capped path
// differs from the uncapped one only in how the scale is rounded and applied.
TEST(ReplicaVariants, AHugeSoftcapIsNoCapUpToRounding) {
  std::mt19937_64 g(testing::seed_for(308));
  double worst = 0;
  for (int n = 0; n < 200; ++n) {
    Problem p = random_variant_problem(g);
    p.softcap = 0;
    Problem capped = p;
    capped.softcap = 0x1p60;
    ReplicaConfig cfg = random_config(g);
    cfg.round_p = false;  // a re-rounded exponent may move P across a rounding boundary of its dtype
    const Dist dist = kAllDists[static_cast<size_t>(n) % std::size(kAllDists)];
    if (dist == Dist::large) cfg.finite_neg_inf = false;
    SCOPED_TRACE(describe(capped, cfg, dist));
    const Inputs in = make_inputs(p, g(), dist);
    worst = std::max(worst, expect_close(p, in, replica_attention(p, in, cfg), replica_attention(capped, in, cfg), 8, cfg.block_kv));
    if (HasFailure()) return;
  }
  std::printf("worst difference %.3f units\n", worst);
}

// FlashAttention 2's causal kernel adds slope·j instead of the ALiBi bias (AlibiLse::key_offset):
// for every visible key that is the bias plus slope·(i + d), a constant per row, so O is the same
// and the LSE is shifted by alibi_lse_shift().
TEST(ReplicaVariants, KeyOffsetAlibiShiftsOnlyTheLse) {
  std::mt19937_64 g(testing::seed_for(309));
  double worst = 0;
  for (int n = 0; n < 150; ++n) {
    Problem p = random_variant_problem(g);
    if (p.causal == Causal::none) p.causal = Causal::bottom_right;
    if (p.alibi == Alibi::none) p.alibi = Alibi::symmetric;
    p.sinks = false;  // a sink is not raised by slope·(i + d): its share, and so O, would change
    ReplicaConfig exact = random_config(g);
    exact.round_p = false;
    exact.finite_neg_inf = false;
    ReplicaConfig fa2 = exact;
    fa2.alibi_lse = AlibiLse::key_offset;
    const Dist dist = kAllDists[static_cast<size_t>(n) % std::size(kAllDists)];
    SCOPED_TRACE(describe(p, fa2, dist));
    const Inputs in = make_inputs(p, g(), dist);
    worst = std::max(worst, expect_close(p, in, replica_attention(p, in, exact), replica_attention(p, in, fa2), 8, exact.block_kv, true));
    if (HasFailure()) return;
  }
  std::printf("worst difference %.3f units\n", worst);
}

// ---- Row subsets and traces by (sequence, head, row). ----

// A sample of rows per sequence gets what the full run gives those rows (up to the GEMM's
// summation order, Replica.ARowSubsetGetsWhatTheFullRunGivesThoseRows), on every variant.
TEST(ReplicaVariants, ARowSubsetGetsWhatTheFullRunGivesThoseRows) {
  std::mt19937_64 g(testing::seed_for(310));
  double worst = 0;
  for (int n = 0; n < 200; ++n) {
    const Problem p = random_variant_problem(g);
    ReplicaConfig cfg = random_config(g);
    const Dist dist = kAllDists[static_cast<size_t>(n) % std::size(kAllDists)];
    if (dist == Dist::large) cfg.finite_neg_inf = false;
    SCOPED_TRACE(describe(p, cfg, dist));
    const Inputs in = make_inputs(p, g(), dist);
    std::vector<std::vector<int64_t>> picked(static_cast<size_t>(p.batch));
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t i = 0; i < p.sq(b); ++i)
        if (pick(g, 0, 2) == 0) picked[static_cast<size_t>(b)].push_back(i);
    const RowSet rows = RowSet::per_sequence(p, picked);
    const ReplicaResult full = replica_attention(p, in, cfg), sub = replica_attention(p, in, cfg, {}, rows);
    ASSERT_EQ(sub.rows, rows);
    // The full run's values at the sampled rows, in the subset's layout.
    ReplicaResult at_rows = sub;
    const size_t dv = static_cast<size_t>(p.head_dim_v);
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t h = 0; h < p.heads_q; ++h)
        for (int64_t r = 0; r < rows.count(b); ++r) {
          const size_t to = static_cast<size_t>(rows.index(b, h, r, p.heads_q));
          const size_t from = static_cast<size_t>(full.rows.index(b, h, rows.row(b, r), p.heads_q));
          std::copy_n(full.o.begin() + static_cast<std::ptrdiff_t>(from * dv), dv, at_rows.o.begin() + static_cast<std::ptrdiff_t>(to * dv));
          at_rows.lse[to] = full.lse[from];
        }
    const double u_p = cfg.round_p && p.dtype != DType::f32 ? unit_roundoff(p.dtype) : 0.0;
    worst = std::max(worst, expect_close(p, in, at_rows, sub, 4, cfg.block_kv, false, u_p));
    if (HasFailure()) return;
  }
  std::printf("worst difference %.3f units\n", worst);
}

TEST(ReplicaVariants, TracesNameTheSequenceAndEndAtTheResult) {
  const Problem p = parse_problem("b=3 hq=2 hkv=1 sq=5,0,37 skv=9,4,50 d=16 dtype=f32 causal=bottom_right window=8,2");
  const Inputs in = make_inputs(p, testing::seed_for(311));
  ReplicaConfig cfg{.block_q = 8, .block_kv = 4, .round_p = false, .finite_neg_inf = false};
  const std::vector<int64_t> trace{0, 4, 20, 36};
  const ReplicaResult r = replica_attention(p, in, cfg, trace);
  std::map<std::tuple<int64_t, int64_t, int64_t>, std::vector<const TraceEntry*>> by_row;
  for (const TraceEntry& t : r.trace) by_row[{t.batch, t.head, t.row}].push_back(&t);
  // Sequence 0 has rows 0 and 4, sequence 1 none, sequence 2 all four; both heads each.
  EXPECT_EQ(by_row.size(), 2u * (2 + 0 + 4));
  for (const auto& [key, entries] : by_row) {
    const auto [b, h, i] = key;
    ASSERT_LT(i, p.sq(b));
    // The tiles of the row's q-tile: from the first key any of its rows sees to the last.
    const int64_t t0 = i / cfg.block_q * cfg.block_q, t1 = std::min(p.sq(b), t0 + cfg.block_q);
    int64_t lo = p.skv(b), hi = 0;
    for (int64_t x = t0; x < t1; ++x)
      if (const KeyRange kr = visible_range(p, b, x); !kr.empty()) lo = std::min(lo, kr.lo), hi = std::max(hi, kr.hi);
    ASSERT_EQ(static_cast<int64_t>(entries.size()), (hi + cfg.block_kv - 1) / cfg.block_kv - lo / cfg.block_kv) << b << " " << i;
    EXPECT_EQ(entries.front()->kv_tile, lo / cfg.block_kv);
    const TraceEntry& last = *entries.back();
    const size_t at = static_cast<size_t>(r.rows.index(b, h, i, p.heads_q));
    for (int64_t c = 0; c < p.head_dim_v; ++c)
      EXPECT_NEAR(last.o[static_cast<size_t>(c)] / last.l, r.o[at * static_cast<size_t>(p.head_dim_v) + static_cast<size_t>(c)], 1e-6);
  }
}

}  // namespace
}  // namespace flashcheck
