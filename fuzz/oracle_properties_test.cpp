// Properties that prove the two CPU oracles right: the replica agrees with the fp64 oracle within a
// bound derived from its numerics, and the fp64 oracle obeys identities any true attention obeys.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "fuzz/generators.h"
#include "reference/mask.h"
#include "reference/naive.h"
#include "reference/replica.h"
#include "fuzz/replica_bound.h"

namespace flashcheck {

// Found by RapidCheck through argument-dependent lookup: must live in ReplicaConfig's namespace.
void showValue(const ReplicaConfig& c, std::ostream& os) {
  os << "Br=" << c.block_q << " Bc=" << c.block_kv << (c.use_exp2 ? " exp2" : " exp")
     << (c.round_p ? " P-rounded" : " P-fp32") << (c.finite_neg_inf ? " fill=-2^30" : " fill=-inf");
}

namespace {


rc::Gen<ReplicaConfig> gen_replica_config() {
  return rc::gen::exec([] {
    ReplicaConfig c;
    c.block_q = *rc::gen::elementOf(std::vector<int64_t>{1, 16, 32, 64, 128});
    c.block_kv = *rc::gen::elementOf(std::vector<int64_t>{1, 16, 32, 64, 128});
    c.use_exp2 = *rc::gen::arbitrary<bool>();
    c.round_p = *rc::gen::arbitrary<bool>();
    c.finite_neg_inf = *rc::gen::arbitrary<bool>();
    return c;
  });
}

// The bound and its derivation: fuzz/replica_bound.h.
RowBound replica_bound(const Problem& p, const Inputs& in, const ReplicaConfig& c, int64_t b, int64_t h, int64_t i,
                       double lse_true) {
  return fp32_kernel_row_bound(p, in, b, h, i, c.round_p ? unit_roundoff(p.dtype) : 0.0, c.block_kv, lse_true);
}

// The most negative raw score any visible key reaches (for the finite-fill precondition).
double min_raw_score(const Problem& p, const Inputs& in) {
  double lo = 0;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_q; ++h)
      for (int64_t i = 0; i < p.seq_q; ++i)
        for (int64_t j = 0; j < visible_keys(p, i); ++j) {
          double t = 0;
          for (int64_t x = 0; x < p.head_dim_qk; ++x)
            t += static_cast<double>(in.q[((b * p.heads_q + h) * p.seq_q + i) * p.head_dim_qk + x]) *
                 in.k[((b * p.heads_kv + p.kv_head(h)) * p.seq_kv + j) * p.head_dim_qk + x];
          lo = std::min(lo, t);
        }
  return lo;
}

RC_GTEST_PROP(Replica, AgreesWithNaiveWithinTheDerivedBound, ()) {
  const Case c = *gen_case();
  const ReplicaConfig cfg = *gen_replica_config();
  const Problem& p = c.problem;
  const Inputs in = make_inputs(p, c.seed, c.dist);
  // The -2^30 fill is a stand-in for -inf only while every raw score stays above it; below it the
  // kernel (and so the replica) loses the row, which Replica.FiniteNegInfFill... pins down.
  if (cfg.finite_neg_inf) RC_PRE(min_raw_score(p, in) > -0x1p30);
  const OracleResult truth = naive_attention(p, in);
  const ReplicaResult rep = replica_attention(p, in, cfg);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_q; ++h)
      for (int64_t i = 0; i < p.seq_q; ++i) {
        const size_t row = static_cast<size_t>((b * p.heads_q + h) * p.seq_q + i);
        if (visible_keys(p, i) == 0) {
          RC_ASSERT(rep.lse[row] == -INFINITY);
          for (int64_t x = 0; x < p.head_dim_v; ++x) RC_ASSERT(rep.o[row * p.head_dim_v + x] == 0.0f);
          continue;
        }
        const RowBound bound = replica_bound(p, in, cfg, b, h, i, truth.lse[row]);
        const double lse_err = std::fabs(rep.lse[row] - truth.lse[row]);
        RC_ASSERT(lse_err <= bound.lse);
        for (int64_t x = 0; x < p.head_dim_v; ++x) {
          const double t = truth.o[row * p.head_dim_v + x];
          const double err = std::fabs(rep.o[row * p.head_dim_v + x] - t);
          if (!(err <= bound.o + 1.01 * unit_roundoff(p.dtype) * std::fabs(t))) {
            RC_FAIL("row " + std::to_string(i) + " col " + std::to_string(x) + ": replica " +
                    std::to_string(rep.o[row * p.head_dim_v + x]) + " vs naive " + std::to_string(t) +
                    ", error " + std::to_string(err) + " > bound " + std::to_string(bound.o));
          }
        }
      }
}

// ---- Metamorphic properties of the fp64 oracle: no second oracle needed. ----

