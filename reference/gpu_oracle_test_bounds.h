// The bounds gpu_oracle_test.cpp holds the GPU oracle to, and its CPU twins (included by that test
// alone, which builds with -ffp-contract=off: the twins' fp32 steps must round one by one).
//
// ── The fp64 bound (per row i, visible keys j, u = 2⁻⁵³, γ_k = k·u/(1 − k·u)) ─────────────────
// Exact quantities: q̃, k̃, ṽ the inputs times their fp8 descale (exact in fp64; 1 for other
// dtypes), s_j = σ·Σ_d q̃_d k̃_jd (σ the fp64 scale), a_j = |σ|·Σ_d |q̃_d k̃_jd|; c_j = C·tanh(s_j/C)
// with softcap C (c_j = s_j without), β_j the ALiBi bias, t_j = c_j + β_j the final score;
// m = max(max_j t_j, sink), x_j = t_j − m, ℓ = Σ_j e^{x_j} + e^{sink − m}, w_j = e^{x_j}/ℓ and
// w_sink = e^{sink − m}/ℓ; O_d = Σ_j w_j ṽ_jd, LSE = m + log ℓ. Both implementations (CPU: BLAS
// GEMMs, any blocking; GPU: FP64 mma, any order; both apply softcap and bias with separate
// roundings) then satisfy:
//  1. Scores. Products of fp32-representable values are exact in fp64 (and those of fp8 values
//     times fp32 descales are whenever the partial sums are), so a dot product in any summation
//     order errs by at most γ_D·Σ|q̃ k̃|, and not at all when every product and partial sum is
//     representable: all products are multiples of 2^L (L: lowest set bit over the nonzero
//     products) and Σ|q̃ k̃| < 2^(L+53) — always the case for bf16/f16 inputs of moderate range.
//     With the rounding of ·σ: |ŝ_j − s_j| ≤ e_j := u|s_j| + (1+u)·γ_D·a_j·[dot not exact].
//     Softcap: ĉ = rd(C·T), T = tanh(rd(ŝ/C))(1 + ε_t), |ε_t| ≤ η_t (CUDA's and glibc's fp64 tanh
//     are documented within 2 ulp: η_t = 3 ulp = 6u). tanh is 1-Lipschitz, so
//       |ĉ_j − c_j| ≤ E^c_j := (e_j + u(|s_j| + e_j))(1 + η_t + 2u) + |c_j|(η_t + 2u)
//     (an infinite s_j caps to ±C exactly on both sides: E^c_j = 0). ALiBi: β̂ = rd(slope·dist),
//     t̂ = rd(ĉ + β̂): |t̂_j − t_j| ≤ E_j := (E^c_j + u|β_j|)(1 + u) + u|t_j|.
//  2. Weights. The shift m̂ cancels between numerator and denominator, so only the score errors,
//     the rounding of x̂_j = t̂_j − m̂ (≤ u|x̂_j|, |x̂_j| ≤ |x_j| + E_j + E, E = max E_j) and exp's
//     own error η (CUDA exp ≤ 1 ulp: η = 2u, measured 0.87 ulp on an H100; the CPU oracle's exps —
//     glibc's libmvec for keys, measured within 2.97 ulp on glibc 2.36 and 2.39, and its scalar exp
//     for the sink — are taken at 4 ulp: η = 8u) perturb
//     p̂_j = p_j(1 + ρ_j), with
//       ρ_j = expm1(E_j + u(|x_j| + E_j + E))·(1 + η) + η,   ρ_sink = expm1(u(|x_sink| + E))·(1 + η) + η.
//     ℓ̂ = Σ p̂ summed in any order over n' terms (the sink's included): ℓ̂ = ℓ(1 + ρ_ℓ),
//       |ρ_ℓ| ≤ ρ̄ + γ_{n'−1}(1 + ρ̄),  ρ̄ = Σ_j w_j ρ_j + w_sink ρ_sink.
//  3. Output. Ô_d = Σ_j (p̂_j / ℓ̂) ṽ_jd summed in any order with one more rounding for the divide
//     (both divide the sum): each weight is off by w_j(ρ_j + ρ_ℓ)/(1 − ρ_ℓ),
//       |Ô_d − O_d| ≤ B_d := Σ_j w_j |ṽ_jd|·((ρ_j + ρ_ℓ)/(1 − ρ_ℓ) + γ_{n+2}) + n·2⁻¹⁰²⁰·max_j|ṽ_jd|
//     (the last term: weights in fp64's subnormal range, where relative error is unbounded).
//  4. LSE = m̂ + log ℓ̂ = log(Σ_j e^{t̂_j}(1 + r_j) + e^{sink}(1 + r_sink)) up to the sum's and log's
//     roundings:  |LSÊ − LSE| ≤ −log(1 − ρ̄ − γ_{n'−1}) + 2u|log ℓ̂| + u|LSÊ|.
// GPU and CPU each satisfy their bound (η differs), so |GPU − CPU| ≤ B_gpu + B_cpu. The tests
// record max |GPU − CPU| / bound and require it to exceed 1/100 over their cases, for O and LSE
// alike, i.e. the bound tightened 100× fails: it is not vacuous.
//
// ── The baseline bound (per output element x of a row with n visible keys) ───────────────────
// dtype_baseline_gpu repeats every fp32 operation of the CPU baseline in the same order (this
// assumes the CPU build does not contract a·b + c into FMAs, true for x86-64 builds without
// -march), except exp and tanh: glibc's expf/tanhf vs (float)exp(double)/(float)tanh(double). exp
// is faithful on both sides, so each e_j agrees or differs by one fp32 ulp (U = 2⁻²³ relative).
// glibc's tanhf errs by up to 2.19 ulp (measured over every float in [2⁻³¹, 12]), so with a
// softcap the tanh values T_j differ by at most 4 ulp, the capped score by τ_j = C·4·ulp(T_j) +
// ulp(c_j) (+ ulp(t_j) with ALiBi), the max by Δm ≤ max τ_j, and each exp's argument by
// τ_j + Δm + ulp(t_j − m) (the subtraction may round apart). Per key, the relative difference of
// e_j is then δ_j = expm1(that)·(1 + U) + U (δ_j = U without softcap: bitwise equal scores), and:
//   ℓ (n' sequential sums):        Δℓ/ℓ ≤ δ_ℓ := Σ_j δ_j e_j/ℓ (sink's included) + (n' + 1)·U
//   q_j = e_j / ℓ:                 |Δq_j| ≤ δ_qj·q_j, δ_qj = δ_j + δ_ℓ + 2U
//   p_j = rd(q_j):                 |Δp_j| ≤ δ_qj·q_j + ulp_d(q_j) (a rounding boundary may lie between)
//   acc = Σ p_j v_j (n sums):      |Δacc| ≤ Σ_j |Δp_j||v_jx|(1 + U) + (n + 1)·U·Σ_j q_j|v_jx|
//   fp8: a = acc·v_descale:        |Δa| ≤ v_descale·|Δacc|(1 + U) + ulp(|a| + v_descale·|Δacc|)
//   o = rd(acc) (fp8: rd(a)):      |Δo| ≤ |Δacc| + ulp_d(|o| + |Δacc|)
// ulp_d is one unit in the last place of the rounding dtype (bf16 2⁻⁷, f16 2⁻¹⁰, f32 2⁻²³
// relative, with the subnormal floor). Where no exp or tanh differs the results are bitwise equal
// (the tests print how often); NaN and Inf positions must match exactly.
#pragma once
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "reference/inputs.h"
#include "reference/mask.h"
#include "reference/naive.h"
#include "reference/score_mod.h"
#include "reference/sequences.h"

