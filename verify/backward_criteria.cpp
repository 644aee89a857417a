#include "verify/backward_criteria.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <functional>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>

#include "reference/mask.h"
#include "reference/sequences.h"
#include "verify/criteria.h"
#include "verify/expected.h"
#include "verify/metrics.h"

namespace flashcheck {

namespace {

// Each logical row of a gradient: where it lies (sequence, head, row or key) and whether it must
// be exactly 0 (a query row that sees no key; a key no query row sees).
struct RowMap {
  std::vector<int64_t> b, h, i;
  std::vector<char> zero;
  void resize(size_t n) {
    b.resize(n), h.resize(n), i.resize(n);
    zero.assign(n, 0);
  }
};

RowMap query_rows(const Problem& p) {
  const Sequences s(p);
  RowMap m;
  m.resize(static_cast<size_t>(p.lse_elems()));
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_q; ++h)
      for (int64_t i = 0; i < s.sq(b); ++i) {
        const size_t r = static_cast<size_t>(s.lse_at(b, h, i));
        m.b[r] = b, m.h[r] = h, m.i[r] = i;
        m.zero[r] = visible_range(p, b, i).empty();
      }
  return m;
}

RowMap key_rows(const Problem& p) {
  const Sequences s(p);
  RowMap m;
  m.resize(static_cast<size_t>(s.total_kv() * p.heads_kv));
  for (int64_t b = 0; b < p.batch; ++b) {
    // Keys some row sees: every row's visible keys are one interval, so a difference array marks
    // their union in O(Sq + Skv).
    std::vector<int64_t> cover(static_cast<size_t>(s.skv(b)) + 1, 0);
    for (int64_t i = 0; i < s.sq(b); ++i) {
      const KeyRange v = visible_range(p, b, i);
      if (v.empty()) continue;
      ++cover[static_cast<size_t>(v.lo)];
      --cover[static_cast<size_t>(v.hi)];
    }
    int64_t seen = 0;
    for (int64_t j = 0; j < s.skv(b); ++j) {
      seen += cover[static_cast<size_t>(j)];
      for (int64_t hk = 0; hk < p.heads_kv; ++hk) {
        const size_t r = static_cast<size_t>(s.k_row(b, hk, j) / p.head_dim_qk);
        m.b[r] = b, m.h[r] = hk, m.i[r] = j;
        m.zero[r] = seen == 0;
      }
    }
  }
  return m;
}

struct GradientData {
  std::string name;
  DType dtype;  // the kernel's values' dtype (its poison)
  std::span<const float> kernel;
  std::span<const double> oracle;
  std::vector<std::span<const float>> baselines;
  int64_t width = 1;
  const RowMap* rows = nullptr;  // null: the sinks' gradient, one element per query head
  const char* zero_name = nullptr;
  const char* zero_detail = nullptr;
  const std::vector<char>* unresolved = nullptr;  // per row (per element for the sinks' gradient)
  double atol_scale = 0;  // the baseline rule's atol is relative to max(max|r|, this)
  double noise_terms = 0; // the terms' size: the rule adds noise_coefficient(p) of it (BackwardExpected::dq_terms)
  double noise_coef = 0;
  // Whether cosine and rel_l2 may judge. Not for the sinks' gradient: one scalar per head, each a
  // sum over the head's rows that cancels, whose relative error is D's rounding over the result
  // (a correct e4m3 kernel's was 0.42, cosine 0.87 on one element, where the baselines' were 0.17):
  // the baseline rule with its terms-relative atol judges them.
  bool direction = true;
  double lse_rel = 0;  // added to the atol (relative to max|r|): the kernel's own fp32 LSE's ε (lse_epsilon)
  // rows_baseline_relative's per-row floor: coefficient × the row's own terms (BackwardExpected::dq_row_terms).
  const std::vector<double>* row_terms = nullptr;
  double row_terms_coef = 0;
};
// What the rule adds per unit of a gradient's terms (BackwardExpected::dq_terms). 16 fp32 unit
// roundoffs: dP − D carries a few, and P sums them over at most one row's worth of keys. With fp8
// inputs O carries P's fp8 rounding, which depends on where a kernel's tiles split each row (the
// running max when each P is rounded): |ΔO_i| ≤ u·max‖v_j‖ with u fp8's unit roundoff, so D = dO·O
// is uncertain by u·a_i for any correct kernel, and dQ, dK by u times their terms (a derived bound);
// two baselines cannot sample every split (a correct e5m2 kernel with 8-key tiles was 40x both on a
// row of 16 keys, which both baselines' tiles hold whole).
double noise_coefficient(const Problem& p) { return is_fp8(p.dtype) ? unit_roundoff(p.dtype) : 0x1p-20; }
// The kernel's own fp32 LSE (BackwardExpected::lse_magnitude) scales every P of row i by one factor
// 1 + ε_i, |ε_i| ≤ ε = 2^-22·max|LSE| (two ulps), while D_i = dO_i·O_i comes from O: dS_ij scales
// by it too, so dQ_i is off by ε_i·dQ_i (relative: the rule's atol takes ε more of max|r|), dK_j by
// Σ_i ε_i dS_ij q_i (the same where the rows' ε_i agree; taken alike), and dV_j by
// Σ_i ε_i P_ij dO_i ≤ ε·dv_terms (a floor on the attention the key receives). As a bound on the
// terms (|dP − D| ≤ 2a_i) it was loose enough to pass dQ + 1 everywhere on outlier keys, whose dQ
// cancels (P = 1 and D = dP): the error is relative to what survives the cancellation.
double lse_epsilon(const BackwardExpected& e) { return 0x1p-22 * e.lse_magnitude; }

// What an element is before any error is measured: the one rule the criteria and the map share.
// ok: compared; empty_row_* : held to exactly 0 (a row that sees no key, a key no row sees).
MapFlag classify(const GradientData& g, size_t e) {
  const float k = g.kernel[e];
  const double o = g.oracle[e];
  const size_t row = e / static_cast<size_t>(g.width);
  if (is_poison(g.dtype, k)) return MapFlag::unwritten;
  if (g.rows && g.rows->zero[row]) return k != 0.0f ? MapFlag::empty_row_nonzero : MapFlag::empty_row_ok;  // either sign
  // fp32 cannot compute it (BackwardExpected): P = exp(s − LSE) may overflow there in a correct
  // kernel too, so not even its NaN/Inf status is judged.
  if (g.unresolved && (*g.unresolved)[row] && std::isfinite(o)) return MapFlag::unresolved_ok;
  if (!nonfinite_status_matches(k, o)) return MapFlag::nan_mismatch;
  if (!std::isfinite(k)) return MapFlag::nonfinite_match;  // NaN/Inf where the oracle has it: no error to measure
  return MapFlag::ok;
}

// The worst element's head element by element (every row up to kMaxRows, else evenly spaced ones
// and the worst's own row), each ratio |g − r| / unit.
GradientMap head_map(const GradientData& g, const GradientLocation& worst, double unit) {
  GradientMap m;
  m.unit = unit;
  m.b = worst.b, m.h = worst.h, m.cols = g.width;
  std::vector<size_t> rows;  // logical rows of that head; a head's rows are contiguous and ascending
  for (size_t r = 0; r < g.rows->b.size(); ++r)
    if (g.rows->b[r] == worst.b && g.rows->h[r] == worst.h) rows.push_back(r);
  const size_t stride = (rows.size() + GradientMap::kMaxRows - 1) / GradientMap::kMaxRows;
  for (size_t x = 0; x < rows.size(); ++x) {
    const size_t r = rows[x];
    if (x % stride != 0 && g.rows->i[r] != worst.row) continue;
    m.rows.push_back(g.rows->i[r]);
    for (int64_t c = 0; c < g.width; ++c) {
      const size_t e = r * static_cast<size_t>(g.width) + static_cast<size_t>(c);
      const MapFlag f = classify(g, e);
      m.flag.push_back(f);
      m.ratio.push_back(f == MapFlag::ok ? static_cast<float>(std::fabs(static_cast<double>(g.kernel[e]) - g.oracle[e]) / unit) : NAN);
    }
  }
  return m;
}

// The baseline rule row by row (rows of dQ: query rows; of dK and dV: keys). The tensor-wide rule's
// limit is set by the largest baseline error anywhere, so one row a few percent off (dQ's last tile
// one key short: one of >= 65 terms missing from one row, 1-8% of it) passes it whenever other rows
// are larger or worse conditioned. Per row, in L2 over its compared elements:
//   ‖g_r − r_r‖ ≤ row_k·max over baselines ‖b_r − r_r‖ + (atol + ε)·‖r_r‖ + c·terms·√n_r + 2u·terms_r,
// the atol (and the fp32 LSE's ε) relative to the row's own size, the terms' floor the tensor's as
// in the whole-tensor rule, and for dQ and dK 2u (u the gradient dtype's unit roundoff) of the row's
// own terms: where a row cancels, a correct kernel keeps the rounding of dS that two baselines can
// miss by luck (verify/TOLERANCE.md). Rows where a baseline is not finite are left to the other
// criteria. The value is the worst row's ratio to its limit (limit 1).
struct RowRule {
  const BackwardTolerance& tol;
  double lse_rel;            // GradientData::lse_rel
  double floor_per_element;  // c·terms
  const std::vector<double>* row_terms;  // GradientData::row_terms, times row_terms_coef
  double row_terms_coef;
  size_t nbase;
  size_t row = SIZE_MAX;
  double err2 = 0, ref2 = 0;
  int64_t n = 0;
  bool base_bad = false;
  std::vector<double> base2;
  // Results.
  double worst_ratio = 0, k_needed = 0, worst_err = 0, worst_ref = 0;
  size_t worst_row = SIZE_MAX;
  int64_t rows_judged = 0;

