#include "verify/criteria.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "reference/mask.h"
#include "verify/metrics.h"

namespace flashcheck {

namespace {

// How one output element stands before any error is measured. The criteria and the error maps both
// classify through these, so the page shows exactly what the verdict counted.
MapFlag classify_o(DType dt, float k, double o, bool empty_row) {
  if (is_poison(dt, k)) return MapFlag::unwritten;
  // Convention: exactly zero (either sign). NaN here is the classic 0/0 of an unguarded kernel.
  if (empty_row) return k == 0.0f ? MapFlag::empty_row_ok : MapFlag::empty_row_nonzero;
  return nonfinite_status_matches(k, o) ? (std::isfinite(k) ? MapFlag::ok : MapFlag::nonfinite_match) : MapFlag::nan_mismatch;
}

MapFlag classify_lse(float k, double o, bool empty_row, EmptyRowLse empty_lse) {
  if (is_poison(DType::f32, k)) return MapFlag::unwritten;
  if (empty_row) return k == (empty_lse == EmptyRowLse::neg_inf ? -INFINITY : INFINITY) ? MapFlag::empty_row_ok
                                                                                        : MapFlag::empty_row_nonzero;
  return nonfinite_status_matches(k, o) ? (std::isfinite(k) ? MapFlag::ok : MapFlag::nonfinite_match) : MapFlag::nan_mismatch;
}

// A row's LSE tolerance: it carries the scores' absolute rounding, so it grows with the row's
// largest |score| (score_bound), not only with |LSE|; for fp8 inputs also with the tensor cores'
// accumulation error of the scores (Expected::score_error).
double lse_limit(const Tolerance& tol, double lse, double score_bound, double score_error) {
  return tol.lse_atol + tol.lse_rtol * (std::fabs(lse) + score_bound) + score_error * score_bound;
}

bool is_flagged(MapFlag f) {
  return f == MapFlag::unwritten || f == MapFlag::nan_mismatch || f == MapFlag::empty_row_nonzero ||
         f == MapFlag::outside_contenders;
}

// Where flat row g of a result over a RowSet lies (reference/rows.h: [b][h][r], sequence b's block
// starting at first(b)·Hq): its sequence, query head and query row, and what that row sees. Dense
// problems have every sequence alike; varlen batches and seqused_k give each its own rows and keys,
// so whether a row is empty, and which KV tile holds its last key, is asked of its own sequence.
class FlatRows {
 public:
  FlatRows(const Problem& p, const RowSet& rows) : p_(p), rows_(rows) {
    start_.reserve(static_cast<size_t>(rows.batch()) + 1);
    for (int64_t b = 0; b <= rows.batch(); ++b) start_.push_back(b < rows.batch() ? rows.first(b) * p.heads_q : rows.total() * p.heads_q);
  }
  int64_t total() const { return start_.back(); }
  struct Place {
    int64_t b, h, ri, row;
    KeyRange keys;
  };
  Place at(int64_t g) const {
    // The last sequence starting at or before g: sequences without rows share their start with
    // the next, which holds g.
    const auto it = std::upper_bound(start_.begin(), start_.end() - 1, g);
    const int64_t b = static_cast<int64_t>(it - start_.begin()) - 1;
    const int64_t local = g - start_[static_cast<size_t>(b)], n = rows_.count(b);
    Place pl{b, local / n, local % n, rows_.row(b, local % n), {}};
    pl.keys = visible_range(p_, b, pl.row);
    return pl;
  }

 private:
  const Problem& p_;
  const RowSet& rows_;
  std::vector<int64_t> start_;
};

// Each checked row's entry in Expected::unresolved, or null: built once, asked per row.
class UnresolvedLookup {
 public:
  UnresolvedLookup(const Expected& ref, int64_t all_rows) : ref_(ref) {
    if (ref.unresolved.empty()) return;
    at_.assign(static_cast<size_t>(all_rows), -1);
    for (size_t u = 0; u < ref.unresolved.size(); ++u) at_[static_cast<size_t>(ref.unresolved[u].index)] = static_cast<int32_t>(u);
  }
  const Expected::UnresolvedRow* operator()(int64_t row) const {
    if (at_.empty() || at_[static_cast<size_t>(row)] < 0) return nullptr;
    return &ref_.unresolved[static_cast<size_t>(at_[static_cast<size_t>(row)])];
  }