namespace flashcheck::gpu_oracle_test {

constexpr double kU = 0x1p-53;
inline double gamma(double k) { return k * kU / (1 - k * kU); }
constexpr double kTanhEta = 6 * kU;  // 3 ulp of fp64 tanh, either side
constexpr double kFaint = -708.3964185322641;  // log(DBL_MIN): weights e^x below are subnormal or 0

// One evaluated row of a problem, with everything a bound or a twin reads about it.
struct RowRef {
  int64_t b = 0, h = 0, hk = 0, i = 0;
  int64_t lo = 0, hi = 0;  // visible keys [lo, hi)
  int64_t out = 0;         // result row: RowSet::index(b, h, r, Hq)
  const float* q = nullptr;  // the query row
  const float* k = nullptr;  // key 0 of the row's sequence and KV head (key j at k + j·Dqk)
  const float* v = nullptr;  // value 0 (value j at v + j·Dv)
  double dq = 1, dk = 1, dv = 1;  // fp8 descales
  double slope = 0;
  double sink = -INFINITY;
  int64_t d = 0;  // alignment offset
  int64_t n() const { return hi > lo ? hi - lo : 0; }
  std::string where(int64_t col) const {
    std::ostringstream os;
    os << "(b=" << b << ", h=" << h << ", row=" << i << (col < 0 ? ", lse" : ", col=" + std::to_string(col)) << ")";
    return os.str();
  }
};

inline std::vector<RowRef> row_refs(const Problem& p, const Inputs& in, const RowSet& rows) {
  const Sequences seqs(p);
  std::vector<RowRef> out;
  out.reserve(static_cast<size_t>(rows.total() * p.heads_q));
  const bool fp8 = is_fp8(p.dtype);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_q; ++h)
      for (int64_t r = 0; r < rows.count(b); ++r) {
        RowRef x;
        x.b = b, x.h = h, x.hk = p.kv_head(h), x.i = rows.row(b, r);
        const KeyRange kr = visible_range(p, b, x.i);
        x.lo = kr.lo, x.hi = kr.hi;
        x.out = rows.index(b, h, r, p.heads_q);
        x.q = in.q.data() + seqs.q_row(b, h, x.i);
        x.k = in.k.data() + seqs.k_row(b, x.hk, 0);
        x.v = in.v.data() + seqs.v_row(b, x.hk, 0);
        if (fp8) {
          x.dq = descale_of(p, in.descale_q, b, x.hk);
          x.dk = descale_of(p, in.descale_k, b, x.hk);
          x.dv = descale_of(p, in.descale_v, b, x.hk);
        }
        if (p.alibi != Alibi::none) x.slope = alibi_slope(p, in.alibi_slopes.data(), b, h);
        if (p.sinks) x.sink = in.sinks[static_cast<size_t>(h)];
        x.d = alignment_offset(p, p.sq(b), p.skv(b));
        out.push_back(x);
      }
  return out;
}

