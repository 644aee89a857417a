#include "verify/criteria.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "reference/mask.h"
#include "verify/criteria_detail.h"
#include "verify/element_pass_device.h"
#include "verify/metrics.h"

namespace flashcheck {

using namespace criteria_detail;

ElementSummary host_element_pass(const Problem& p, const Expected& ref, std::span<const float> kernel_o, uint64_t ulp_n) {
  const OracleResult& oracle = ref.oracle;
  const std::vector<float>& baseline = ref.baseline;
  const FlatRows flat(p, oracle.rows);
  const DType od = p.o_dtype();  // the output's dtype: fp8 inputs write bf16 or f16
  const int64_t dv = p.head_dim_v, all_rows = flat.total();
  const size_t n_o = static_cast<size_t>(all_rows * dv);
  if (kernel_o.size() != n_o || baseline.size() != n_o || oracle.o.size() != n_o)
    throw std::invalid_argument("verify_output: kernel, baseline and oracle outputs differ in size");
  ElementSummary s;
  // The output's scale, from the oracle alone: the baseline rule's atol and the ULP rule's
  // "significant" threshold are relative to it.
  double max_ref = 0;
#pragma omp parallel for reduction(max : max_ref) schedule(static)
  for (size_t e = 0; e < n_o; ++e)
    if (std::isfinite(oracle.o[e])) max_ref = std::max(max_ref, std::fabs(oracle.o[e]));
  s.max_ref = max_ref;

  // Production outputs hold 10^8..10^9 elements, so the pass runs over all threads. It is cut into
  // a fixed number of rows per chunk (not per thread) and the chunks' sums are added in chunk order:
  // the report is the same bits on 2 cores and on 128 (and on the device: element_pass.h).
  const int64_t n_chunks = (all_rows + kElementChunkRows - 1) / kElementChunkRows;
  std::vector<ElementTotals> parts(static_cast<size_t>(n_chunks));
  const UnresolvedLookup unresolved_row(ref, all_rows);
  // A batch whose sequences differ (varlen, seqused_k) is judged per sequence too: which one failed.
  // Counts and maxima, tallied per thread and merged: the same whatever thread saw which row.
  const bool per_sequence = p.varlen() || !p.seqused_kv.empty();
  s.sequences.resize(per_sequence ? static_cast<size_t>(p.batch) : 0);
#pragma omp parallel
  {
  // The significant elements' distinct (kernel, oracle) pairs: the rounding criteria's evidence;
  // and the baselines' own, for the direction a correct implementation rounds in on this problem.
  DistinctPairs mine, mine_eager, mine_flash;  // per thread, merged once at the end: the kept set is the same however the chunks fell
  std::vector<SequenceVerdict> my_seqs(s.sequences.size());
#pragma omp for schedule(dynamic, 4)
  for (int64_t c = 0; c < n_chunks; ++c) {
    ElementTotals& a = parts[static_cast<size_t>(c)];
    for (int64_t gr = c * kElementChunkRows; gr < std::min(all_rows, (c + 1) * kElementChunkRows); ++gr) {
      const FlatRows::Place pl = flat.at(gr);
      const bool empty_row = pl.keys.empty();
      SequenceVerdict* seq = per_sequence ? &my_seqs[static_cast<size_t>(pl.b)] : nullptr;
      const Expected::UnresolvedRow* unresolved = unresolved_row(gr);
      for (size_t e = static_cast<size_t>(gr * dv); e < static_cast<size_t>((gr + 1) * dv); ++e) {
        const float k = kernel_o[e];
        const double o = oracle.o[e];
        const MapFlag flag = count_element(a, static_cast<int64_t>(e), k, o, od, empty_row);
        if (seq && is_flagged(flag)) ++seq->flagged;
        if (flag != MapFlag::ok) continue;
        if (unresolved) {  // judged by its contenders' values alone, kept out of every error figure
          if (classify_unresolved(p, k, *unresolved, static_cast<int64_t>(e % static_cast<size_t>(dv))) ==
              MapFlag::outside_contenders) {
            ++a.outside_contenders;
            if (seq) ++seq->flagged;
            if (a.first_outside_e < 0) a.first_outside_e = static_cast<int64_t>(e), a.outside_k = k, a.outside_o = o;
          }
          continue;
        }
        if (seq) {
          ++seq->compared;
          seq->max_abs = std::max(seq->max_abs, std::fabs(static_cast<double>(k) - o));
        }
        const float* flash = ref.flash_baseline.empty() ? nullptr : &ref.flash_baseline[e];
        add_compared(a, static_cast<int64_t>(e), k, o, baseline[e], flash, od, max_ref, ulp_n, [&](float kk, double oo) {
          mine.add(kk, oo);
          if (std::isfinite(baseline[e])) mine_eager.add(baseline[e], oo);
          if (flash && std::isfinite(*flash)) mine_flash.add(*flash, oo);
        });
      }
    }
  }
#pragma omp critical(fc_rounding_evidence)
  {
    s.evidence.merge(mine);
    s.eager_evidence.merge(mine_eager);
    s.flash_evidence.merge(mine_flash);
    for (size_t b = 0; b < s.sequences.size(); ++b) {
      s.sequences[b].compared += my_seqs[b].compared;
      s.sequences[b].flagged += my_seqs[b].flagged;
      s.sequences[b].max_abs = std::max(s.sequences[b].max_abs, my_seqs[b].max_abs);
    }
  }
  }
  for (const ElementTotals& a : parts) merge_totals(s.totals, a);
  return s;
}

Report verify_output(const Problem& p, const Expected& ref, const KernelResult& kernel, const CheckOptions& opt) {
  return verify_output(p, ref, kernel.o, kernel.lse, opt);
}

Report verify_output(const Problem& p, const Expected& ref, std::span<const float> kernel_o,
                     const std::optional<std::vector<float>>& kernel_lse, const CheckOptions& opt) {
  const OracleResult& oracle = ref.oracle;
  const Tolerance& tol = opt.tol;
  const FlatRows flat(p, oracle.rows);
  const DType od = p.o_dtype();
  const int64_t dv = p.head_dim_v, all_rows = flat.total();
  const size_t n_o = static_cast<size_t>(all_rows * dv);
  const bool per_sequence = p.varlen() || !p.seqused_kv.empty();
  Report r;
  r.problem = p;
  r.rows_checked = p.varlen() ? oracle.rows.total() : oracle.num_rows();
  r.sampled = !oracle.rows.is_all();
  r.elements = static_cast<int64_t>(n_o);
  ElementSummary es;
  if (ref.resident) {  // the oracle's O and the baselines are in device memory: the pass runs there
    // device_element_pass refuses what it cannot judge (per-sequence verdicts, unresolved rows, sizes);
    // the error maps are this function's and read the host arrays.
    if (opt.error_maps) throw std::invalid_argument("verify_output: a device-resident Expected takes no error maps");
    if (std::optional<ElementSummary> d = device_element_pass(p, ref, kernel_o, tol.ulp_n, opt.kernel_o_on_device))
      es = std::move(*d);
    else es = host_element_pass(p, home_copy(ref), kernel_o, tol.ulp_n);
  } else {
    es = host_element_pass(p, ref, kernel_o, tol.ulp_n);
  }
  if (opt.timings)
    for (auto& [name, secs] : es.timings) r.timings.emplace_back("  criteria: " + name, secs);  // judge() places them
  const double max_ref = es.max_ref;
  const ElementTotals& t = es.totals;
  std::vector<SequenceVerdict> seqs = std::move(es.sequences);
  auto locate = [&](int64_t e, double k, double o) {
    Location l;
    const FlatRows::Place pl = flat.at(e / dv);
    l.b = pl.b;
    l.h = pl.h;
    l.row = pl.row;
    l.col = e % dv;
    l.q_tile = l.row / opt.tile_q;
    l.kv_tile = std::max<int64_t>(pl.keys.hi - 1, 0) / opt.tile_kv;
    l.kernel = k;
    l.oracle = o;
    return l;
  };
  r.ulp_over_n = t.ulp_over_n;
  r.compared = t.compared;
  r.unwritten = t.unwritten;
  r.nan_mismatches = t.nan_mismatches;
  r.empty_row_violations = t.empty_row_violations;
  r.max_abs = t.max_abs;
  r.baseline_max_abs = t.baseline_max_abs;
  r.ulp_max = t.ulp_max;
  const int64_t significant = t.significant, outside_contenders = t.outside_contenders;
  const double ref2 = t.ref2;
  if (t.worst_e >= 0) r.worst = locate(t.worst_e, t.worst_k, t.worst_o);
  if (t.first_outside_e >= 0) r.worst = locate(t.first_outside_e, t.outside_k, t.outside_o);
  if (t.first_nan_e >= 0) r.worst = locate(t.first_nan_e, t.nan_k, t.nan_o);
  const CosineAccumulator cos{t.xy, t.xx, t.yy}, eager_cos{t.eager_xy, t.eager_xx, t.eager_yy},
      flash_cos{t.flash_xy, t.flash_xx, t.flash_yy};
  const double eager_diff2 = t.eager_diff2, flash_diff2 = t.flash_diff2;
  DistinctPairs& evidence = es.evidence;
  DistinctPairs& eager_evidence = es.eager_evidence;
  DistinctPairs& flash_evidence = es.flash_evidence;
  r.cosine = cos.value();
  r.rel_l2 = ref2 > 0 ? std::sqrt(t.diff2 / ref2) : (t.diff2 > 0 ? INFINITY : 0.0);
  r.ulp_mean = t.ulp_count ? t.ulp_sum / static_cast<double>(t.ulp_count) : 0.0;

  using Role = Criterion::Role;
  using Bound = Criterion::Bound;
  // A criterion passes when its other conditions hold and, if judged, its value lies on the allowed
  // side of the limit it reports: a report can never hold a passing judged value past its limit.
  auto add = [&](std::string name, Role role, Bound bound, double value, double limit, bool other_conditions,
                 std::string detail) {
    Criterion c{std::move(name), true, value, limit, std::move(detail), bound, role};
    c.pass = other_conditions && (role != Role::judged || within_limit(c));
    r.criteria.push_back(std::move(c));
  };
  auto count = [&](std::string name, int64_t n, std::string detail) {
    add(std::move(name), Role::judged, Bound::at_most, static_cast<double>(n), 0, true, std::move(detail));
  };
  count("unwritten", r.unwritten, "output elements still holding the poison");
  count("nan_inf_positions", r.nan_mismatches, "elements whose NaN/Inf status differs from the oracle");
  if (!ref.unresolved.empty()) {
    const int64_t n_unresolved = static_cast<int64_t>(ref.unresolved.size());
    count("unresolved_rows", outside_contenders,
          "elements outside the values of the keys fp32 cannot tell apart, in " + std::to_string(n_unresolved) + " of " +
              std::to_string(all_rows) +
              " rows whose top scores lie within fp32 rounding of each other (any convex combination of those keys' "
              "values is right there; the rows are kept out of every other O criterion)");
  }
  count("empty_rows", r.empty_row_violations, "elements of rows with no visible key that are not exactly 0");
  // The value criteria measure the compared elements; with none (every element unwritten, NaN or in
  // a row that sees no key) their numbers describe nothing and are reported as not computed.
  const bool nothing_compared = r.compared == 0;
  const std::string none_compared =
      "not computed: no element could be compared (every one unwritten, NaN/Inf or in a row with no visible key)";
  auto value_role = [&](bool judged) { return nothing_compared ? Role::not_computed : judged ? Role::judged : Role::reported_only; };
  // No fixed limit may be stricter than what a correct implementation of the same dtype reaches on
  // this very problem: on ill-conditioned inputs (f32 `large`: scores near 1e7, where one fp32
  // rounding of a score moves exp by tens of percent) the fp32 FlashAttention replica itself has
  // rel_l2 2e-3 against a limit of 1e-3 (run --big, PERF.md session 4). So cosine and rel_l2 take
  // kBaselineSpread times the worse baseline's own figure when that is looser; on well-conditioned
  // problems the baselines are 10^2..10^4 times inside the fixed limits and nothing changes.
  constexpr double kBaselineSpread = 2.0;
  double base_rel_l2 = 0, base_cos = 1;
  if (std::isfinite(r.baseline_max_abs) && ref2 > 0) {  // an overflowed baseline loosens nothing
    base_rel_l2 = std::sqrt(std::max(eager_diff2, ref.flash_baseline.empty() ? 0.0 : flash_diff2) / ref2);
    base_cos = std::min(eager_cos.value(), ref.flash_baseline.empty() ? 1.0 : flash_cos.value());
  }
  // Cosine follows rel_l2's 2x: the cosine of an error kBaselineSpread times the baseline's. An
  // error e ⟂ r of ‖e‖ = ρ‖r‖ has cosine 2/(2 + ρ²), so the baseline's c gives ρ_b² = 2(1 − c)/c
  // and 2ρ_b gives c / (c + 4(1 − c)) ≈ 1 − 4(1 − c): 1 − cosine grows as the error squared (a
  // 1 − 2(1 − c) limit failed a correct bf16 dQ that rel_l2's 2x held: backward_criteria.cpp).
  const double cos_limit = std::min(tol.min_cosine, spread_cosine(base_cos, kBaselineSpread));
  const double rel_limit = std::max(tol.max_rel_l2, kBaselineSpread * base_rel_l2);
  const char* loosened = " (loosened to 2x the same-dtype baseline's own, which is worse than the fixed limit here)";
  add("cosine", value_role(true), Bound::at_least, r.cosine, cos_limit, true,
      nothing_compared ? none_compared
                       : std::string("2<o,r>/(|o|^2+|r|^2)") + (cos_limit < tol.min_cosine ? kCosineLoosened : ""));
  add("rel_l2", value_role(true), Bound::at_most, r.rel_l2, rel_limit, true,
      nothing_compared ? none_compared : std::string("|o-r|/|r|") + (rel_limit > tol.max_rel_l2 ? loosened : ""));
  const double blimit = tol.baseline_k * r.baseline_max_abs + tol.baseline_atol * max_ref;
  add("baseline_relative", value_role(std::isfinite(blimit)), Bound::at_most, r.max_abs, blimit, true,
      nothing_compared     ? none_compared
      : std::isinf(blimit) ? "reported only: the same-dtype eager baseline overflowed, so the rule does not apply"
      : ref.flash_baseline.empty()
          ? "max|o-r| against k*max|baseline-r| + atol*max|r| (same-dtype eager baseline)"
          : p.dtype == DType::f32
          ? "max|o-r| against k*max|baseline-r| + atol*max|r| (baseline: the worse of eager fp32 and fp32 FlashAttention)"
          : "max|o-r| against k*max|baseline-r| + atol*max|r| (baseline: the worse of eager and FlashAttention with P in " +
                std::string(to_string(p.dtype)) + ")");

  // The rounding criteria are statistics over the significant elements, and a statistic needs
  // independent evidence: identical rows, query heads sharing a KV head and q, constant rows repeat
  // one (kernel, oracle) pair hundreds of times, and the mean of 8 rounding errors copied 256
  // times each is noise however many elements carry it (issue 21: constant rows, Sq = 1, GQA).
  // So each distinct pair counts once, and the rules apply with kMinDistinctPairs* (criteria.h) of them.
  RoundingEvidence ev = rounding_evidence(od, evidence, tol.ulp_n);
  auto too_few = [](int64_t floor) { return " (< " + std::to_string(floor) + ")"; };
  auto evidence_text = [&] {
    char buf[160];
    std::snprintf(buf, sizeof buf, "%.0f distinct (kernel, oracle) pairs among %lld significant elements", ev.distinct,
                  static_cast<long long>(significant));
    return std::string(buf);
  };
  const bool enough_for_ulp = ev.distinct >= static_cast<double>(kMinDistinctPairsUlp);
  const bool ulp_judged = tol.ulp_max_frac < 1.0 && enough_for_ulp;
  add("ulp", value_role(ulp_judged), Bound::at_most, ev.frac_over_n, tol.ulp_max_frac, true,
      nothing_compared             ? none_compared
      : tol.ulp_max_frac >= 1.0    ? std::string("reported only for this dtype (see verify/TOLERANCE.md)")
      : !enough_for_ulp            ? "reported only: " + evidence_text() + too_few(kMinDistinctPairsUlp)
                                   : "share of distinct (kernel, oracle) pairs of significant elements (|r| >= max|r|/16) more than " +
                                         std::to_string(tol.ulp_n) + " ULP from the rounded oracle; " + evidence_text());

  // Rounding direction. Both signed means are kept: truncation toward zero shows in the one signed
  // by the value (|o| too small everywhere), rounding toward -inf or +inf in the plain one (a
  // signed-by-value mean cancels it when half the outputs are negative).
  r.rounding_bias = ev.bias;
  r.distinct_pairs = ev.distinct;
  const bool enough_for_bias = ev.distinct >= static_cast<double>(kMinDistinctPairsBias);
  const bool bias_judged = tol.max_rounding_bias < 1.0 && enough_for_bias;
  // A correct kernel can lean one way too, where its own arithmetic does before the last rounding:
  // P rounded to bf16 when every P of a row is nearly equal (softcap 5 on constant rows) rounds
  // them all alike, and the replica's O then sat -0.41 output ULPs low on every element (an H200
  // campaign, 1 case in 200). So, as for cosine and rel_l2, the limit is never stricter than
  // kBaselineSpread times the same-dtype baselines' own bias on this problem; truncation and
  // directed rounding still show wherever the baselines round to nearest (|bias| ~ 0).
  double base_bias = 0;
  for (DistinctPairs* b : {&eager_evidence, &flash_evidence})
    if (b->distinct() >= static_cast<double>(kMinDistinctPairsBias))
      base_bias = std::max(base_bias, std::fabs(rounding_evidence(od, *b, tol.ulp_n).bias));
  const double bias_limit = std::max(tol.max_rounding_bias, kBaselineSpread * base_bias);
  add("rounding_bias", value_role(bias_judged), Bound::magnitude_at_most, ev.bias, bias_limit, true,
      nothing_compared                ? none_compared
      : tol.max_rounding_bias >= 1.0  ? std::string("reported only for this dtype (see verify/TOLERANCE.md)")
      : !enough_for_bias              ? "reported only: " + evidence_text() + too_few(kMinDistinctPairsBias)
                                      : "mean signed error in output ULPs over distinct (kernel, oracle) pairs of significant "
                                        "elements (plain, or signed by the value: the larger); " + evidence_text() +
                                            (bias_limit > tol.max_rounding_bias ? loosened : ""));

  if (kernel_lse) {
    const auto& lse = *kernel_lse;
    if (lse.size() != static_cast<size_t>(all_rows)) throw std::invalid_argument("verify_output: lse size mismatch");
    double max_abs = 0, max_rel = 0;
    // The row nearest its own limit: its error and limit are the ones reported, so the pair printed
    // always compares as the verdict did (each row has its own limit; no flat limit stands for all).
    double worst_ratio = -1, worst_err = 0, worst_limit = tol.lse_atol;
    int64_t bad = 0, bad_empty = 0, unwritten = 0, measured = 0;
    for (size_t i = 0; i < lse.size(); ++i) {
      const float k = lse[i];
      const double o = oracle.lse[i];
      const FlatRows::Place pl = flat.at(static_cast<int64_t>(i));
      const MapFlag flag = classify_lse(k, o, pl.keys.empty(), opt.empty_lse);
      SequenceVerdict* seq = per_sequence ? &seqs[static_cast<size_t>(pl.b)] : nullptr;
      if (seq && is_flagged(flag)) ++seq->flagged;
      if (flag == MapFlag::unwritten) ++unwritten;
      if (flag == MapFlag::empty_row_nonzero) ++bad_empty;
      if (flag == MapFlag::nan_mismatch) ++bad;
      if (flag != MapFlag::ok) continue;
      ++measured;
      const double err = std::fabs(k - o), limit = lse_limit(tol, o, ref.score_bound[i], ref.score_error);
      max_abs = std::max(max_abs, err);
      max_rel = std::max(max_rel, err / std::max(std::fabs(o), 1e-30));
      if (err > limit) {
        ++bad;
        if (seq) ++seq->lse_over;
      }
      if (err / limit > worst_ratio) {
        worst_ratio = err / limit;
        worst_err = err;
        worst_limit = limit;
      }
    }
    r.lse_max_abs = max_abs;
    r.lse_max_rel = max_rel;
    r.unwritten += unwritten;
    r.empty_row_violations += bad_empty;
    const std::string counts = std::to_string(bad) + " rows off by more than their limit or NaN/Inf where the oracle is not, " +
                               std::to_string(bad_empty) + " empty rows not " +
                               (opt.empty_lse == EmptyRowLse::neg_inf ? "-inf" : "+inf") + ", " + std::to_string(unwritten) +
                               " unwritten";
    add("lse", measured ? Role::judged : Role::not_computed, Bound::at_most, worst_err, worst_limit,
        bad == 0 && unwritten == 0 && bad_empty == 0,
        measured ? std::string("|lse-oracle| (natural log) of the row nearest its own limit atol + rtol*(|lse| + max|score|)") +
                       (ref.score_error > 0 ? " + the fp8 tensor cores' accumulation error of the scores" : "") + "; " + counts
                 : "not computed: no row with a finite LSE to compare; " + counts);
  }
  // Which sequence failed: its own flagged elements, LSE rows past their limits, or an element past
  // baseline_relative's limit (the one whole-output limit a single element can break).
  for (size_t b = 0; b < seqs.size(); ++b) {
    SequenceVerdict& v = seqs[b];
    v.b = static_cast<int64_t>(b);
    v.sq = p.sq(v.b);
    v.skv = p.skv(v.b);
    v.max_abs_limit = blimit;
    v.pass = v.flagged == 0 && v.lse_over == 0 && !(std::isfinite(blimit) && v.max_abs > blimit);
  }
  r.sequences = std::move(seqs);
  if (opt.error_maps) {
    // Ratio 1 is baseline_relative's limit; when that is not finite (the eager baseline overflowed)
    // its atol part, and when that is 0 (an all-zero oracle) any error is infinitely far past it.
    const double atol_part = tol.baseline_atol * max_ref;
    const double unit = std::isfinite(blimit) && blimit > 0 ? blimit : atol_part > 0 ? atol_part : DBL_MIN;
    r.maps = error_maps(p, ref, kernel_o, kernel_lse, opt, r, unit);
  }
  return r;
}

}  // namespace flashcheck
