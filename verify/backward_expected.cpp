#include "verify/backward_expected.h"

#include <cmath>

#include "reference/gpu_oracle.h"
#include "reference/mask.h"
#include "reference/score_mod.h"
#include "reference/sequences.h"
#include "verify/expected.h"
#include "verify/range_max.h"
#include "verify/report.h"

namespace flashcheck {

namespace {

double norm(const float* x, int64_t n) {
  double t = 0;
  for (int64_t i = 0; i < n; ++i) t += static_cast<double>(x[i]) * x[i];
  return std::sqrt(t);
}

// Largest of `norms` over a row's visible keys, as a scan from 0 would find it: a NaN norm never
// wins (std::max(m, NaN) keeps m), an infinite one does. A sparse table (verify/range_max.h):
// scanning every row's keys was O(rows × keys), 19 s of a (4,16,8192,128) check.
RangeMax key_maxima(std::vector<double> norms) {
  for (double& x : norms)
    if (std::isnan(x)) x = 0;
  return RangeMax(std::move(norms));
}

// Marks the rows whose δ reaches kUnresolvedDelta, and every key such a row sees (of its KV head).
void find_unresolved(const Problem& p, const Inputs& in, BackwardExpected& e) {
  const Sequences s(p);
  const int64_t dqk = p.head_dim_qk;
  e.unresolved_rows.assign(static_cast<size_t>(p.lse_elems()), 0);
  e.unresolved_keys.assign(static_cast<size_t>(s.total_kv() * p.heads_kv), 0);
  e.unresolved_sinks.assign(static_cast<size_t>(p.heads_q), 0);
  const double rounding = score_rounding(dqk);
  const bool fp8 = is_fp8(p.dtype);
  std::vector<char> sink_hit(static_cast<size_t>(p.batch * p.heads_q), 0);
  int64_t count = 0;
  // (sequence, KV head) pairs own disjoint rows and keys; a sequence's sinks are marked apart.
#pragma omp parallel for collapse(2) schedule(dynamic, 1) reduction(+ : count)
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t hk = 0; hk < p.heads_kv; ++hk) {
      const int64_t skv = s.skv(b), d = alignment_offset(p, s.sq(b), skv);
      const double k_mul = fp8 ? descale_of(p, in.descale_k, b, hk) : 1.0, q_mul = fp8 ? descale_of(p, in.descale_q, b, hk) : 1.0;
      std::vector<double> kn(static_cast<size_t>(skv));
      for (int64_t j = 0; j < skv; ++j) kn[static_cast<size_t>(j)] = k_mul * norm(&in.k[static_cast<size_t>(s.k_row(b, hk, j))], dqk);
      const RangeMax kmax_of = key_maxima(std::move(kn));
      std::vector<int64_t> cover(static_cast<size_t>(skv) + 1, 0);  // unresolved rows over each key
      for (int64_t h = hk * p.group(); h < (hk + 1) * p.group(); ++h) {
        const double slope = p.alibi == Alibi::none ? 0.0 : std::fabs(alibi_slope(p, in.alibi_slopes.data(), b, h));
        for (int64_t i = 0; i < s.sq(b); ++i) {
          const KeyRange vis = visible_range(p, b, i);
          if (vis.empty()) continue;
          const double kmax = kmax_of(vis.lo, vis.hi);
          const int64_t center = p.alibi == Alibi::signed_ ? i : i + d;
          const double far = static_cast<double>(std::max(std::llabs(center - vis.lo), std::llabs(center - (vis.hi - 1))));
          const double bound = std::fabs(p.softmax_scale()) * q_mul * norm(&in.q[static_cast<size_t>(s.q_row(b, h, i))], dqk) * kmax + slope * far;
          if (!(rounding * bound >= kUnresolvedDelta)) continue;
          e.unresolved_rows[static_cast<size_t>(s.lse_at(b, h, i))] = 1;
          sink_hit[static_cast<size_t>(b * p.heads_q + h)] = 1;
          ++count;
          ++cover[static_cast<size_t>(vis.lo)];
          --cover[static_cast<size_t>(vis.hi)];
        }
      }
      int64_t over = 0;
      for (int64_t j = 0; j < skv; ++j) {
        over += cover[static_cast<size_t>(j)];
        if (over > 0) e.unresolved_keys[static_cast<size_t>(s.k_row(b, hk, j) / dqk)] = 1;
      }
    }
  e.count_unresolved_rows = count;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_q; ++h)
      if (sink_hit[static_cast<size_t>(b * p.heads_q + h)]) e.unresolved_sinks[static_cast<size_t>(h)] = 1;
}