// Exponent of the lowest set bit of a finite nonzero value (x = odd · 2^result).
inline int low_bit(double x) {
  int e = 0;
  const double m = std::frexp(x, &e);  // x = m·2^e, m in [0.5, 1)
  const auto mant = static_cast<uint64_t>(std::ldexp(std::fabs(m), 53));
  return e - 53 + std::countr_zero(mant);
}

struct Agreement {
  int64_t compared = 0;        // finite elements held to the bound
  int64_t exact = 0;           // of which bitwise equal
  double max_ratio = 0;        // max |Δ| / bound over them
  double max_ratio_o = 0;      // the same over O elements alone
  std::string worst, failure;  // where, and the first violation
  std::mutex mu;
  void note(double diff, double bound, const std::string& where, bool is_lse = false) {
    const double ratio = bound > 0 ? diff / bound : (diff > 0 ? INFINITY : 0);
    std::lock_guard<std::mutex> lock(mu);
    ++compared;
    exact += diff == 0;
    if (ratio > max_ratio) max_ratio = ratio, worst = where;
    if (!is_lse) max_ratio_o = std::max(max_ratio_o, ratio);
  }
  void fail(const std::string& why) {
    std::lock_guard<std::mutex> lock(mu);
    if (failure.empty()) failure = why;
  }
};

inline bool same_nonfinite(double a, double b) { return std::isnan(a) ? std::isnan(b) : a == b; }