ProblemSpace small_space(bool causal_allowed) {
  ProblemSpace s;
  s.max_seq = 130;
  s.max_work = 4e6;
  if (!causal_allowed) s.causals = {Causal::none};
  return s;
}

Inputs draw(const Case& c) { return make_inputs(c.problem, c.seed, c.dist); }
double tol(double ref) { return 1e-11 * (1.0 + std::fabs(ref)); }
double vmax(const Inputs& in) {
  double m = 0;
  for (float x : in.v) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

// Builds K/V with seq_kv' from per-(b, hkv) row lists drawn from the original rows.
Inputs remap_kv(const Problem& p, const Inputs& in, const std::vector<int64_t>& src, Problem& out) {
  out = p;
  out.seq_kv = static_cast<int64_t>(src.size());
  Inputs r;
  r.q = in.q;
  for (int64_t bh = 0; bh < p.batch * p.heads_kv; ++bh)
    for (int64_t j : src) {
      r.k.insert(r.k.end(), in.k.begin() + (bh * p.seq_kv + j) * p.head_dim_qk,
                 in.k.begin() + (bh * p.seq_kv + j + 1) * p.head_dim_qk);
      r.v.insert(r.v.end(), in.v.begin() + (bh * p.seq_kv + j) * p.head_dim_v,
                 in.v.begin() + (bh * p.seq_kv + j + 1) * p.head_dim_v);
    }
  return r;
}

RC_GTEST_PROP(NaiveOracle, DuplicatingKeysAndValuesKeepsOAndRaisesLseByLn2, ()) {
  const Case c = *gen_case(small_space(false));
  const Inputs in = draw(c);
  std::vector<int64_t> src(static_cast<size_t>(2 * c.problem.seq_kv));
  for (size_t j = 0; j < src.size(); ++j) src[j] = static_cast<int64_t>(j) % c.problem.seq_kv;
  Problem p2;
  const Inputs in2 = remap_kv(c.problem, in, src, p2);
  const OracleResult a = naive_attention(c.problem, in), b = naive_attention(p2, in2);
  const double vm = vmax(in);
  for (size_t i = 0; i < a.o.size(); ++i) RC_ASSERT(std::fabs(a.o[i] - b.o[i]) <= 1e-11 * vm);
  for (size_t i = 0; i < a.lse.size(); ++i) RC_ASSERT(std::fabs(b.lse[i] - (a.lse[i] + std::log(2.0))) <= tol(a.lse[i]));
}

RC_GTEST_PROP(NaiveOracle, SplittingKeysAndMergingByLseGivesTheWhole, ()) {
  const Case c = *gen_case(small_space(false));
  const Problem& p = c.problem;
  RC_PRE(p.seq_kv >= 2);
  const int64_t cut = *rc::gen::inRange<int64_t>(1, p.seq_kv);
  const Inputs in = draw(c);
  std::vector<int64_t> lo(static_cast<size_t>(cut)), hi(static_cast<size_t>(p.seq_kv - cut));
  std::iota(lo.begin(), lo.end(), 0);
  std::iota(hi.begin(), hi.end(), cut);
  Problem p1, p2;
  const Inputs in1 = remap_kv(p, in, lo, p1), in2 = remap_kv(p, in, hi, p2);
  const OracleResult whole = naive_attention(p, in), a = naive_attention(p1, in1), b = naive_attention(p2, in2);
  const double vm = vmax(in);
  for (size_t r = 0; r < whole.lse.size(); ++r) {
    const double m = std::max(a.lse[r], b.lse[r]);
    const double wa = std::exp(a.lse[r] - m), wb = std::exp(b.lse[r] - m);
    RC_ASSERT(std::fabs(m + std::log(wa + wb) - whole.lse[r]) <= tol(whole.lse[r]));
    for (int64_t x = 0; x < p.head_dim_v; ++x) {
      const size_t e = r * static_cast<size_t>(p.head_dim_v) + static_cast<size_t>(x);
      RC_ASSERT(std::fabs((wa * a.o[e] + wb * b.o[e]) / (wa + wb) - whole.o[e]) <= 1e-11 * vm);
    }
  }
}

RC_GTEST_PROP(NaiveOracle, PermutingKeysAndValuesChangesNothingWithoutACausalMask, ()) {
  const Case c = *gen_case(small_space(false));
  const Inputs in = draw(c);
  std::vector<int64_t> perm(static_cast<size_t>(c.problem.seq_kv));
  std::iota(perm.begin(), perm.end(), 0);
  const auto shuffled = *rc::gen::container<std::vector<int64_t>>(perm.size(), rc::gen::arbitrary<int64_t>());
  std::sort(perm.begin(), perm.end(), [&](int64_t x, int64_t y) {
    return std::pair{shuffled[static_cast<size_t>(x)], x} < std::pair{shuffled[static_cast<size_t>(y)], y};
  });
  Problem p2;
  const Inputs in2 = remap_kv(c.problem, in, perm, p2);
  const OracleResult a = naive_attention(c.problem, in), b = naive_attention(p2, in2);
  const double vm = vmax(in);
  for (size_t i = 0; i < a.o.size(); ++i) RC_ASSERT(std::fabs(a.o[i] - b.o[i]) <= 1e-11 * vm);
  for (size_t i = 0; i < a.lse.size(); ++i) RC_ASSERT(std::fabs(a.lse[i] - b.lse[i]) <= tol(a.lse[i]));
}

RC_GTEST_PROP(NaiveOracle, OutputIsLinearInValues, ()) {
  Case c = *gen_case(small_space(true));
  c.problem.dtype = DType::f32;  // 2·v1 - v2/2 is then exact up to one fp32 rounding
  const Inputs in1 = draw(c);
  Inputs in2 = make_inputs(c.problem, c.seed + 1, Dist::normal), mix = in1;
  for (size_t i = 0; i < mix.v.size(); ++i) mix.v[i] = 2.0f * in1.v[i] - 0.5f * in2.v[i];
  in2.q = in1.q;
  in2.k = in1.k;
  const OracleResult o1 = naive_attention(c.problem, in1), o2 = naive_attention(c.problem, in2),
                     om = naive_attention(c.problem, mix);
  const double vm = 2 * vmax(in1) + 0.5 * vmax(in2);
  for (size_t i = 0; i < om.o.size(); ++i) RC_ASSERT(std::fabs(om.o[i] - (2 * o1.o[i] - 0.5 * o2.o[i])) <= 1e-6 * vm);
}

RC_GTEST_PROP(NaiveOracle, ASingleVisibleKeyGivesItsValueAndScore, ()) {
  Case c = *gen_case(small_space(true));
  Problem& p = c.problem;
  p.causal = Causal::top_left;  // row 0 sees key 0 alone
  const Inputs in = draw(c);
  const OracleResult r = naive_attention(p, in);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_q; ++h) {
      const size_t row = static_cast<size_t>((b * p.heads_q + h) * p.seq_q);
      const int64_t kv = b * p.heads_kv + p.kv_head(h);
      double score = 0;
      for (int64_t x = 0; x < p.head_dim_qk; ++x)
        score += static_cast<double>(in.q[row * p.head_dim_qk + x]) * in.k[kv * p.seq_kv * p.head_dim_qk + x];
      score *= p.softmax_scale();
      RC_ASSERT(std::fabs(r.lse[row] - score) <= tol(score));
      for (int64_t x = 0; x < p.head_dim_v; ++x)
        RC_ASSERT(r.o[row * p.head_dim_v + x] == static_cast<double>(in.v[kv * p.seq_kv * p.head_dim_v + x]));
    }
}