 private:
  const Expected& ref_;
  std::vector<int32_t> at_;
};

// An element of a row fp32 cannot resolve: any softmax weights over its contenders give a value in
// [lo, hi]; the slack covers the output's rounding and P rounded to 16 bits before P·V (Σ of the
// rounded weights is 1 only to 2^-8 in bf16). P rounded to fp8 (fp8 inputs) moves Σ of the weights
// by up to 2^-4 (e4m3) or 2^-3 (e5m2): twice that, relative, is added.
MapFlag classify_unresolved(const Problem& p, float k, const Expected::UnresolvedRow& u, int64_t c) {
  const double lo = u.lo[static_cast<size_t>(c)], hi = u.hi[static_cast<size_t>(c)];
  const double mag = std::max(std::fabs(lo), std::fabs(hi));
  const double p_rounding = p.dtype == DType::e4m3 ? 0x1p-3 : p.dtype == DType::e5m2 ? 0x1p-2 : 0.0;
  const double slack = 4 * ulp_at(p.o_dtype(), mag) + p_rounding * mag;
  return k >= lo - slack && k <= hi + slack ? MapFlag::unresolved_ok : MapFlag::outside_contenders;
}

// The element-by-element maps behind the HTML page: a second pass over the output, run only when
// asked, so the verdict's own loop stays as it was. `unit` is the absolute error of ratio 1.
ErrorMaps error_maps(const Problem& p, const Expected& ref, const KernelResult& kernel, const CheckOptions& opt,
                     const Report& r, double unit) {
  const OracleResult& oracle = ref.oracle;
  const FlatRows flat(p, oracle.rows);
  const int64_t dv = p.head_dim_v, all_rows = flat.total();
  ErrorMaps m;
  m.unit = unit;
  // The grid is per sequence's own rows and keys (a kernel tiles each sequence of a varlen batch
  // from its start), so its extent is the longest sequence's.
  int64_t max_sq = 0, max_skv = 0;
  for (int64_t b = 0; b < p.batch; ++b) {
    max_sq = std::max(max_sq, p.sq(b));
    max_skv = std::max(max_skv, p.skv(b));
  }
  // A grid past ~1M cells (tiny declared tiles on long sequences) says no more than a coarser one
  // and would bloat the page: tiles double until it fits.
  m.tile_q = std::max<int64_t>(opt.tile_q, 1);
  m.tile_kv = std::max<int64_t>(opt.tile_kv, 1);
  auto ceil_div = [](int64_t a, int64_t b) { return std::max<int64_t>((a + b - 1) / b, 1); };
  while (ceil_div(max_sq, m.tile_q) * ceil_div(max_skv, m.tile_kv) > (int64_t{1} << 20)) {
    if (ceil_div(max_sq, m.tile_q) >= ceil_div(max_skv, m.tile_kv)) m.tile_q *= 2;
    else m.tile_kv *= 2;
  }
  m.q_tiles = ceil_div(max_sq, m.tile_q);
  m.kv_tiles = ceil_div(max_skv, m.tile_kv);
  m.tile_ratio.assign(static_cast<size_t>(m.q_tiles * m.kv_tiles), NAN);
  m.tile_flagged.assign(m.tile_ratio.size(), 0);
  if (r.worst) {
    m.head_b = r.worst->b;
    m.head_h = r.worst->h;
  }
  if (m.head_b >= oracle.rows.batch() || oracle.rows.count(m.head_b) == 0)  // a sequence without rows has no head to show
    for (int64_t b = 0; b < oracle.rows.batch(); ++b)
      if (oracle.rows.count(b) > 0) {
        m.head_b = b;
        m.head_h = 0;
        break;
      }
  const int64_t head_n = m.head_b < oracle.rows.batch() ? oracle.rows.count(m.head_b) : 0;
  for (int64_t ri = 0; ri < head_n; ++ri) m.rows.push_back(oracle.rows.row(m.head_b, ri));
  m.head_ratio.assign(static_cast<size_t>(head_n * dv), NAN);
  m.head_flag.assign(m.head_ratio.size(), MapFlag::ok);
  // Every sequence of a dense problem has the head's rows, so the LSE column's maximum runs over
  // every (b, h); a varlen sequence has rows of its own, and the maximum over the head's sequence.
  const bool same_rows = !p.varlen();
  const UnresolvedLookup unresolved(ref, all_rows);
  auto flag_element = [&](const FlatRows::Place& pl, int64_t col, MapFlag f) {
    ++m.flagged_total;
    if (m.flagged.size() < ErrorMaps::kMaxFlagged) m.flagged.push_back({pl.b, pl.h, pl.row, col, f});
  };
  if (kernel.lse) {
    m.lse_ratio.assign(static_cast<size_t>(head_n), NAN);
    m.lse_ratio_max.assign(static_cast<size_t>(head_n), NAN);
    m.lse_flag.assign(static_cast<size_t>(head_n), MapFlag::ok);
  }
  for (int64_t g = 0; g < all_rows; ++g) {
    const FlatRows::Place pl = flat.at(g);
    const bool empty = pl.keys.empty();
    // The cell of a checked row: its q-tile and the KV tile of its last visible key (0 if it sees none).
    const size_t t = static_cast<size_t>((pl.row / m.tile_q) * m.kv_tiles + std::max<int64_t>(pl.keys.hi - 1, 0) / m.tile_kv);
    const bool in_head = pl.b == m.head_b && pl.h == m.head_h;
    const Expected::UnresolvedRow* u = unresolved(g);
    for (int64_t c = 0; c < dv; ++c) {
      const size_t e = static_cast<size_t>(g * dv + c);
      MapFlag f = classify_o(p.o_dtype(), kernel.o[e], oracle.o[e], empty);
      if (f == MapFlag::ok && u) f = classify_unresolved(p, kernel.o[e], *u, c);
      float ratio = NAN;
      if (f == MapFlag::ok) {
        ratio = static_cast<float>(std::fabs(static_cast<double>(kernel.o[e]) - oracle.o[e]) / unit);
        if (!(m.tile_ratio[t] >= ratio)) m.tile_ratio[t] = ratio;  // NaN (no row yet) is replaced
      } else if (is_flagged(f)) {
        ++m.tile_flagged[t];
        flag_element(pl, c, f);
      }
      if (in_head) {
        m.head_ratio[static_cast<size_t>(pl.ri * dv + c)] = ratio;
        m.head_flag[static_cast<size_t>(pl.ri * dv + c)] = f;
      }
    }
    if (!kernel.lse) continue;
    const size_t i = static_cast<size_t>(g);
    const float k = (*kernel.lse)[i];
    const double o = oracle.lse[i];
    const MapFlag f = classify_lse(k, o, empty, opt.empty_lse);
    float ratio = NAN;
    if (f == MapFlag::ok) {
      ratio = static_cast<float>(std::fabs(k - o) / lse_limit(opt.tol, o, ref.score_bound[i], ref.score_error));
      if ((same_rows || pl.b == m.head_b) && pl.ri < head_n) {
        float& mx = m.lse_ratio_max[static_cast<size_t>(pl.ri)];
        if (!(mx >= ratio)) mx = ratio;
      }
    } else if (is_flagged(f)) {
      flag_element(pl, -1, f);
    }
    if (in_head) {
      m.lse_ratio[static_cast<size_t>(pl.ri)] = ratio;
      m.lse_flag[static_cast<size_t>(pl.ri)] = f;
    }
  }
  return m;
}

}  // namespace

Report verify_output(const Problem& p, const Expected& ref, const KernelResult& kernel, const CheckOptions& opt) {
  const OracleResult& oracle = ref.oracle;
  const std::vector<float>& baseline = ref.baseline;
  const Tolerance& tol = opt.tol;
  const FlatRows flat(p, oracle.rows);
  const DType od = p.o_dtype();  // the output's dtype: fp8 inputs write bf16 or f16
  const int64_t dv = p.head_dim_v, all_rows = flat.total();
  const size_t n_o = static_cast<size_t>(all_rows * dv);
  if (kernel.o.size() != n_o || baseline.size() != n_o || oracle.o.size() != n_o)
    throw std::invalid_argument("verify_output: kernel, baseline and oracle outputs differ in size");
  Report r;
  r.problem = p;
  r.rows_checked = p.varlen() ? oracle.rows.total() : oracle.num_rows();
  r.sampled = !oracle.rows.is_all();
  r.elements = static_cast<int64_t>(n_o);

  // The output's scale, from the oracle alone: the baseline rule's atol and the ULP rule's
  // "significant" threshold are relative to it.
  double max_ref = 0;
#pragma omp parallel for reduction(max : max_ref) schedule(static)
  for (size_t e = 0; e < n_o; ++e)
    if (std::isfinite(oracle.o[e])) max_ref = std::max(max_ref, std::fabs(oracle.o[e]));
  auto locate = [&](size_t e, double k, double o) {
    Location l;
    const FlatRows::Place pl = flat.at(static_cast<int64_t>(e / static_cast<size_t>(dv)));
    l.b = pl.b;
    l.h = pl.h;
    l.row = pl.row;
    l.col = static_cast<int64_t>(e % static_cast<size_t>(dv));
    l.q_tile = l.row / opt.tile_q;
    l.kv_tile = std::max<int64_t>(pl.keys.hi - 1, 0) / opt.tile_kv;
    l.kernel = k;
    l.oracle = o;
    return l;
  };

  // Production outputs hold 10^8..10^9 elements, so the pass runs over all threads. It is cut into
  // a fixed number of rows per chunk (not per thread) and the chunks' sums are added in chunk order:
  // the report is the same bits on 2 cores and on 128.
  struct Partial {
    CosineAccumulator cos;
    double diff2 = 0, ref2 = 0, ulp_sum = 0, max_abs = 0, baseline_max_abs = 0, worst_err = -1;
    // The baselines' own ‖b − r‖² and cosine terms over the same elements (eager; fp32 flash for f32).
    double eager_diff2 = 0, flash_diff2 = 0;
    CosineAccumulator eager_cos, flash_cos;
    uint64_t ulp_max = 0;
    int64_t ulp_count = 0, significant = 0, ulp_over_n = 0, compared = 0, unwritten = 0, nan_mismatches = 0,
            empty_row_violations = 0, outside_contenders = 0;
    size_t worst_e = 0, first_nan_e = SIZE_MAX, first_outside_e = SIZE_MAX;
  };
  constexpr int64_t kChunkRows = 256;
  const int64_t n_chunks = (all_rows + kChunkRows - 1) / kChunkRows;
  std::vector<Partial> parts(static_cast<size_t>(n_chunks));
  const UnresolvedLookup unresolved_row(ref, all_rows);
  // The significant elements' distinct (kernel, oracle) pairs: the rounding criteria's evidence;
  // and the baselines' own, for the direction a correct implementation rounds in on this problem.
  DistinctPairs evidence, eager_evidence, flash_evidence;
  // A batch whose sequences differ (varlen, seqused_k) is judged per sequence too: which one failed.
  // Counts and maxima, tallied per thread and merged: the same whatever thread saw which row.
  const bool per_sequence = p.varlen() || !p.seqused_kv.empty();
  std::vector<SequenceVerdict> seqs(per_sequence ? static_cast<size_t>(p.batch) : 0);
#pragma omp parallel
  {
  DistinctPairs mine, mine_eager, mine_flash;  // per thread, merged once at the end: the kept set is the same however the chunks fell
  std::vector<SequenceVerdict> my_seqs(seqs.size());
#pragma omp for schedule(dynamic, 4)
  for (int64_t c = 0; c < n_chunks; ++c) {
    Partial& a = parts[static_cast<size_t>(c)];
    for (int64_t gr = c * kChunkRows; gr < std::min(all_rows, (c + 1) * kChunkRows); ++gr) {
      const FlatRows::Place pl = flat.at(gr);
      const bool empty_row = pl.keys.empty();
      SequenceVerdict* seq = per_sequence ? &my_seqs[static_cast<size_t>(pl.b)] : nullptr;
      const Expected::UnresolvedRow* unresolved = unresolved_row(gr);
      for (size_t e = static_cast<size_t>(gr * dv); e < static_cast<size_t>((gr + 1) * dv); ++e) {
        const float k = kernel.o[e];
        const double o = oracle.o[e];
        const MapFlag flag = classify_o(od, k, o, empty_row);
        if (seq && is_flagged(flag)) ++seq->flagged;
        if (flag == MapFlag::unwritten || flag == MapFlag::nan_mismatch) {
          ++(flag == MapFlag::unwritten ? a.unwritten : a.nan_mismatches);
          a.first_nan_e = std::min(a.first_nan_e, e);
          continue;
        }
        if (flag == MapFlag::empty_row_nonzero) ++a.empty_row_violations;
        if (flag != MapFlag::ok) continue;
        if (unresolved) {  // judged by its contenders' values alone, kept out of every error figure
          if (classify_unresolved(p, k, *unresolved, static_cast<int64_t>(e % static_cast<size_t>(dv))) ==
              MapFlag::outside_contenders) {
            ++a.outside_contenders;
            if (seq) ++seq->flagged;
            a.first_outside_e = std::min(a.first_outside_e, e);
          }
          continue;
        }
        const double err = std::fabs(static_cast<double>(k) - o);
        if (seq) {
          ++seq->compared;
          seq->max_abs = std::max(seq->max_abs, err);
        }
        a.cos.add(k, o);
        ++a.compared;
        a.diff2 += err * err;
        a.ref2 += o * o;
        a.max_abs = std::max(a.max_abs, err);
        // An eager baseline that overflows (f16 scores past 65504) has no error to scale by: the
        // rule then does not apply, and the remaining criteria judge alone.
        double berr = std::fabs(static_cast<double>(baseline[e]) - o);
        a.eager_diff2 += berr * berr;
        a.eager_cos.add(baseline[e], o);
        if (!ref.flash_baseline.empty()) {
          const double ferr = std::fabs(static_cast<double>(ref.flash_baseline[e]) - o);
          a.flash_diff2 += ferr * ferr;
          a.flash_cos.add(ref.flash_baseline[e], o);
          berr = std::max(berr, ferr);
        }
        a.baseline_max_abs = std::isfinite(berr) ? std::max(a.baseline_max_abs, berr) : INFINITY;
        if (err > a.worst_err) {
          a.worst_err = err;
          a.worst_e = e;
        }
        const uint64_t u = ulp_distance(od, k, round_to(od, static_cast<float>(o)));
        a.ulp_max = std::max(a.ulp_max, u);
        a.ulp_sum += static_cast<double>(u);
        ++a.ulp_count;
        // The ULP rule counts significant elements only: where an output cancels to near 0 its ULP
        // is tiny and any fp32 accumulation lands many ULPs away, which says nothing about the kernel.
        if (std::fabs(o) >= max_ref / 16) {
          ++a.significant;
          if (u > tol.ulp_n) ++a.ulp_over_n;
          mine.add(k, o);
          if (std::isfinite(baseline[e])) mine_eager.add(baseline[e], o);
          if (!ref.flash_baseline.empty() && std::isfinite(ref.flash_baseline[e])) mine_flash.add(ref.flash_baseline[e], o);
        }
      }
    }
  }
#pragma omp critical(fc_rounding_evidence)
  {
    evidence.merge(mine);
    eager_evidence.merge(mine_eager);
    flash_evidence.merge(mine_flash);
    for (size_t b = 0; b < seqs.size(); ++b) {
      seqs[b].compared += my_seqs[b].compared;
      seqs[b].flagged += my_seqs[b].flagged;
      seqs[b].max_abs = std::max(seqs[b].max_abs, my_seqs[b].max_abs);
    }
  }
  }
  CosineAccumulator cos, eager_cos, flash_cos;
  double eager_diff2 = 0, flash_diff2 = 0;
  double diff2 = 0, ref2 = 0, ulp_sum = 0, worst_err = -1;
  int64_t ulp_count = 0, significant = 0;
  size_t worst_e = 0, first_nan_e = SIZE_MAX, first_outside_e = SIZE_MAX;
  int64_t outside_contenders = 0;
  for (const Partial& a : parts) {
    for (auto [to, from] : {std::pair{&cos, &a.cos}, {&eager_cos, &a.eager_cos}, {&flash_cos, &a.flash_cos}}) {
      to->xy += from->xy;
      to->xx += from->xx;
      to->yy += from->yy;
    }
    eager_diff2 += a.eager_diff2;
    flash_diff2 += a.flash_diff2;
    diff2 += a.diff2;
    ref2 += a.ref2;
    ulp_sum += a.ulp_sum;
    ulp_count += a.ulp_count;
    significant += a.significant;
    r.ulp_over_n += a.ulp_over_n;
    r.compared += a.compared;
    r.unwritten += a.unwritten;
    r.nan_mismatches += a.nan_mismatches;
    r.empty_row_violations += a.empty_row_violations;
    r.max_abs = std::max(r.max_abs, a.max_abs);
    r.baseline_max_abs = std::max(r.baseline_max_abs, a.baseline_max_abs);
    r.ulp_max = std::max(r.ulp_max, a.ulp_max);
    if (a.worst_err > worst_err) {  // strictly larger: the first such element in order, as one pass finds
      worst_err = a.worst_err;
      worst_e = a.worst_e;
    }
    first_nan_e = std::min(first_nan_e, a.first_nan_e);
    outside_contenders += a.outside_contenders;
    first_outside_e = std::min(first_outside_e, a.first_outside_e);
  }
  if (worst_err >= 0) r.worst = locate(worst_e, kernel.o[worst_e], oracle.o[worst_e]);
  if (first_outside_e != SIZE_MAX) r.worst = locate(first_outside_e, kernel.o[first_outside_e], oracle.o[first_outside_e]);
  if (first_nan_e != SIZE_MAX) r.worst = locate(first_nan_e, kernel.o[first_nan_e], oracle.o[first_nan_e]);
  r.cosine = cos.value();
  r.rel_l2 = ref2 > 0 ? std::sqrt(diff2 / ref2) : (diff2 > 0 ? INFINITY : 0.0);
  r.ulp_mean = ulp_count ? ulp_sum / static_cast<double>(ulp_count) : 0.0;

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

  if (kernel.lse) {
    const auto& lse = *kernel.lse;
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
    r.maps = error_maps(p, ref, kernel, opt, r, unit);
  }
  return r;
}

}  // namespace flashcheck