  RowRule(const BackwardTolerance& t, double lse, double floor, const std::vector<double>* terms, double terms_coef, size_t baselines)
      : tol(t), lse_rel(lse), floor_per_element(floor), row_terms(terms), row_terms_coef(terms_coef), nbase(baselines),
        base2(baselines, 0.0) {}
  void start(size_t r) {
    if (r == row) return;
    close();
    row = r, err2 = ref2 = 0, n = 0, base_bad = false;
    std::fill(base2.begin(), base2.end(), 0.0);
  }
  void close() {
    if (row == SIZE_MAX || n == 0 || base_bad || nbase == 0) return;
    const double base = std::sqrt(*std::max_element(base2.begin(), base2.end()));
    const double atol = (tol.baseline_atol + lse_rel) * std::sqrt(ref2) + floor_per_element * std::sqrt(static_cast<double>(n)) +
                        (row_terms ? row_terms_coef * (*row_terms)[row] : 0.0);
    const double err = std::sqrt(err2), limit = tol.row_k * base + atol;
    const double ratio = limit > 0 ? err / limit : (err > 0 ? INFINITY : 0.0);
    k_needed = std::max(k_needed, err <= atol ? 0.0 : base > 0 ? (err - atol) / base : INFINITY);
    ++rows_judged;
    if (ratio > worst_ratio || worst_row == SIZE_MAX) worst_ratio = ratio, worst_row = row, worst_err = err, worst_ref = std::sqrt(ref2);
  }
};

GradientVerdict judge(const GradientData& g, const BackwardTolerance& tol, bool map) {
  GradientVerdict v;
  v.name = g.name;
  const size_t n = g.kernel.size();
  v.elements = static_cast<int64_t>(n);
  // The gradient's scale over what is judged: rows fp32 cannot resolve are left out (their truth
  // can be far larger than the rest, which the atol would then swallow).
  for (size_t e = 0; e < n; ++e)
    if (std::isfinite(g.oracle[e]) && !(g.unresolved && (*g.unresolved)[e / static_cast<size_t>(g.width)]))
      v.max_ref = std::max(v.max_ref, std::fabs(g.oracle[e]));
  CosineAccumulator cos;
  std::vector<CosineAccumulator> base_cos(g.baselines.size());
  std::vector<double> base_diff2(g.baselines.size(), 0.0);
  double diff2 = 0, ref2 = 0, worst_err = -1;
  bool baseline_nonfinite = false;
  size_t worst_e = 0, first_nan = SIZE_MAX, first_zero = SIZE_MAX, first_unwritten = SIZE_MAX;
  RowRule rows(tol, g.lse_rel, g.noise_coef * g.noise_terms, g.row_terms, g.row_terms_coef, g.baselines.size());
  // The ulp criterion's evidence: significant elements' distinct pairs, the kernel's and each baseline's.
  DistinctPairs ulp_pairs;
  std::vector<DistinctPairs> base_ulp_pairs(g.baselines.size());
  for (size_t e = 0; e < n; ++e) {
    const float k = g.kernel[e];
    const double o = g.oracle[e];
    switch (classify(g, e)) {
      case MapFlag::unwritten:
        ++v.unwritten;
        first_unwritten = std::min(first_unwritten, e);
        continue;
      case MapFlag::empty_row_nonzero:  // held to exactly 0, and measured by nothing else
        ++v.zero_violations;
        first_zero = std::min(first_zero, e);
        continue;
      case MapFlag::unresolved_ok:
        ++v.unresolved;
        continue;
      case MapFlag::nan_mismatch:
        ++v.nan_mismatches;
        first_nan = std::min(first_nan, e);
        continue;
      case MapFlag::ok: break;
      default: continue;  // held to 0 and 0; NaN/Inf where the oracle has it
    }
    ++v.compared;
    const double err = std::fabs(static_cast<double>(k) - o);
    if (g.rows) {
      rows.start(e / static_cast<size_t>(g.width));
      rows.err2 += err * err, rows.ref2 += o * o, ++rows.n;
    }
    cos.add(k, o);
    diff2 += err * err;
    ref2 += o * o;
    v.max_abs = std::max(v.max_abs, err);
    if (err > worst_err) worst_err = err, worst_e = e;
    const bool significant = std::fabs(o) >= v.max_ref / 16;
    if (significant) ulp_pairs.add(k, o);
    for (size_t x = 0; x < g.baselines.size(); ++x) {
      const float bl = g.baselines[x][e];
      if (!std::isfinite(bl)) {
        baseline_nonfinite = true;
        rows.base_bad = true;
        continue;
      }
      if (significant) base_ulp_pairs[x].add(bl, o);
      const double berr = std::fabs(static_cast<double>(bl) - o);
      if (g.rows) rows.base2[x] += berr * berr;
      v.baseline_max_abs = std::max(v.baseline_max_abs, berr);
      base_diff2[x] += berr * berr;
      base_cos[x].add(bl, o);
    }
  }
  auto locate = [&](size_t e) {
    GradientLocation l;
    const size_t row = e / static_cast<size_t>(g.width);
    if (g.rows) {
      l.b = g.rows->b[row], l.h = g.rows->h[row], l.row = g.rows->i[row];
      l.col = static_cast<int64_t>(e % static_cast<size_t>(g.width));
    } else {
      l.h = static_cast<int64_t>(e);
    }
    l.kernel = g.kernel[e];
    l.oracle = g.oracle[e];
    return l;
  };
  for (size_t e : {first_nan, first_zero, first_unwritten, worst_err >= 0 ? worst_e : SIZE_MAX})
    if (e != SIZE_MAX) {
      v.worst = locate(e);
      break;
    }
  v.cosine = cos.value();
  v.rel_l2 = ref2 > 0 ? std::sqrt(diff2 / ref2) : (diff2 > 0 ? INFINITY : 0.0);

  using Role = Criterion::Role;
  using Bound = Criterion::Bound;
  // As verify_output: a judged criterion passes only within the limit it reports.
  auto add = [&](std::string name, Role role, Bound bound, double value, double limit, std::string detail) {
    Criterion c{std::move(name), true, value, limit, std::move(detail), bound, role};
    c.pass = role != Role::judged || within_limit(c);
    v.criteria.push_back(std::move(c));
  };
  auto count = [&](std::string name, int64_t c, std::string detail) {
    add(std::move(name), Role::judged, Bound::at_most, static_cast<double>(c), 0, std::move(detail));
  };
  count("unwritten", v.unwritten, "elements still holding the poison");
  count("nan_inf_positions", v.nan_mismatches, "elements whose NaN/Inf status differs from the oracle");
  if (g.zero_name) count(g.zero_name, v.zero_violations, g.zero_detail);
  const bool none = v.compared == 0;
  const std::string none_text =
      v.unresolved > 0 ? "not computed: no element could be compared (every one unwritten, NaN/Inf, held to 0 or in a row fp32 cannot resolve)"
                       : "not computed: no element could be compared (every one unwritten, NaN/Inf or held to 0)";
  // Never stricter than the same-dtype baseline on this very problem (the forward's rule, issue 23):
  // the limits loosen to 2x its own figure where that is worse than the fixed one.
  constexpr double kBaselineSpread = 2.0;
  const bool base_ok = !baseline_nonfinite && ref2 > 0;
  // The worse baseline's own figures.
  double base_rel = 0, base_c = 1;
  for (size_t x = 0; base_ok && x < g.baselines.size(); ++x) {
    base_rel = std::max(base_rel, std::sqrt(base_diff2[x] / ref2));
    base_c = std::min(base_c, base_cos[x].value());
  }
  // A gradient that cancels below the rounding of its terms has no direction to compare: with one
  // visible key per row dQ and dK are exactly 0 in the truth (dS = P·(dP − D) with P = 1, D = dP),
  // with equal keys dQ is, and fp32 leaves a few ulp of dP there. Where the truth is 0 or the
  // baseline itself is off by half its norm, cosine and rel_l2 measure noise against noise: they are
  // reported, and the baseline rule (absolute: k·baseline error + atol) judges the gradient.
  // The baselines' figure alone is luck, though: two baselines can both land on the truth (one
  // whose dP and D sum in the same order gets dS = 0 exactly: the GPU replicas did, on a row whose
  // one outlier key took all the weight) while a correct kernel keeps fp32's noise there. So the
  // truth's own size decides too: at most the noise the baseline rule allows for the terms it sums
  // (c·terms), it has no direction either.
  constexpr double kNoiseRelL2 = 0.5;
  const bool below_terms = g.noise_terms > 0 && v.max_ref <= g.noise_coef * g.noise_terms;
  const bool noise = !none && (!g.direction || ref2 == 0 || below_terms || (base_ok && base_rel >= kNoiseRelL2));
  const Role value_role = none ? Role::not_computed : noise ? Role::reported_only : Role::judged;
  auto num_text = [](double x) {
    std::ostringstream os;
    os.precision(3);
    os << x;
    return os.str();
  };
  const std::string noise_text =
      !g.direction   ? " (reported only: one cancelling sum per head; the baseline rule judges it)"
      : ref2 == 0    ? " (reported only: the oracle's gradient is 0 wherever compared)"
      : below_terms  ? " (reported only: the oracle's gradient, max|r| " + num_text(v.max_ref) +
                           ", lies below the fp32 noise of the terms it sums, c*terms " + num_text(g.noise_coef * g.noise_terms) +
                           "; the baseline rule judges it)"
                     : " (reported only: the gradient cancels below its terms' rounding; the same-dtype baseline is off by rel_l2 " +
                           std::to_string(base_rel) + ")";
  // Cosine: that of an error 2x the baseline's (spread_cosine, criteria.h). 1 − cosine grows as
  // the error squared: 1 − 2(1 − c) failed a correct bf16 dQ on cosine (0.942 < 0.9575) that
  // rel_l2's 2x held (0.38 ≤ 0.44).
  const double cos_limit = std::min(tol.min_cosine, spread_cosine(base_c, kBaselineSpread));
  const double rel_limit = std::max(tol.max_rel_l2, kBaselineSpread * base_rel);
  const std::string loosened = " (loosened to 2x the same-dtype baseline's own, which is worse than the fixed limit here)";
  auto said = [&](const char* what, bool was_loosened, const std::string& how) {
    return none ? none_text : std::string(what) + (noise ? noise_text : was_loosened ? how : std::string());
  };
  add("cosine", value_role, Bound::at_least, v.cosine, cos_limit,
      said("2<g,r>/(|g|^2+|r|^2)", cos_limit < tol.min_cosine, kCosineLoosened));
  add("rel_l2", value_role, Bound::at_most, v.rel_l2, rel_limit, said("|g-r|/|r|", rel_limit > tol.max_rel_l2, loosened));
  // ULP shares. Cancelling gradients are noise against a tiny truth, every element many ULP off
  // (equal scores: 100% of dQ), so the rule judges only where cosine does; and like cosine it is
  // never stricter than 2x the same-dtype baselines' own share on the same elements.
  {
    const RoundingEvidence ev = rounding_evidence(g.dtype, ulp_pairs, tol.ulp_n);
    double base_share = 0;  // a baseline's share counts with as much evidence as the kernel's needs
    for (DistinctPairs& b : base_ulp_pairs)
      if (b.distinct() >= static_cast<double>(kMinDistinctPairsUlp))
        base_share = std::max(base_share, rounding_evidence(g.dtype, b, tol.ulp_n).frac_over_n);
    v.ulp_share = ev.frac_over_n, v.ulp_baseline_share = base_share, v.ulp_distinct = ev.distinct;
    const bool enough = ev.distinct >= static_cast<double>(kMinDistinctPairsUlp);
    const double limit = std::max(tol.ulp_max_frac, kBaselineSpread * base_share);
    const Role role = none ? Role::not_computed
                      : value_role == Role::judged && tol.ulp_max_frac < 1.0 && enough && !baseline_nonfinite ? Role::judged
                                                                                                             : Role::reported_only;
    std::ostringstream d;
    d << "share of distinct (kernel, oracle) pairs of significant elements (|r| >= max|r|/16) more than " << tol.ulp_n
      << " ULP of " << to_string(g.dtype) << " from the rounded oracle; " << static_cast<int64_t>(ev.distinct) << " distinct pairs";
    if (none) d.str(none_text);
    else if (tol.ulp_max_frac >= 1.0) d << " (reported only for this dtype, verify/TOLERANCE.md)";
    else if (value_role != Role::judged) d << noise_text;
    else if (!enough) d << " (reported only: < " << kMinDistinctPairsUlp << ")";
    else if (baseline_nonfinite) d << " (reported only: a same-dtype baseline replica is NaN/Inf where the oracle is finite)";
    else if (limit > tol.ulp_max_frac) d << loosened;
    add("ulp", role, Bound::at_most, ev.frac_over_n, limit, d.str());
  }
  v.atol_ref = std::max(v.max_ref, g.atol_scale);
  double head_map_unit = 0;
  const double blimit = tol.baseline_k * v.baseline_max_abs + (tol.baseline_atol + g.lse_rel) * v.atol_ref + g.noise_coef * g.noise_terms;
  // The map's unit: the rule's limit, or its atol part where the baseline is not finite (as the forward's).
  if (map && g.rows && v.worst) head_map_unit = std::isfinite(blimit) && blimit > 0 ? blimit : tol.baseline_atol * v.atol_ref;
  add("baseline_relative", none ? Role::not_computed : baseline_nonfinite ? Role::reported_only : Role::judged, Bound::at_most,
      v.max_abs, blimit,
      none                 ? none_text
      : baseline_nonfinite ? "reported only: the same-dtype baseline replica is NaN/Inf where the oracle is finite, so the rule does not apply"
      : g.noise_terms > 0  ? "max|g-r| against k*max|baseline-r| + atol*max|r| + c*(the size of the terms it sums: the noise where it cancels; c = " +
                                 num_text(g.noise_coef) + ": fp32's 2^-20, fp8's unit roundoff, dv's the fp32 LSE's 2^-22*max|LSE|) (baseline: the worse of two same-dtype FlashAttention-2 backward replicas)"
      : g.atol_scale > 0   ? "max|g-r| against k*max|baseline-r| + atol*max(max|r|, max over heads of the terms' sum P_sink*|dO.O|) (baseline: the worse of two same-dtype FlashAttention-2 backward replicas)"
                           : "max|g-r| against k*max|baseline-r| + atol*max|r| (baseline: the worse of two same-dtype FlashAttention-2 backward replicas)");
  if (g.rows) {
    rows.close();
    v.row_k_needed = rows.k_needed;
    const bool any = rows.rows_judged > 0;
    std::ostringstream d;
    d.precision(3);
    const char* unit = g.name == "dq" ? "query row" : "key";
    d << "per " << unit << ": |g-r| against row_k*|baseline-r| + atol*|r| + c*terms*sqrt(n)"
      << (g.row_terms ? " + 2u*(the row's own terms, u the gradient dtype's unit roundoff)" : "") << ", L2 over the " << unit
      << "'s compared elements (row_k = " << tol.row_k << "); the worst " << unit << "'s ratio to its limit";
    if (any) {
      const size_t w = rows.worst_row;
      d << ", at (b=" << g.rows->b[w] << (g.name == "dq" ? ", h=" : ", kv head=") << g.rows->h[w] << ", " << (g.name == "dq" ? "row=" : "key=")
        << g.rows->i[w] << "): |g-r| = " << rows.worst_err << ", |r| = " << rows.worst_ref;
    }
    add("rows_baseline_relative", any ? Role::judged : Role::not_computed, Bound::at_most, rows.worst_ratio, 1.0,
        any ? d.str()
            : none ? none_text
                   : "not computed: every row with compared elements has a NaN/Inf baseline (the same-dtype replica overflowed there)");
  }
  if (head_map_unit > 0) v.map = head_map(g, *v.worst, head_map_unit);
  return v;
}

// The worst element's tiles (GradientLocation): its own tile, and the span of the other axis's
// tiles that add terms to it, from the rows' visible key ranges.
void name_tiles(const Problem& p, bool query_row, GradientLocation& l, const BackwardOptions& opt) {
  const Sequences s(p);
  if (query_row) {
    l.q_tile_lo = l.q_tile_hi = l.row / opt.tile_q;
    const KeyRange v = visible_range(p, l.b, l.row);
    if (!v.empty()) l.kv_tile_lo = v.lo / opt.tile_kv, l.kv_tile_hi = (v.hi - 1) / opt.tile_kv;
    return;
  }
  l.kv_tile_lo = l.kv_tile_hi = l.row / opt.tile_kv;
  for (int64_t i = 0; i < s.sq(l.b); ++i) {
    const KeyRange v = visible_range(p, l.b, i);
    if (v.empty() || l.row < v.lo || l.row >= v.hi) continue;
    if (l.q_tile_lo < 0) l.q_tile_lo = i / opt.tile_q;
    l.q_tile_hi = i / opt.tile_q;
  }
}

void check_size(const char* name, size_t have, int64_t need) {
  if (static_cast<int64_t>(have) != need)
    throw std::invalid_argument(std::string("verify_backward: ") + name + " has " + std::to_string(have) +
                                " values; the problem needs " + std::to_string(need));
}

}  // namespace

