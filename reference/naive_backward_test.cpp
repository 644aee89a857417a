// The fp64 backward oracle against its definition: a textbook statement of the gradients written
// from the formulas in reference/naive_backward.h with none of the oracle's code — its own mask
// predicate and index arithmetic, loops over i and j, long double throughout.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "reference/backward_test_util.h"
#include "reference/naive_backward.h"
#include "testing/test_seed.h"

namespace flashcheck {
namespace {

using LD = long double;
constexpr LD kInfL = std::numeric_limits<LD>::infinity();
constexpr double kU = 0x1p-53;  // fp64 unit roundoff

bool textbook_visible(const Problem& p, int64_t sq, int64_t skv, int64_t i, int64_t j) {
  if (j < 0 || j >= skv) return false;
  const int64_t d = p.causal == Causal::top_left ? 0 : skv - sq;
  bool ok = true;
  if (p.causal != Causal::none) ok = ok && j <= i + d;
  if (p.window.left >= 0) ok = ok && j >= i + d - p.window.left;
  if (p.window.right >= 0) ok = ok && j <= i + d + p.window.right;
  return ok;
}

// Gradients in the logical layouts, and beside each the scale of its rounding error (`err_*`):
// every term's size times the relative error the fp64 oracle may make on it (see row_error).
struct Textbook {
  std::vector<LD> dq, dk, dv, dsinks, err_q, err_k, err_v, err_sinks;
};

// What the fp64 oracle may get wrong, relative, in row i's probabilities: the scores' rounding
// (a Dqk-term dot product, the scale, the cap's tanh — amplified 2/c in its derivative —, the bias,
// the max and sum), the exponentials (a few ulp), and the n-term sums of D and the GEMMs.
LD row_error(const Problem& p, LD max_absdot, LD max_t, LD sink, int64_t n) {
  LD score = (p.head_dim_qk + 4) * p.softmax_scale() * max_absdot;
  if (p.softcap > 0) score *= 1 + 2 / p.softcap;
  const LD s = std::isinf(sink) ? 0 : std::fabs(sink);
  return kU * (score + 4 * max_t + 4 * s + 2 * static_cast<LD>(n + p.head_dim_v + 8));
}

Textbook textbook_backward(const Problem& p, const Inputs& in, const std::vector<float>& dout) {
  const int64_t Hq = p.heads_q, Hkv = p.heads_kv, Dqk = p.head_dim_qk, Dv = p.head_dim_v;
  Textbook tb;
  tb.dq.assign(in.q.size(), 0), tb.err_q.assign(in.q.size(), 0);
  tb.dk.assign(in.k.size(), 0), tb.err_k.assign(in.k.size(), 0);
  tb.dv.assign(in.v.size(), 0), tb.err_v.assign(in.v.size(), 0);
  tb.dsinks.assign(p.sinks ? static_cast<size_t>(Hq) : 0, 0), tb.err_sinks.assign(tb.dsinks.size(), 0);
  const LD scale = p.softmax_scale();
  int64_t q_before = 0, kv_before = 0;  // queries (used keys) of the sequences before b
  for (int64_t b = 0; b < p.batch; q_before += p.sq(b), kv_before += p.skv(b), ++b) {
    const int64_t sq = p.sq(b), skv = p.skv(b);
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t hk = h / (Hq / Hkv);
      auto desc = [&](const std::vector<float>& d) -> LD {
        if (d.empty()) return 1;
        return d.size() == 1 ? d[0] : d[static_cast<size_t>(b * Hkv + hk)];
      };
      const LD dsq = desc(in.descale_q), dsk = desc(in.descale_k), dsv = desc(in.descale_v);
      const LD sink = p.sinks ? in.sinks[static_cast<size_t>(h)] : -kInfL;
      LD slope = 0;
      if (p.alibi != Alibi::none) slope = in.alibi_slopes[static_cast<size_t>(p.alibi_per_batch ? b * Hq + h : h)];
      for (int64_t i = 0; i < sq; ++i) {
        const size_t qi = static_cast<size_t>((q_before * Hq + h * sq + i) * Dqk);
        const size_t oi = static_cast<size_t>((q_before * Hq + h * sq + i) * Dv);
        auto Q = [&](int64_t c) { return in.q[qi + static_cast<size_t>(c)] * dsq; };
        auto dO = [&](int64_t c) -> LD { return dout[oi + static_cast<size_t>(c)]; };
        auto kat = [&](int64_t j) { return static_cast<size_t>((kv_before * Hkv + hk * skv + j) * Dqk); };
        auto vat = [&](int64_t j) { return static_cast<size_t>((kv_before * Hkv + hk * skv + j) * Dv); };
        std::vector<int64_t> keys;
        std::vector<LD> t, dcap;
        LD max_absdot = 0, max_t = 0;
        for (int64_t j = 0; j < skv; ++j) {
          if (!textbook_visible(p, sq, skv, i, j)) continue;
          LD dot = 0, absdot = 0;
          for (int64_t c = 0; c < Dqk; ++c) {
            dot += Q(c) * (in.k[kat(j) + static_cast<size_t>(c)] * dsk);
            absdot += std::fabs(Q(c) * (in.k[kat(j) + static_cast<size_t>(c)] * dsk));
          }
          const LD s = dot * scale;
          LD x = s, dx = 1;
          if (p.softcap > 0) {
            const LD th = std::tanh(s / p.softcap);
            x = p.softcap * th;
            dx = 1 - th * th;  // d/ds c·tanh(s/c)
          }
          if (p.alibi == Alibi::symmetric) x += -slope * std::fabs(static_cast<LD>(i + (p.causal == Causal::top_left ? 0 : skv - sq) - j));
          if (p.alibi == Alibi::signed_) x += slope * static_cast<LD>(j - i);
          keys.push_back(j), t.push_back(x), dcap.push_back(dx);
          if (std::isfinite(absdot)) max_absdot = std::max(max_absdot, absdot);
          if (std::isfinite(x)) max_t = std::max(max_t, std::fabs(x));
        }
        if (keys.empty()) continue;  // sees no key: contributes nothing
        const size_t n = keys.size();
        // The softmax, undefined (NaN) where the forward's is: a NaN or +inf score, all −inf.
        LD m = -kInfL;
        bool undefined = false;
        for (LD x : t) undefined |= std::isnan(x) || x == kInfL, m = std::isnan(x) ? m : std::max(m, x);
        undefined |= m == -kInfL;
        std::vector<LD> P(n, NAN);
        LD p_sink = NAN;
        if (!undefined) {
          m = std::max(m, sink);
          LD l = std::isinf(sink) ? 0 : std::exp(sink - m);
          for (LD x : t) l += std::exp(x - m);
          for (size_t a = 0; a < n; ++a) P[a] = std::exp(t[a] - m) / l;
          p_sink = std::isinf(sink) ? 0 : std::exp(sink - m) / l;
        }
        std::vector<LD> O(static_cast<size_t>(Dv), 0), G(n, 0), dP(n, 0);
        for (size_t a = 0; a < n; ++a)
          for (int64_t c = 0; c < Dv; ++c) {
            const LD v = in.v[vat(keys[a]) + static_cast<size_t>(c)] * dsv;
            O[static_cast<size_t>(c)] += P[a] * v;
            dP[a] += dO(c) * v;
            G[a] += std::fabs(dO(c) * v);
          }
        LD D = 0, A = 0;
        for (int64_t c = 0; c < Dv; ++c) D += dO(c) * O[static_cast<size_t>(c)];
        for (size_t a = 0; a < n; ++a) A += P[a] * G[a];
        const LD rho = row_error(p, max_absdot, max_t, sink, static_cast<int64_t>(n));
        for (size_t a = 0; a < n; ++a) {
          const LD dS = P[a] * (dP[a] - D) * dcap[a];
          // Its error: rho relative on P, D, dP and the cap's derivative, plus the textbook's own
          // 1 − tanh², accurate to a few long double ulp absolute (it cancels where tanh saturates).
          const LD e_dS = P[a] * (G[a] + A) * (rho * std::fabs(dcap[a]) + 0x1p-60L);
          for (int64_t c = 0; c < Dqk; ++c) {
            const LD k = in.k[kat(keys[a]) + static_cast<size_t>(c)] * dsk;
            tb.dq[qi + static_cast<size_t>(c)] += scale * dS * k;
            tb.err_q[qi + static_cast<size_t>(c)] += scale * e_dS * std::fabs(k);
            tb.dk[kat(keys[a]) + static_cast<size_t>(c)] += scale * dS * Q(c);
            tb.err_k[kat(keys[a]) + static_cast<size_t>(c)] += scale * e_dS * std::fabs(Q(c));
          }
          for (int64_t c = 0; c < Dv; ++c) {
            tb.dv[vat(keys[a]) + static_cast<size_t>(c)] += P[a] * dO(c);
            tb.err_v[vat(keys[a]) + static_cast<size_t>(c)] += rho * P[a] * std::fabs(dO(c));
          }
        }
        if (p.sinks && !std::isinf(sink)) {
          tb.dsinks[static_cast<size_t>(h)] += -p_sink * D;
          tb.err_sinks[static_cast<size_t>(h)] += rho * p_sink * A;
        }
      }
    }
  }
  return tb;
}

// The error scale is a bound with its constants rounded up: over the 300 problems below the
// largest |oracle − textbook| seen was 0.11 of it (0.07 on dQ, 0.08 on dK, 0.11 on dV, 0.03 on the
// sinks; seed 5273529909005278133). TheTextbookToleranceIsTight shows it is not vacuous.
constexpr LD kSlack = 1;

template <typename Vec>
void expect_close(const char* name, const Vec& got, const std::vector<LD>& want, const std::vector<LD>& err, LD slack = kSlack) {
  ASSERT_EQ(got.size(), want.size()) << name;
  for (size_t x = 0; x < want.size(); ++x) {
    const double g = got[x];
    if (std::isnan(want[x]) || std::isnan(err[x])) {
      ASSERT_TRUE(std::isnan(g)) << name << "[" << x << "] = " << g << ", the textbook's is NaN";
      continue;
    }
    ASSERT_FALSE(std::isnan(g)) << name << "[" << x << "] is NaN, the textbook's " << static_cast<double>(want[x]);
    ASSERT_LE(std::fabs(g - want[x]), slack * err[x] + 1e-300L)
        << name << "[" << x << "] = " << g << ", textbook " << static_cast<double>(want[x]) << ", error scale "
        << static_cast<double>(err[x]);
  }
}

void expect_matches_textbook(const Problem& p, const Inputs& in, const std::vector<float>& dout, LD slack = kSlack) {
  const BackwardResult r = naive_attention_backward(p, in, dout);
  const Textbook tb = textbook_backward(p, in, dout);
  expect_close("dq", r.dq, tb.dq, tb.err_q, slack);
  expect_close("dk", r.dk, tb.dk, tb.err_k, slack);
  expect_close("dv", r.dv, tb.dv, tb.err_v, slack);
  expect_close("dsinks", r.dsinks, tb.dsinks, tb.err_sinks, slack);
}

TEST(Backward, OracleMatchesTheTextbookOnEveryVariant) {
  std::mt19937_64 g(testing::seed_for(301));
  for (int n = 0; n < 300; ++n) {
    const Problem p = random_variant_problem(g);
    const Dist dist = kAllDists[static_cast<size_t>(n) % std::size(kAllDists)];
    const uint64_t seed = g();
    SCOPED_TRACE(describe(p, seed) + " dist=" + std::string(to_string(dist)));
    const Inputs in = make_inputs(p, seed, dist);
    expect_matches_textbook(p, in, random_dout(p, seed));
    if (HasFatalFailure()) return;
  }
}

// The largest |oracle − textbook| of a problem, as a fraction of its error scale (elements whose
// scale is below the smallest normal double excepted: the 1e-300 floor covers those).
template <typename Vec>
LD worst_ratio(const Vec& got, const std::vector<LD>& want, const std::vector<LD>& err) {
  LD w = 0;
  for (size_t x = 0; x < want.size(); ++x)
    if (err[x] > 1e-290L && std::isfinite(err[x])) w = std::max(w, std::fabs(got[x] - want[x]) / err[x]);
  return w;
}

// The error scale is not vacuous: on ordinary problems the oracle's error reaches a hundredth of
// it (so a bound 100× tighter would fail them).
TEST(Backward, TheTextbookToleranceIsTight) {
  std::mt19937_64 g(testing::seed_for(302));
  int reached = 0;
  for (int n = 0; n < 20; ++n) {
    const Problem p = random_variant_problem(g);
    const uint64_t seed = g();
    const Inputs in = make_inputs(p, seed);
    const std::vector<float> dout = random_dout(p, seed);
    const BackwardResult r = naive_attention_backward(p, in, dout);
    const Textbook tb = textbook_backward(p, in, dout);
    const LD w = std::max({worst_ratio(r.dq, tb.dq, tb.err_q), worst_ratio(r.dk, tb.dk, tb.err_k), worst_ratio(r.dv, tb.dv, tb.err_v)});
    reached += w > 0.01L;
  }
  EXPECT_GE(reached, 5);
}

// Several row blocks, key blocks and row steps per head, windows that cut them, every modifier:
// the blocking of both passes must not change which pairs reach which gradient.
TEST(Backward, OracleMatchesTheTextbookAcrossBlocks) {
  uint64_t seed = testing::seed_for(303);
  for (const char* line : {"b=1 hq=2 hkv=1 sq=600 skv=530 d=16 causal=bottom_right dtype=f32",
                           "b=1 hq=3 hkv=1 sq=530 skv=600 dqk=8 dv=24 causal=top_left softcap=4 sinks=1 dtype=bf16",
                           "b=1 h=1 sq=700 skv=700 d=8 window=50,10 alibi=symmetric dtype=f16",
                           "b=2 hq=2 hkv=1 sq=300,20 skv=280,600 d=8 causal=bottom_right window=100,0 sinks=1 alibi=signed",
                           "b=2 h=2 sq=260 skv=520,300 d=8 page=7 pages=shared softcap=2 dtype=e4m3 descale=head"}) {
    const Problem p = parse_problem(line);
    SCOPED_TRACE(describe(p, seed));
    const Inputs in = make_inputs(p, seed);
    expect_matches_textbook(p, in, random_dout(p, seed));
    ++seed;
  }
}

// NaN and Inf planted in q, k, v and dO: each reaches the gradients of exactly the pairs that see
// it (the textbook's loops run over visible pairs only), and a row that sees nothing keeps even a
// NaN dO to itself.
TEST(Backward, NonFiniteInputsReachExactlyWhatTheyTouch) {
  for (const char* cap : {"", " softcap=5"}) {
    const Problem p = parse_problem(std::string("b=1 hq=2 hkv=1 sq=45 skv=40 d=8 causal=bottom_right window=6,0 sinks=1 dtype=f32") + cap);
    SCOPED_TRACE(to_string(p));
    Inputs in = make_inputs(p, testing::seed_for(304));
    std::vector<float> dout = random_dout(p, testing::seed_for(304));
    const int64_t D = p.head_dim_qk;
    in.q[static_cast<size_t>((0 * p.seq_q + 12) * D + 3)] = NAN;           // head 0, row 12
    in.k[static_cast<size_t>(20 * D + 1)] = INFINITY;                      // key 20
    in.v[static_cast<size_t>(33 * D + 5)] = NAN;                           // key 33
    dout[static_cast<size_t>((1 * p.seq_q + 30) * D + 2)] = NAN;           // head 1, row 30
    dout[static_cast<size_t>((1 * p.seq_q + 2) * D + 2)] = NAN;            // head 1, row 2: sees no key
    in.sinks[0] = 1.5f, in.sinks[1] = -INFINITY;
    expect_matches_textbook(p, in, dout);
    const BackwardResult r = naive_attention_backward(p, in, dout);
    // Keys 8..13 are seen by clean rows only (13..24) and keep finite gradients; the empty row's
    // dQ is exactly 0.
    EXPECT_TRUE(std::isfinite(r.dk[static_cast<size_t>(10 * D)]));
    EXPECT_TRUE(std::isnan(r.dk[static_cast<size_t>(5 * D)]));  // seen by row 12 of head 0
    for (int64_t c = 0; c < D; ++c) EXPECT_EQ(r.dq[static_cast<size_t>((1 * p.seq_q + 2) * D + c)], 0.0);
    EXPECT_EQ(r.dsinks[1], 0.0);  // a −inf sink has no gradient, NaN rows or not
  }
}

TEST(Backward, BadSizesAndSideInputsAreNamed) {
  const Problem p = parse_problem("b=1 h=2 sq=4 skv=5 d=8 sinks=1");
  const Inputs good = make_inputs(p, 1);
  const std::vector<float> dout = random_dout(p, 1);
  auto refused = [&](const Inputs& in, std::span<const float> g, const std::string& field) {
    try {
      naive_attention_backward(p, in, g);
      ADD_FAILURE() << "accepted a bad " << field;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  refused(good, std::span<const float>(dout).first(dout.size() - 1), "dO");
  Inputs in = good;
  in.k.pop_back();
  refused(in, dout, "k");
  in = good;
  in.sinks[0] = NAN;
  refused(in, dout, "sinks");
}

}  // namespace
}  // namespace flashcheck