// Compares `got` (an implementation of the fp64 oracle: the GPU's, or the reordered CPU twin) with
// the CPU oracle `want` on every element, holding finite ones to B_got + B_cpu.
inline void check_oracle(const Problem& p, const Inputs& in, const OracleResult& want, const OracleResult& got,
                         double eta_got, Agreement& a) {
  const double eta_cpu = 8 * kU;  // libmvec's exp: 4 ulp (see the header comment)
  const int64_t dqk = p.head_dim_qk, dv = p.head_dim_v;
  const double sigma = p.softmax_scale(), cap = p.softcap;
  if (!(got.rows == want.rows) || got.o.size() != want.o.size() || got.lse.size() != want.lse.size())
    return a.fail("result shapes differ");
  // Lowest set bit of every q and k element (for the exactness test of step 1), computed once.
  auto low_bits = [](const std::vector<float>& x) {
    std::vector<int16_t> lb(x.size(), 0);
#pragma omp parallel for schedule(static)
    for (size_t e = 0; e < x.size(); ++e)
      if (x[e] != 0 && std::isfinite(x[e])) lb[e] = static_cast<int16_t>(low_bit(x[e]));
    return lb;
  };
  const std::vector<int16_t> lbq = low_bits(in.q), lbk = low_bits(in.k);
  const std::vector<RowRef> refs = row_refs(p, in, want.rows);
#pragma omp parallel for schedule(dynamic, 4)
  for (size_t t = 0; t < refs.size(); ++t) {
    const RowRef& r = refs[t];
    const int64_t n = r.n();
    const double* oc = &want.o[static_cast<size_t>(r.out * dv)];
    const double* og = &got.o[static_cast<size_t>(r.out * dv)];
    const double lc = want.lse[static_cast<size_t>(r.out)], lg = got.lse[static_cast<size_t>(r.out)];
    if (!std::isfinite(lc)) {  // empty row (−inf) or NaN row: every bit of the convention must match
      if (!same_nonfinite(lc, lg)) a.fail("LSE " + std::to_string(lg) + " where the CPU has " + std::to_string(lc) + " at " + r.where(-1));
      for (int64_t d = 0; d < dv; ++d)
        if (!(std::isnan(oc[d]) ? std::isnan(og[d]) : og[d] == oc[d]))
          a.fail("O " + std::to_string(og[d]) + " where the CPU has " + std::to_string(oc[d]) + " at " + r.where(d));
      continue;
    }
    const size_t qoff = static_cast<size_t>(r.q - in.q.data());
    const int desc_bits = is_fp8(p.dtype) ? low_bit(r.dq) + low_bit(r.dk) : 0;
    std::vector<double> s(static_cast<size_t>(n)), e(static_cast<size_t>(n));
    double m = r.sink;
    for (int64_t j = 0; j < n; ++j) {
      const int64_t key = r.lo + j;
      const size_t koff = static_cast<size_t>(r.k - in.k.data() + key * dqk);
      double dot = 0, abs = 0;
      int lo = std::numeric_limits<int>::max();
      for (int64_t d = 0; d < dqk; ++d) {
        const double prod = (in.q[qoff + static_cast<size_t>(d)] * r.dq) * (in.k[koff + static_cast<size_t>(d)] * r.dk);
        dot += prod;
        abs += std::fabs(prod);
        if (prod != 0) lo = std::min(lo, lbq[qoff + static_cast<size_t>(d)] + lbk[koff + static_cast<size_t>(d)] + desc_bits);
      }
      const bool exact = abs == 0 || abs * (1 + 1e-9) < std::ldexp(1.0, lo + 53);
      const double sj = dot * sigma;
      double err = kU * std::fabs(sj) + (exact ? 0 : (1 + kU) * gamma(double(dqk)) * abs * std::fabs(sigma));
      double x = sj;
      if (cap > 0) {
        if (std::isfinite(sj)) {
          x = cap * std::tanh(sj / cap);
          err = (err + kU * (std::fabs(sj) + err)) * (1 + kTanhEta + 2 * kU) + std::fabs(x) * (kTanhEta + 2 * kU);
        } else {
          x = std::isnan(sj) ? sj : std::copysign(cap, sj), err = 0;  // tanh(±inf) = ±1 on both sides
        }
      }
      if (p.alibi != Alibi::none) {
        const double beta = AlibiBias<double>{p.alibi, r.slope, r.d}(r.i, key);
        x += beta;
        err = (err + kU * std::fabs(beta)) * (1 + kU) + kU * std::fabs(x);
      }
      s[static_cast<size_t>(j)] = x;
      e[static_cast<size_t>(j)] = err;
      m = std::max(m, x);
    }
    // A finite LSE means a finite max; keys with t = −inf have p = 0 exactly on both sides.
    double E = 0, l = 0;
    for (int64_t j = 0; j < n; ++j)
      if (std::isfinite(s[static_cast<size_t>(j)])) E = std::max(E, e[static_cast<size_t>(j)]), l += std::exp(s[static_cast<size_t>(j)] - m);
    const bool sink = r.sink > -INFINITY;
    const double ps = sink ? std::exp(r.sink - m) : 0.0;
    l += ps;
    std::vector<double> w(static_cast<size_t>(n), 0.0), rho_g(w), rho_c(w);
    double rbar_g = 0, rbar_c = 0;
    for (int64_t j = 0; j < n; ++j) {
      const size_t J = static_cast<size_t>(j);
      if (!std::isfinite(s[J])) continue;
      const double x = s[J] - m, arg = std::expm1(e[J] + kU * (std::fabs(x) + e[J] + E));
      w[J] = std::exp(x) / l;
      rho_g[J] = arg * (1 + eta_got) + eta_got;
      rho_c[J] = arg * (1 + eta_cpu) + eta_cpu;
      rbar_g += w[J] * rho_g[J];
      rbar_c += w[J] * rho_c[J];
    }
    if (sink) {
      const double arg = std::expm1(kU * (std::fabs(r.sink - m) + E));
      rbar_g += ps / l * (arg * (1 + eta_got) + eta_got);
      rbar_c += ps / l * (arg * (1 + eta_cpu) + eta_cpu);
    }
    const double gl = gamma(double(std::max<int64_t>(n + (sink ? 1 : 0) - 1, 0)));
    const double rl_g = rbar_g + gl * (1 + rbar_g), rl_c = rbar_c + gl * (1 + rbar_c);
    const double log_l = std::log(l);
    // Each side: its weight and sum errors, log's ulp (2u|log ℓ|) and the final add (u|LSE|).
    const double lse_bound =
        -std::log1p(-rbar_g - gl) - std::log1p(-rbar_c - gl) + 4 * kU * std::fabs(log_l) + 2 * kU * std::fabs(lc);
    if (!std::isfinite(lg)) a.fail("LSE " + std::to_string(lg) + " where the CPU has " + std::to_string(lc) + " at " + r.where(-1));
    else {
      const double diff = std::fabs(lg - lc);
      if (diff > lse_bound) a.fail("LSE differs by " + std::to_string(diff) + " > bound " + std::to_string(lse_bound) + " at " + r.where(-1));
      a.note(diff, lse_bound, r.where(-1), true);
    }
    const double gn = gamma(double(n + 2));
    for (int64_t d = 0; d < dv; ++d) {
      double bound = 0, vmax = 0;
      bool finite_v = true, faint_inf = false;
      for (int64_t j = 0; j < n; ++j) {
        const double v = r.v[(r.lo + j) * dv + d] * r.dv;
        finite_v &= std::isfinite(v);
        faint_inf |= std::isinf(v) && !(s[static_cast<size_t>(j)] - m >= kFaint);
        vmax = std::max(vmax, std::fabs(v));
        const size_t J = static_cast<size_t>(j);
        if (w[J] > 0)
          bound += w[J] * std::fabs(v) * ((rho_g[J] + rl_g) / (1 - rl_g) + (rho_c[J] + rl_c) / (1 - rl_c) + 2 * gn);
      }
      bound += 2 * static_cast<double>(n) * 0x1p-1020 * vmax;
      if (!finite_v || !std::isfinite(oc[d])) {  // inf/NaN values reach the output: positions must match
        // An Inf at a key whose weight is below fp64's normal range is 0·Inf = NaN or tiny·Inf = Inf
        // on the CPU, depending on whether its exp underflowed to 0 or not; both are accepted
        // there, nothing finite is.
        const bool ok = faint_inf ? !std::isfinite(og[d]) && (std::isnan(og[d]) || std::isnan(oc[d]) || og[d] == oc[d])
                                  : same_nonfinite(oc[d], og[d]);
        if (!ok) a.fail("O " + std::to_string(og[d]) + " where the CPU has " + std::to_string(oc[d]) + " at " + r.where(d));
        continue;
      }
      const double diff = std::fabs(og[d] - oc[d]);
      if (!(diff <= bound))
        a.fail("O differs by " + std::to_string(diff) + " > bound " + std::to_string(bound) + " at " + r.where(d) +
               " (CPU " + std::to_string(oc[d]) + ")");
      a.note(diff, bound, r.where(d));
    }
  }
}