bool GradientVerdict::pass() const {
  return std::all_of(criteria.begin(), criteria.end(), [](const Criterion& c) { return c.pass; });
}

bool BackwardReport::pass() const {
  return std::all_of(gradients.begin(), gradients.end(), [](const GradientVerdict& g) { return g.pass(); }) &&
         std::all_of(checks.begin(), checks.end(), [](const Criterion& c) { return c.pass; });
}

std::vector<std::string> BackwardReport::failed() const {
  std::vector<std::string> f;
  for (const GradientVerdict& g : gradients)
    for (const Criterion& c : g.criteria)
      if (!c.pass) f.push_back(g.name + ": " + c.name);
  for (const Criterion& c : checks)
    if (!c.pass) f.push_back(c.name);
  return f;
}

BackwardReport verify_backward(const Problem& p, const BackwardExpected& expected, const KernelGradients& kernel,
                               const BackwardOptions& opt) {
  const DType gd = gradient_dtype(p);
  const BackwardTolerance tol = opt.tol ? *opt.tol : backward_tolerance_for(p.dtype);
  check_size("dq", kernel.dq.size(), p.q_elems());
  check_size("dk", kernel.dk.size(), p.k_elems());
  check_size("dv", kernel.dv.size(), p.v_elems());
  check_size("the oracle's dq", expected.oracle.dq.size(), p.q_elems());
  check_size("the oracle's dk", expected.oracle.dk.size(), p.k_elems());
  check_size("the oracle's dv", expected.oracle.dv.size(), p.v_elems());
  check_size("the expected dq rows' terms", expected.dq_row_terms.size() * static_cast<size_t>(p.head_dim_qk), p.q_elems());
  check_size("the expected dk keys' terms", expected.dk_row_terms.size() * static_cast<size_t>(p.head_dim_qk), p.k_elems());
  const double row_terms_coef = 2 * std::max(noise_coefficient(p), unit_roundoff(gd));  // rows_baseline_relative's 2u
  std::vector<std::span<const float>> bq, bk, bv, bs;
  for (const ReplicaGradients& b : expected.baselines) {
    check_size("the baseline's dq", b.dq.size(), p.q_elems());
    check_size("the baseline's dk", b.dk.size(), p.k_elems());
    check_size("the baseline's dv", b.dv.size(), p.v_elems());
    check_size("the baseline's dsinks", b.dsinks.size(), p.sinks ? p.heads_q : 0);
    bq.push_back(b.dq), bk.push_back(b.dk), bv.push_back(b.dv), bs.push_back(b.dsinks);
  }
  if (kernel.dsinks && !p.sinks) throw std::invalid_argument("verify_backward: a dsinks gradient was given for a problem without sinks");
  if (kernel.dsinks) check_size("dsinks", kernel.dsinks->size(), p.heads_q);
  if (opt.tile_q <= 0 || opt.tile_kv <= 0) throw std::invalid_argument("verify_backward: tile sizes must be positive");

  BackwardReport r;
  r.problem = p;
  const RowMap qm = query_rows(p), km = key_rows(p);
  auto span_of = [](const auto& v) { return std::span(v.data(), v.size()); };
  const char* unseen = "elements of keys no query row sees that are not exactly 0";
  // The three gradients are judged at once, each by one thread: one pass over 67M elements and two
  // baselines was a second apiece at (4,16,8192,128). Each judge reads its own tensors only.
  GradientVerdict gq, gk, gv;
  std::exception_ptr failed[3];  // an exception may not leave an OpenMP section: kept, rethrown below
  auto guarded = [&failed](int i, auto&& f) {
    try {
      f();
    } catch (...) {
      failed[i] = std::current_exception();
    }
  };
#pragma omp parallel sections if (kernel.dq.size() + kernel.dk.size() > (size_t{1} << 20))
  {
#pragma omp section
    guarded(0, [&] {
      gq = judge({"dq", gd, kernel.dq, span_of(expected.oracle.dq), bq, p.head_dim_qk, &qm, "empty_rows",
                  "elements of rows with no visible key that are not exactly 0", &expected.unresolved_rows, 0.0, expected.dq_terms,
                  noise_coefficient(p), true, lse_epsilon(expected), &expected.dq_row_terms, row_terms_coef},
                 tol, opt.error_maps);
    });
#pragma omp section
    guarded(1, [&] {
      gk = judge({"dk", gd, kernel.dk, span_of(expected.oracle.dk), bk, p.head_dim_qk, &km, "unseen_keys", unseen,
                  &expected.unresolved_keys, 0.0, expected.dk_terms, noise_coefficient(p), true, lse_epsilon(expected),
                  &expected.dk_row_terms, row_terms_coef},
                 tol, opt.error_maps);
    });
#pragma omp section
    guarded(2, [&] {
      gv = judge({"dv", gd, kernel.dv, span_of(expected.oracle.dv), bv, p.head_dim_v, &km, "unseen_keys", unseen,
                  &expected.unresolved_keys, 0.0, expected.dv_terms, lse_epsilon(expected)},
                 tol, opt.error_maps);
    });
  }
  for (const std::exception_ptr& e : failed)
    if (e) std::rethrow_exception(e);
  r.gradients.push_back(std::move(gq));
  r.gradients.push_back(std::move(gk));
  r.gradients.push_back(std::move(gv));
  for (GradientVerdict& g : r.gradients)
    if (g.worst) name_tiles(p, g.name == "dq", *g.worst, opt);
  if (expected.count_unresolved_rows > 0)
    r.notes.push_back(std::to_string(expected.count_unresolved_rows) +
                      " query rows have scores fp32 cannot resolve (score rounding >= " + std::to_string(kUnresolvedDelta) +
                      "): their dQ, the dK/dV of the keys they see and their heads' sink gradients are judged for unwritten, "
                      "NaN/Inf and exact zeros only");
  const double sink_terms = expected.dsinks_terms.empty() ? 0.0 : *std::max_element(expected.dsinks_terms.begin(), expected.dsinks_terms.end());
  if (p.sinks) {
    if (kernel.dsinks)
      r.gradients.push_back(judge({"dsinks", DType::f32, *kernel.dsinks, span_of(expected.oracle.dsinks),
                                   bs, 1, nullptr, nullptr, nullptr, &expected.unresolved_sinks,
                                   sink_terms, is_fp8(p.dtype) ? sink_terms : 0.0, noise_coefficient(p), false},
                                  tol, false));
    else
      r.notes.push_back("dsinks: not checked (the kernel gave no gradient for the sinks)");
  }
  if (kernel.padding_written)
    r.checks.push_back({"padding_written", *kernel.padding_written == 0, static_cast<double>(*kernel.padding_written), 0,
                        "elements of dq, dk, dv outside every row (padding tokens, unread cache slots) that the kernel wrote"});
  return r;
}

}  // namespace flashcheck