std::vector<double> sink_terms(const Problem& p, const Inputs& in, const ReplicaResult& fwd, std::span<const float> d_out) {
  const Sequences s(p);
  std::vector<double> t(static_cast<size_t>(p.heads_q), 0.0);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_q; ++h) {
      const double sink = in.sinks[static_cast<size_t>(h)];
      for (int64_t i = 0; i < s.sq(b); ++i) {
        const double lse = fwd.lse[static_cast<size_t>(s.lse_at(b, h, i))];
        if (!std::isfinite(lse) || !std::isfinite(sink)) continue;
        double d = 0;
        const size_t o = static_cast<size_t>(s.o_row(b, h, i));
        for (int64_t c = 0; c < p.head_dim_v; ++c) d += std::fabs(static_cast<double>(d_out[o + static_cast<size_t>(c)]) * fwd.o[o + static_cast<size_t>(c)]);
        t[static_cast<size_t>(h)] += std::exp(sink - lse) * d;
      }
    }
  return t;
}

// The largest finite |LSE| (BackwardExpected::lse_magnitude).
double lse_magnitude(std::span<const float> lse) {
  double m = 0;
  for (float x : lse)
    if (std::isfinite(x)) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

// dq_terms, dk_terms and dv_terms and the rows' own (backward_expected.h), in fp64 from the inputs, dO and the attention each
// key receives.
void noise_scales(const Problem& p, const Inputs& in, std::span<const float> d_out, BackwardExpected& e) {
  const Sequences s(p);
  const int64_t dqk = p.head_dim_qk, dv = p.head_dim_v;
  const double scale = std::fabs(p.softmax_scale());
  const bool fp8 = is_fp8(p.dtype);
  const std::vector<float>& colsum = e.baselines.front().p_colsum;
  double dv_terms = 0;
  e.dq_row_terms.assign(static_cast<size_t>(p.lse_elems()), 0.0);
  std::vector<double> aq_of(static_cast<size_t>(p.batch * p.heads_kv), 0.0);  // per (sequence, KV head)
#pragma omp parallel for collapse(2) schedule(dynamic, 1) reduction(max : dv_terms)
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t hk = 0; hk < p.heads_kv; ++hk) {
      const int64_t skv = s.skv(b);
      const double k_mul = fp8 ? descale_of(p, in.descale_k, b, hk) : 1.0, q_mul = fp8 ? descale_of(p, in.descale_q, b, hk) : 1.0,
                   v_mul = fp8 ? descale_of(p, in.descale_v, b, hk) : 1.0;
      std::vector<double> kn(static_cast<size_t>(skv)), vn(static_cast<size_t>(skv));
      double most_attention = 0;
      for (int64_t j = 0; j < skv; ++j) {
        kn[static_cast<size_t>(j)] = k_mul * norm(&in.k[static_cast<size_t>(s.k_row(b, hk, j))], dqk);
        vn[static_cast<size_t>(j)] = v_mul * norm(&in.v[static_cast<size_t>(s.v_row(b, hk, j))], dv);
        const float c = colsum[static_cast<size_t>(s.k_row(b, hk, j) / dqk)];
        if (std::isfinite(c)) most_attention = std::max(most_attention, static_cast<double>(c));
      }
      const RangeMax kmax_of = key_maxima(std::move(kn)), vmax_of = key_maxima(std::move(vn));
      double aq = 0, dout_max = 0;
      for (int64_t h = hk * p.group(); h < (hk + 1) * p.group(); ++h)
        for (int64_t i = 0; i < s.sq(b); ++i) {
          const KeyRange vis = visible_range(p, b, i);
          if (vis.empty()) continue;
          const float* dor = &d_out[static_cast<size_t>(s.o_row(b, h, i))];
          for (int64_t c = 0; c < dv; ++c)
            if (std::isfinite(dor[c])) dout_max = std::max(dout_max, static_cast<double>(std::fabs(dor[c])));
          const double kmax = kmax_of(vis.lo, vis.hi), vmax = vmax_of(vis.lo, vis.hi);
          const double a = norm(&d_out[static_cast<size_t>(s.o_row(b, h, i))], dv) * vmax;
          const double qn = q_mul * norm(&in.q[static_cast<size_t>(s.q_row(b, h, i))], dqk);
          if (std::isfinite(a * kmax)) e.dq_row_terms[static_cast<size_t>(s.lse_at(b, h, i))] = scale * a * kmax;
          if (std::isfinite(a * qn)) aq = std::max(aq, a * qn);
        }
      dv_terms = std::max(dv_terms, dout_max * most_attention);
      aq_of[static_cast<size_t>(b * p.heads_kv + hk)] = aq;
    }
  // Per key: |scale|·max_i(a_i·‖q_i‖)·Σ_i P_ij, after the loop (sequences sharing a page share its
  // keys' rows, so two iterations could write one).
  e.dk_row_terms.assign(colsum.size(), 0.0);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t hk = 0; hk < p.heads_kv; ++hk)
      for (int64_t j = 0; j < s.skv(b); ++j) {
        const size_t r = static_cast<size_t>(s.k_row(b, hk, j) / dqk);
        const double t = scale * aq_of[static_cast<size_t>(b * p.heads_kv + hk)] * colsum[r];
        if (std::isfinite(t)) e.dk_row_terms[r] = std::max(e.dk_row_terms[r], t);
      }
  // The tensors' terms are their rows' largest.
  auto most = [](const std::vector<double>& v) { return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end()); };
  e.dq_terms = most(e.dq_row_terms);
  e.dk_terms = most(e.dk_row_terms);
  e.dv_terms = dv_terms;
}

}  // namespace