// ── The same-dtype baseline in scalar order ────────────────────────────────────────────────────
// One row of the baseline's contract (gpu_oracle.h), one score at a time, keys in order, fp32:
// the twin the GPU baseline is held to. verify/baseline.cpp takes the same steps in the same
// order, but runs its products through sgemm (its own blocked summation order) and sums ℓ in
// vector lanes, so the one-ulp bound is stated against this twin: a different summation order
// moves a score by O(γ_D·Σ|qk|) in fp32 and can flip its rounding to the dtype — a different
// computation, not a GPU error.
struct BaselineRow {
  std::vector<float> t, tanh_t;  // final scores of the visible keys; with softcap, the tanh values
  float m = -INFINITY, l = 0;    // the max (sink included) and ℓ (sink's share included)
};

inline void baseline_row(const Problem& p, const RowRef& r, BaselineRow& st, float* o) {
  const int64_t n = r.n(), dqk = p.head_dim_qk, dv = p.head_dim_v;
  const DType rd = p.o_dtype();
  const bool fp8 = is_fp8(p.dtype);
  const float scale = static_cast<float>(p.softmax_scale()), cap = static_cast<float>(p.softcap);
  const float qkd = static_cast<float>(r.dq) * static_cast<float>(r.dk), slope = static_cast<float>(r.slope);
  st.t.assign(static_cast<size_t>(n), 0.0f);
  st.tanh_t.assign(static_cast<size_t>(n), 0.0f);
  st.m = -INFINITY;
  for (int64_t j = 0; j < n; ++j) {
    const int64_t key = r.lo + j;
    const float* k = r.k + key * dqk;
    float acc = 0;
    for (int64_t x = 0; x < dqk; ++x) acc += r.q[x] * k[x];
    float x = fp8 ? acc * qkd : round_to(rd, acc);
    x = round_to(rd, x * scale);
    if (cap > 0) {
      st.tanh_t[static_cast<size_t>(j)] = std::tanh(x / cap);
      x = cap * st.tanh_t[static_cast<size_t>(j)];
    }
    if (p.alibi == Alibi::symmetric) x = x + -slope * static_cast<float>(std::llabs(r.i + r.d - key));
    if (p.alibi == Alibi::signed_) x = x + slope * static_cast<float>(key - r.i);
    st.t[static_cast<size_t>(j)] = x;
    st.m = std::max(st.m, x);
  }
  const float sink = static_cast<float>(r.sink);
  if (p.sinks) st.m = std::max(st.m, sink);
  st.l = 0;
  for (int64_t j = 0; j < n; ++j) st.l += std::exp(st.t[static_cast<size_t>(j)] - st.m);
  if (p.sinks) st.l += std::exp(sink - st.m);
  if (!o) return;
  std::fill(o, o + dv, 0.0f);
  if (n == 0) return;
  std::vector<float> acc(static_cast<size_t>(dv), 0.0f);
  const float vd = static_cast<float>(r.dv);
  for (int64_t j = 0; j < n; ++j) {
    const float pj = round_to(rd, std::exp(st.t[static_cast<size_t>(j)] - st.m) / st.l);
    const float* v = r.v + (r.lo + j) * dv;
    for (int64_t x = 0; x < dv; ++x) acc[static_cast<size_t>(x)] += pj * v[x];
  }
  // fp8: the sum over the raw values times the V descale.
  for (int64_t x = 0; x < dv; ++x) o[x] = round_to(rd, fp8 ? acc[static_cast<size_t>(x)] * vd : acc[static_cast<size_t>(x)]);
}