RC_GTEST_PROP(NaiveOracle, GroupedQueryAttentionEqualsRepeatedKvHeads, ()) {
  Case c = *gen_case(small_space(true));
  Problem& p = c.problem;
  if (p.group() == 1) p.heads_q *= *rc::gen::inRange<int64_t>(2, 5);
  const Inputs in = draw(c);
  Problem mha = p;
  mha.heads_kv = p.heads_q;
  Inputs rep{in.q, {}, {}};
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_q; ++h) {
      const int64_t kv = b * p.heads_kv + p.kv_head(h);
      rep.k.insert(rep.k.end(), in.k.begin() + kv * p.seq_kv * p.head_dim_qk, in.k.begin() + (kv + 1) * p.seq_kv * p.head_dim_qk);
      rep.v.insert(rep.v.end(), in.v.begin() + kv * p.seq_kv * p.head_dim_v, in.v.begin() + (kv + 1) * p.seq_kv * p.head_dim_v);
    }
  const OracleResult a = naive_attention(p, in), b = naive_attention(mha, rep);
  // Not bitwise: the oracle hands a GQA group's query heads to BLAS as one tall block, and
  // OpenBLAS's summation order (so the last bits) depends on the block's height and on how many
  // threads split it. Both are fp64 of the same sums, so they agree to a few ulp of the result's
  // scale; a wrong KV head would be off by O(1).
  RC_ASSERT(a.o.size() == b.o.size());
  double scale = 0;
  for (double x : b.o) scale = std::max(scale, std::fabs(x));
  for (size_t i = 0; i < a.o.size(); ++i) {
    if (std::fabs(a.o[i] - b.o[i]) > 1e-13 * (1 + scale)) {
      RC_LOG() << "element " << i << ": gqa " << a.o[i] << " mha " << b.o[i] << "\n";
      RC_FAIL("GQA output differs from the repeated-heads MHA output beyond fp64 reordering");
    }
  }
}

}  // namespace
}  // namespace flashcheck