BackwardExpected make_backward_expected(const Problem& p, const Inputs& in, std::span<const float> d_out,
                                        OracleChoice oracle, std::vector<std::pair<std::string, double>>* timings) {
  BackwardExpected e;
  std::vector<std::pair<std::string, double>> laps;
  PhaseTimer clock(laps);
  const bool gpu = oracle_on_gpu(p, RowSet::all(p), oracle);
  if (gpu) {
    try {
      e.oracle = naive_attention_backward_gpu(p, in, d_out);
    } catch (const OracleDoesNotFit& x) {
      throw CannotTest(std::string("the GPU backward oracle cannot hold this problem: ") + x.what());
    }
    clock.lap("backward oracle (GPU)");
    add_gpu_timing(laps, "  oracle: ");  // where its wall time went (download: with dK/dV's sums)
  } else {
    e.oracle = naive_attention_backward(p, in, d_out);
    clock.lap("backward oracle (CPU)");
  }
  const std::vector<ReplicaPipeline> configs = backward_baseline_configs();
  std::optional<std::vector<ReplicaPipelineResult>> on_gpu;
  if (gpu && !gpu_replicas_not_covered(p, configs)) {
    try {
      on_gpu = backward_baselines_gpu(p, in, d_out, configs);
    } catch (const OracleDoesNotFit&) {
      // A (sequence, KV head) larger than the device holds: the CPU replicas take it.
    }
  }
  if (on_gpu) {
    clock.lap("backward baselines 1 and 2: forward and backward replicas (GPU)");
    for (ReplicaPipelineResult& r : *on_gpu) {
      if (e.baselines.empty()) e.lse_magnitude = lse_magnitude(r.forward.lse);
      if (p.sinks && e.dsinks_terms.empty()) e.dsinks_terms = sink_terms(p, in, r.forward, d_out);
      e.baselines.push_back(std::move(r.gradients));
    }
  } else {
    for (const ReplicaPipeline& c : configs) {
      const ReplicaResult fwd = replica_attention(p, in, c.forward);
      if (e.baselines.empty()) e.lse_magnitude = lse_magnitude(fwd.lse);
      clock.lap("backward baseline " + std::to_string(e.baselines.size() + 1) + ": forward replica (CPU)");
      e.baselines.push_back(replica_attention_backward(p, in, fwd.o, fwd.lse, d_out, c.backward));
      clock.lap("backward baseline " + std::to_string(e.baselines.size()) + ": backward replica (CPU)");
      if (p.sinks && e.dsinks_terms.empty()) e.dsinks_terms = sink_terms(p, in, fwd, d_out);
    }
  }
  find_unresolved(p, in, e);
  noise_scales(p, in, d_out, e);
  clock.lap("backward noise scales");
  if (timings) timings->insert(timings->end(), laps.begin(), laps.end());
  return e;
}

}  // namespace flashcheck