// O [rows.index(b, h, r, Hq)][Dv].
inline std::vector<float> scalar_order_baseline(const Problem& p, const Inputs& in, const RowSet& rows) {
  const std::vector<RowRef> refs = row_refs(p, in, rows);
  std::vector<float> out(static_cast<size_t>(rows.total() * p.heads_q * p.head_dim_v), 0.0f);
#pragma omp parallel for schedule(dynamic, 8)
  for (size_t t = 0; t < refs.size(); ++t) {
    BaselineRow st;
    baseline_row(p, refs[t], st, &out[static_cast<size_t>(refs[t].out * p.head_dim_v)]);
  }
  return out;
}

inline double ulp_of(DType d, double y) {
  y = std::fabs(y);
  const int mant = d == DType::bf16 ? 7 : d == DType::f16 ? 10 : 23;
  const double floor_ = d == DType::bf16 ? 0x1p-133 : d == DType::f16 ? 0x1p-24 : 0x1p-149;
  if (y == 0) return floor_;
  return std::max(std::ldexp(1.0, std::ilogb(y) - mant), floor_);
}

inline void check_baseline(const Problem& p, const Inputs& in, const RowSet& rows, const std::vector<float>& want,
                           const std::vector<float>& got, Agreement& a) {
  const int64_t dv = p.head_dim_v;
  const DType rd = p.o_dtype();
  if (got.size() != want.size()) return a.fail("result shapes differ");
  constexpr double U = 0x1p-23;
  const double cap = static_cast<float>(p.softcap);
  const std::vector<RowRef> refs = row_refs(p, in, rows);
#pragma omp parallel for schedule(dynamic, 4)
  for (size_t t = 0; t < refs.size(); ++t) {
    const RowRef& r = refs[t];
    const int64_t n = r.n();
    // The CPU twin's own steps replayed: the magnitudes the bound is made of.
    BaselineRow st;
    baseline_row(p, r, st, nullptr);
    // How far the two sides' scores, max and exps may drift apart (only tanh makes them differ).
    std::vector<double> tau(static_cast<size_t>(n), 0.0), delta(static_cast<size_t>(n), U);
    double dm = 0;
    if (cap > 0) {
      for (int64_t j = 0; j < n; ++j) {
        const size_t J = static_cast<size_t>(j);
        tau[J] = cap * 4 * ulp_of(DType::f32, st.tanh_t[J]) + ulp_of(DType::f32, cap * st.tanh_t[J]) +
                 (p.alibi != Alibi::none ? ulp_of(DType::f32, st.t[J]) : 0.0);
        if (std::isfinite(st.t[J])) dm = std::max(dm, tau[J]);
      }
      for (int64_t j = 0; j < n; ++j) {
        const size_t J = static_cast<size_t>(j);
        if (std::isfinite(st.t[J])) delta[J] = std::expm1(tau[J] + dm + ulp_of(DType::f32, st.t[J] - st.m)) * (1 + U) + U;
      }
    }
    // Weights e^{t − m}/ℓ of the twin (0 for keys at −inf: both sides' exp gives exactly 0 there).
    std::vector<double> qw(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) qw[static_cast<size_t>(j)] = std::exp(static_cast<double>(st.t[static_cast<size_t>(j)] - st.m)) / st.l;
    const double e_sink = p.sinks ? std::exp(static_cast<double>(static_cast<float>(r.sink) - st.m)) : 0.0;
    double dl = static_cast<double>(n + (p.sinks ? 1 : 0) + 1) * U;
    for (int64_t j = 0; j < n; ++j)
      if (qw[static_cast<size_t>(j)] > 0) dl += delta[static_cast<size_t>(j)] * qw[static_cast<size_t>(j)];
    if (e_sink > 0) dl += (cap > 0 ? std::expm1(dm + ulp_of(DType::f32, r.sink - st.m)) * (1 + U) + U : U) * e_sink / st.l;
    for (int64_t x = 0; x < dv; ++x) {
      const size_t idx = static_cast<size_t>(r.out * dv + x);
      const double c = want[idx], g = got[idx];
      if (!std::isfinite(c) || !std::isfinite(g)) {
        if (!same_nonfinite(c, g))
          a.fail("baseline " + std::to_string(g) + " where the CPU has " + std::to_string(c) + " at " + r.where(x));
        continue;
      }
      double dacc = 0, A = 0;
      for (int64_t j = 0; j < n; ++j) {
        const size_t J = static_cast<size_t>(j);
        const double qj = qw[J];
        if (!(qj > 0)) continue;
        const double dq = delta[J] + dl + 2 * U;
        const double v = std::fabs(r.v[(r.lo + j) * dv + x]);
        dacc += (dq * qj + (rd == DType::f32 ? 0 : ulp_of(rd, qj * (1 + dq)))) * v * (1 + U);
        A += qj * v;
      }
      dacc += static_cast<double>(n + 1) * U * A + static_cast<double>(n) * 0x1p-149;
      // fp8: acc × v_descale rounded to fp32 — the difference scales, and the rounding may fall apart.
      if (is_fp8(p.dtype)) dacc = r.dv * dacc * (1 + U) + ulp_of(DType::f32, std::fabs(c) + r.dv * dacc);
      const double bound = dacc + ulp_of(rd, std::fabs(c) + dacc);
      const double diff = std::fabs(g - c);
      if (!(diff <= bound))
        a.fail("baseline differs by " + std::to_string(diff) + " > bound " + std::to_string(bound) + " at " + r.where(x) +
               " (CPU " + std::to_string(c) + ")");
      a.note(diff, bound, r.where(x));
    }
  }
}

// ── A reordered CPU twin of the GPU algorithm (runs without a GPU) ──────────────────────────────
// Same steps as the GPU kernels, in their summation orders: dims taken in 16-wide stages with the
// {4t + s} permutation and FMAs, the modifiers with separate roundings, the exact max (the sink's
// included), exp(s − m) with 16 partial ℓ sums by key mod 16 and the sink's share added last, O
// accumulated in key order, a final divide. It shows, on CI machines, that the bound holds for an
// order other than the CPU oracle's and that it is tight enough to fail when tightened 100×.
inline OracleResult reordered_twin(const Problem& p, const Inputs& in, const RowSet& rows) {
  OracleResult res;
  res.rows = rows;
  const int64_t dqk = p.head_dim_qk, dv = p.head_dim_v;
  res.o.assign(static_cast<size_t>(rows.total() * p.heads_q * dv), 0.0);
  res.lse.assign(static_cast<size_t>(rows.total() * p.heads_q), -INFINITY);
  const int64_t dpad = (dqk + 15) / 16 * 16;
  const double cap = p.softcap;
  const std::vector<RowRef> refs = row_refs(p, in, rows);
#pragma omp parallel for schedule(dynamic, 4)
  for (size_t t = 0; t < refs.size(); ++t) {
    const RowRef& r = refs[t];
    const int64_t n = r.n();
    if (n == 0) continue;
    std::vector<double> s(static_cast<size_t>(n));
    double m = -INFINITY;
    bool nan = false;
    for (int64_t j = 0; j < n; ++j) {
      const int64_t key = r.lo + j;
      const float* k = r.k + key * dqk;
      double acc[4] = {0, 0, 0, 0};  // one accumulator per mma k-lane t, dims 4t + s of each stage
      for (int64_t d0 = 0; d0 < dpad; d0 += 16)
        for (int sk = 0; sk < 4; ++sk)
          for (int tl = 0; tl < 4; ++tl) {
            const int64_t d = d0 + 4 * tl + sk;
            if (d < dqk) acc[tl] = std::fma(r.q[d] * r.dq, k[d] * r.dk, acc[tl]);
          }
      double x = ((acc[0] + acc[1]) + (acc[2] + acc[3])) * p.softmax_scale();
      if (cap > 0) x = cap * std::tanh(x / cap);
      if (p.alibi != Alibi::none) x = x + AlibiBias<double>{p.alibi, r.slope, r.d}(r.i, key);
      s[static_cast<size_t>(j)] = x;
      nan |= std::isnan(x);
      m = std::max(m, x);
    }
    double* o = &res.o[static_cast<size_t>(r.out * dv)];
    if (nan || std::isinf(m)) {
      std::fill(o, o + dv, std::numeric_limits<double>::quiet_NaN());
      res.lse[static_cast<size_t>(r.out)] = std::numeric_limits<double>::quiet_NaN();
      continue;
    }
    m = std::max(m, r.sink);
    double lpart[16] = {};
    std::vector<double> acc(static_cast<size_t>(dv), 0.0);
    for (int64_t j = 0; j < n; ++j) {
      const double e = std::exp(std::max(s[static_cast<size_t>(j)] - m, -709.784));  // the GPU's floor
      lpart[(r.lo + j) % 16] += e;
      const float* v = r.v + (r.lo + j) * dv;
      for (int64_t d = 0; d < dv; ++d) acc[static_cast<size_t>(d)] = std::fma(e, v[d] * r.dv, acc[static_cast<size_t>(d)]);
    }
    for (int w = 1; w < 16; w <<= 1)
      for (int k = 0; k < 16; k += 2 * w) lpart[k] += lpart[k + w];
    const double l = r.sink > -INFINITY ? lpart[0] + std::exp(r.sink - m) : lpart[0];
    for (int64_t d = 0; d < dv; ++d) o[d] = acc[static_cast<size_t>(d)] / l;
    res.lse[static_cast<size_t>(r.out)] = m + std::log(l);
  }
  return res;
}

}  // namespace flashcheck::gpu_oracle_test
