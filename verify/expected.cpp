#include "verify/expected.h"

#include <Eigen/Dense>
#include <cblas.h>
#include <algorithm>
#include <cmath>
#include <bit>
#include <cstdlib>
#include <set>

#include "reference/big_vector.h"
#include "reference/gpu_oracle.h"
#include "reference/gpu_oracle/detail.h"
#include "reference/mask.h"
#include "reference/score_mod.h"
#include "reference/replica.h"
#include "reference/sequences.h"
#include "verify/baseline.h"
#include "verify/element_pass_device.h"
#include "verify/range_max.h"
#include "verify/metrics.h"
#include "verify/report.h"

namespace flashcheck {

void lse_base2_to_natural(std::vector<float>& lse) {
  for (float& x : lse)
    if (!is_poison(DType::f32, x)) x = static_cast<float>(static_cast<double>(x) * kLn2);
}

std::vector<float> select_rows(const Problem& p, std::span<const float> full, int64_t width,
                               const OracleResult& oracle) {
  const RowSet& rows = oracle.rows;
  if (rows.is_all()) {  // every row: the logical layout itself, one copy (of up to 10^9 elements)
    std::vector<float> out = big_vector<float>(full.size());
    std::copy(full.begin(), full.end(), out.begin());
    return out;
  }
  const Sequences seqs(p);
  std::vector<float> out(static_cast<size_t>(rows.total() * p.heads_q * width));
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_q; ++h)
      for (int64_t r = 0; r < rows.count(b); ++r) {
        auto it = full.begin() + seqs.lse_at(b, h, rows.row(b, r)) * width;
        std::copy(it, it + width, out.begin() + rows.index(b, h, r, p.heads_q) * width);
      }
  return out;
}

std::vector<int64_t> sample_rows(int64_t seq_q, int64_t count, int64_t edge, int64_t tile_q) {
  if (seq_q <= count) return {};
  std::set<int64_t> s;
  // Tile edges first: a kernel's bugs live at the first and last row of its q-tiles (the tail
  // predicate, the last tile's partial rows, the block that sees no key). Every tile's first row
  // whatever the budget (a tile without a sampled row is a CTA nobody checks; the budget grows to
  // one row per tile); both edges of every tile while they fit in half the budget, beyond that of
  // an even spread of tiles, the last one always.
  if (tile_q > 0) {
    const int64_t tiles = (seq_q + tile_q - 1) / tile_q;
    for (int64_t t = 0; t < tiles; ++t) s.insert(t * tile_q);
    const int64_t take = std::min(tiles, std::max<int64_t>(count / 4, 1));
    for (int64_t k = 0; k < take; ++k) {
      const int64_t t = take == 1 ? tiles - 1 : k * (tiles - 1) / (take - 1);
      s.insert(std::min(seq_q, (t + 1) * tile_q) - 1);
    }
  }
  for (int64_t i = 0; i < std::min(edge, seq_q); ++i) {
    s.insert(i);
    s.insert(seq_q - 1 - i);
  }
  const int64_t rest = std::max<int64_t>(count - static_cast<int64_t>(s.size()), 1);
  for (int64_t k = 0; k < rest; ++k) s.insert(k * (seq_q - 1) / rest);
  return {s.begin(), s.end()};
}

RowSet sample_row_set(const Problem& p, int64_t count, int64_t edge, int64_t tile_q) {
  if (!p.varlen()) return RowSet::same(p, sample_rows(p.seq_q, count, edge, tile_q));
  std::vector<std::vector<int64_t>> per(static_cast<size_t>(p.batch));
  for (int64_t b = 0; b < p.batch; ++b) {
    per[static_cast<size_t>(b)] = sample_rows(p.sq(b), count, edge, tile_q);
    if (per[static_cast<size_t>(b)].empty())
      for (int64_t i = 0; i < p.sq(b); ++i) per[static_cast<size_t>(b)].push_back(i);
  }
  return RowSet::per_sequence(p, per);
}

std::vector<std::vector<int64_t>> suspect_rows(const Problem& p, std::span<const float> o,
                                               std::optional<std::span<const float>> lse, int64_t cap) {
  const Sequences seqs(p);
  const int64_t dv = p.head_dim_v, total = seqs.total_q();
  const DType odt = p.o_dtype();
  // One flag per row of every sequence, set by one parallel loop over them all: a region per
  // sequence would fork and join thousands of times for a wide batch (slow wherever other threads
  // compete for the cores, e.g. beside numpy's BLAS in Python), one long head still spreads over
  // every thread (a --big output holds 2^31 elements).
  std::vector<char> flag(static_cast<size_t>(total), 0);
  std::vector<int64_t> starts(static_cast<size_t>(p.batch));
  for (int64_t b = 0; b < p.batch; ++b) starts[static_cast<size_t>(b)] = seqs.q0(b);
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < total; ++t) {
    const int64_t b = std::upper_bound(starts.begin(), starts.end(), t) - starts.begin() - 1, i = t - seqs.q0(b);
    const bool sees = !visible_range(p, b, i).empty();
    for (int64_t h = 0; h < p.heads_q; ++h) {
      const int64_t at = seqs.lse_at(b, h, i);
      const float* row = o.data() + at * dv;
      bool poison = false, nonfinite = false, zeros = dv > 0;
      for (int64_t c = 0; c < dv; ++c) {
        poison |= is_poison(odt, row[c]);
        nonfinite |= !std::isfinite(row[c]);
        zeros &= row[c] == 0.0f;
      }
      if (lse) {
        const float l = (*lse)[static_cast<size_t>(at)];
        poison |= is_poison(DType::f32, l);
        nonfinite |= !std::isfinite(l);
      }
      // A row that sees no key is zero with an infinite LSE by convention: only poison gives it away.
      if (poison || (sees && (nonfinite || zeros))) flag[static_cast<size_t>(t)] = 1;
    }
  }
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(p.batch));
  for (int64_t b = 0; b < p.batch; ++b) {
    std::vector<int64_t>& rows = out[static_cast<size_t>(b)];
    for (int64_t i = 0; i < seqs.sq(b); ++i)
      if (flag[static_cast<size_t>(seqs.q0(b) + i)]) rows.push_back(i);
    if (static_cast<int64_t>(rows.size()) > cap) {  // an output wrong everywhere: an even spread of it
      std::vector<int64_t> spread;
      for (int64_t k = 0; k < cap; ++k) spread.push_back(rows[static_cast<size_t>(k * static_cast<int64_t>(rows.size()) / cap)]);
      rows = std::move(spread);
    }
  }
  return out;
}

RowSet with_rows(const Problem& p, const RowSet& sample, const std::vector<std::vector<int64_t>>& extra) {
  if (sample.is_all()) return sample;
  auto merged = [&](int64_t b, std::vector<int64_t> add) {
    const auto have = sample.rows_of(b);
    add.insert(add.end(), have.begin(), have.end());
    std::sort(add.begin(), add.end());
    add.erase(std::unique(add.begin(), add.end()), add.end());
    return add;
  };
  if (!p.varlen()) {  // dense: the same rows in every sequence, so one list for all
    std::vector<int64_t> all;
    for (const auto& e : extra) all.insert(all.end(), e.begin(), e.end());
    return RowSet::same(p, merged(0, std::move(all)));
  }
  std::vector<std::vector<int64_t>> per(static_cast<size_t>(p.batch));
  for (int64_t b = 0; b < p.batch; ++b) per[static_cast<size_t>(b)] = merged(b, extra[static_cast<size_t>(b)]);
  return RowSet::per_sequence(p, per);
}

void alibi_lse_to_exact(const Problem& p, const Inputs& in, AlibiLse conv, std::vector<float>& lse) {
  const Sequences seqs(p);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_q; ++h) {
      const double slope = p.alibi == Alibi::none ? 0.0 : alibi_slope(p, in.alibi_slopes.data(), b, h);
      for (int64_t i = 0; i < seqs.sq(b); ++i) {
        float& x = lse[static_cast<size_t>(seqs.lse_at(b, h, i))];
        if (!is_poison(DType::f32, x)) x = static_cast<float>(static_cast<double>(x) - alibi_lse_shift(p, conv, slope, b, i));
      }
    }
}

double score_rounding(int64_t head_dim_qk) {
  constexpr double u = 0x1p-23;
  const double nu = static_cast<double>(head_dim_qk) * u;
  return nu / (1.0 - nu) + 4 * u;
}

double fp8_score_accumulation(int64_t head_dim_qk) {
  return static_cast<double>((head_dim_qk + 31) / 32) * 1.5 * 0x1p-10;
}

namespace {

using MatD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// One KV head's keys widened to fp64 (fp8: times their descale, exactly).
MatD widened_keys(const Problem& p, const Inputs& in, const Sequences& seqs, int64_t b, int64_t hk) {
  MatD K = Eigen::Map<const MatF>(in.k.data() + seqs.k_row(b, hk, 0), seqs.skv(b), p.head_dim_qk).cast<double>();
  if (is_fp8(p.dtype)) K *= descale_of(p, in.descale_k, b, hk);
  return K;
}

// Expected::unresolved, from the score bounds. Rows whose bound δ stays under kUnresolvedDelta
// (every row of normal, uniform and outlier inputs: δ ~ 1e-4..1e-1) cost one comparison; the rest
// get their scores recomputed in fp64 (with the problem's softcap and ALiBi bias: the contenders
// are the keys whose final scores lie near the max), in blocks of rows per KV head with one BLAS
// GEMM each, so a production-size file of huge scores costs about what the CPU oracle's first GEMM
// does. Softcap only shrinks score differences (tanh is 1-Lipschitz), so δ still bounds the error
// of a capped score. A sink within reach of the max takes weight too, with the value 0: it joins
// the contenders as a zero row.
// need_host: called before in's q, k, v are first read (InputsOnDevice::widen).
void find_unresolved_rows(const Problem& p, const Inputs& in, Expected& r, const std::function<void()>& need_host) {
  const RowSet& rs = r.oracle.rows;
  const int64_t dqk = p.head_dim_qk, dv = p.head_dim_v, hq = p.heads_q;
  const double rounding = std::max(score_rounding(dqk), r.score_error), scale = p.softmax_scale();
  auto candidate = [&](size_t i) {
    return rounding * r.score_bound[i] >= kUnresolvedDelta && std::isfinite(r.oracle.lse[i]);
  };
  bool any = false;
  for (size_t i = 0; i < r.score_bound.size() && !any; ++i) any = candidate(i);
  if (!any) return;
  need_host();
  const Sequences seqs(p);
  constexpr int64_t kBlock = 128;  // candidate rows per GEMM
  const int64_t kv_heads = p.batch * p.heads_kv;
  std::vector<std::vector<Expected::UnresolvedRow>> found(static_cast<size_t>(kv_heads));
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t bk = 0; bk < kv_heads; ++bk) {
    const int64_t b = bk / p.heads_kv, hk = bk % p.heads_kv;
    std::vector<std::pair<int64_t, int64_t>> rows;  // (h, ri) of this KV head's candidates, in index order
    for (int64_t h = hk * p.group(); h < (hk + 1) * p.group(); ++h)
      for (int64_t ri = 0; ri < rs.count(b); ++ri)
        if (candidate(static_cast<size_t>(rs.index(b, h, ri, hq)))) rows.emplace_back(h, ri);
    if (rows.empty()) continue;
    const float* vf = in.v.data() + seqs.v_row(b, hk, 0);
    const double v_mul = is_fp8(p.dtype) ? descale_of(p, in.descale_v, b, hk) : 1.0;
    const MatD K = widened_keys(p, in, seqs, b, hk);
    const double q_mul = is_fp8(p.dtype) ? descale_of(p, in.descale_q, b, hk) : 1.0;
    const Softcap<double> cap{p.softcap};
    MatD Q, S;
    for (size_t c0 = 0; c0 < rows.size(); c0 += kBlock) {
      const int64_t m = static_cast<int64_t>(std::min<size_t>(kBlock, rows.size() - c0));
      Q.resize(m, dqk);
      int64_t ncols = 0;
      for (int64_t i = 0; i < m; ++i) {
        const auto [h, ri] = rows[c0 + static_cast<size_t>(i)];
        const int64_t row = rs.row(b, ri);
        ncols = std::max(ncols, visible_range(p, b, row).hi);
        Q.row(i) = Eigen::Map<const Eigen::RowVectorXf>(in.q.data() + seqs.q_row(b, h, row), dqk).cast<double>() * q_mul;
      }
      S.resize(m, ncols);
      // Inside this parallel region OpenBLAS's OpenMP build runs single-threaded.
      cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(ncols), static_cast<int>(dqk),
                  1.0, Q.data(), static_cast<int>(dqk), K.data(), static_cast<int>(dqk), 0.0, S.data(), static_cast<int>(ncols));
      for (int64_t i = 0; i < m; ++i) {
        const auto [h, ri] = rows[c0 + static_cast<size_t>(i)];
        const size_t idx = static_cast<size_t>(rs.index(b, h, ri, hq));
        const int64_t row = rs.row(b, ri);
        const KeyRange vis = visible_range(p, b, row);
        const AlibiBias<double> bias = alibi_for<double>(p, in.alibi_slopes.data(), b, h);
        // The scale after the GEMM, as naive_attention applies it (reference/naive.cpp, dots()).
        for (int64_t j = vis.lo; j < vis.hi; ++j) S(i, j) = cap(S(i, j) * scale) + bias(row, j);
        const double top = S.row(i).segment(vis.lo, vis.count()).maxCoeff();
        const double reach = top - 2 * rounding * r.score_bound[idx] - kNegligibleGap;
        Expected::UnresolvedRow u;
        u.index = static_cast<int64_t>(idx);
        auto join = [&](auto value) {  // a contender's value per column
          if (++u.contenders == 1) {
            u.lo.resize(static_cast<size_t>(dv));
            u.hi.resize(static_cast<size_t>(dv));
            for (int64_t c = 0; c < dv; ++c) u.lo[static_cast<size_t>(c)] = u.hi[static_cast<size_t>(c)] = value(c);
            return;
          }
          for (int64_t c = 0; c < dv; ++c) {
            u.lo[static_cast<size_t>(c)] = std::min(u.lo[static_cast<size_t>(c)], value(c));
            u.hi[static_cast<size_t>(c)] = std::max(u.hi[static_cast<size_t>(c)], value(c));
          }
        };
        for (int64_t j = vis.lo; j < vis.hi; ++j)
          if (S(i, j) >= reach) join([&](int64_t c) { return static_cast<float>(vf[j * dv + c] * v_mul); });
        if (p.sinks && in.sinks[static_cast<size_t>(h)] >= reach) join([](int64_t) { return 0.0f; });
        // One contender: the max stands alone past any rounding, and the row is judged as usual.
        if (u.contenders >= 2) found[static_cast<size_t>(bk)].push_back(std::move(u));
      }
    }
  }
  for (auto& f : found) std::move(f.begin(), f.end(), std::back_inserter(r.unresolved));
  std::sort(r.unresolved.begin(), r.unresolved.end(), [](const auto& a, const auto& b) { return a.index < b.index; });
}

}  // namespace

Expected make_expected(const Problem& p, const Inputs& in, std::span<const int64_t> rows, OracleChoice oracle) {
  return make_expected(p, in, RowSet::same(p, rows), oracle);
}

namespace {
// The visible pairs' multiply-adds, roughly: rows × keys × (Dqk + Dv).
double oracle_work(const Problem& p, const RowSet& rows) {
  double work = 0;
  for (int64_t b = 0; b < p.batch; ++b)
    work += static_cast<double>(p.heads_q * rows.count(b)) * static_cast<double>(p.skv(b)) *
            static_cast<double>(p.head_dim_qk + p.head_dim_v);
  return work;
}

// The second baseline, a FlashAttention replica (64×64 tiles, exp2, P rounded to the input dtype
// unless f32), for every dtype. f32: the eager baseline is too good a yardstick on ill-conditioned
// scores. fp8 inputs: every correct kernel rounds P to fp8 before P·V (FA3's numerics: P·2^8 cast
// to the input dtype) and the eager baseline, P in bf16, does not: where V's values cancel
// (O = Σ p·v far below Σ p·|v|) that rounding is tens of percent of O, and only a baseline that
// rounds P the same way says so (a correct e4m3 replica failed rel_l2 0.69 > 0.3 on sq=1 skv=2
// constant_rows, session 7). 16-bit: a FlashAttention kernel rounds the unnormalized
// P = exp(s − m) and divides by the unrounded ℓ; the eager baseline rounds the normalized P. Where
// every row repeats one P rounding (two keys, a constant score gap: constant rows under ALiBi and
// softcap) the FlashAttention form leans one way over every row and the eager one need not, so
// the rounding-direction rule needs this baseline's own lean (a correct f16 replica sat −0.33
// output ULPs low, session 13's CI).
// Where: on the CPU over the oracle's rows (all, or the sample), in their layout, for problems
// under kGpuOracleWork (milliseconds to a second). Past it, f32 and fp8 (which need it for every
// verdict) take the GPU replica when the GPU oracle runs every row and the replica covers the
// problem (f32 only: the GPU replicas have no fp8) and fits, else the CPU's; 16-bit keeps the
// eager baseline alone there: the second would add to a production-size check (4,64,8192,128)
// about what the eager one takes on the GPU, 1.3 s of its 5.5 (PERF.md, session 13), for a rule it
// rarely moves there (verify/TOLERANCE.md, Rounding bias).
struct FlashBaseline {
  std::vector<float> o;
  const char* phase = nullptr;  // where it ran, for Expected::timings; null: not computed
};
FlashBaseline flash_baseline(const Problem& p, const Inputs& in, const RowSet& rows, bool gpu_oracle,
                             const std::function<void()>& need_host) {
  const bool cheap = oracle_work(p, rows) < kGpuOracleWork;
  if (!cheap && p.dtype != DType::f32 && !is_fp8(p.dtype)) return {};
  need_host();
  ReplicaConfig cfg;
  cfg.block_q = cfg.block_kv = 64;
  cfg.round_p = p.dtype != DType::f32;
  cfg.finite_neg_inf = false;
  if (!cheap && gpu_oracle && rows.is_all()) {
    try {
      if (std::optional<ReplicaResult> g = replica_attention_gpu(p, in, cfg)) return {std::move(g->o), "flash baseline (GPU replica)"};
    } catch (const OracleDoesNotFit&) {  // one (sequence, KV head) unit past the device's memory: the CPU's
    }
  }
  return {replica_attention(p, in, cfg, {}, rows).o, "flash baseline (replica)"};
}
// Whether the oracle's O and the baselines may stay on the device: a problem and rows the device
// pass takes, and room for them (fp64 O, two fp32 outputs, the kernel's O beside them) with as much
// again left for the oracle's pieces; otherwise they come home as before.
bool resident_fits(const Problem& p, const RowSet& rows) {
  if (device_element_pass_unsupported(p, false) || !same_rows_everywhere(rows)) return false;
  const double bytes = static_cast<double>(rows.total() * p.heads_q * p.head_dim_v) * (8 + 4 + 4 + 4);
  return 2 * bytes < static_cast<double>(gpu_oracle_detail::free_device_bytes());
}
}  // namespace

bool oracle_on_gpu(const Problem& p, const RowSet& rows, OracleChoice oracle) {
  if (oracle == OracleChoice::gpu) {
    if (auto why = gpu_oracle_unavailable()) throw CannotTest("--oracle gpu: " + *why);
    return true;
  }
  if (oracle != OracleChoice::automatic) return false;
  return oracle_work(p, rows) >= kGpuOracleWork && !gpu_oracle_unavailable();
}

void add_gpu_timing(std::vector<std::pair<std::string, double>>& timings, const std::string& prefix) {
  const gpu_oracle_detail::Timing g = gpu_oracle_detail::last_timing();
  for (auto [name, ms] : {std::pair{"result alloc", g.result_alloc_ms}, {"pack", g.pack_ms}, {"device alloc", g.alloc_ms},
                          {"upload", g.h2d_ms}, {"kernels", g.kernel_ms}, {"download", g.d2h_ms}})
    timings.emplace_back(prefix + name, ms / 1e3);
}

Expected make_expected(const Problem& p, const Inputs& in, const RowSet& rows, OracleChoice oracle, bool keep_on_device,
                       const InputsOnDevice& on_device) {
  Expected r;
  const bool gpu = oracle_on_gpu(p, rows, oracle);
  // The inputs on the device serve the GPU's calls; any step on the CPU first has them widened here.
  const DeviceInputs* dev = gpu ? on_device.device : nullptr;
  bool host_ready = on_device.device == nullptr;
  const std::function<void()> need_host = [&] {
    if (host_ready) return;
    on_device.widen();
    host_ready = true;
  };
  if (!dev) need_host();
  PhaseTimer clock(r.timings);
  auto lap = [&](const char* phase) { clock.lap(phase); };
  // Where a GPU call's wall time went: sub-phases, indented, that the callers' totals skip.
  auto gpu_parts = [&](const char* what) { add_gpu_timing(r.timings, std::string("  ") + what + ": "); };
  std::shared_ptr<ResidentExpected> resident;
  if (gpu && keep_on_device && resident_fits(p, rows)) {
    try {
      resident = std::make_shared<ResidentExpected>();
      ResidentOracle o = naive_attention_gpu_resident(p, in, rows, dev);
      r.oracle = std::move(o.host);
      resident->oracle_o = std::move(o.o);
      lap("oracle (GPU, kept there)");
      gpu_parts("oracle");
      resident->baseline = dtype_baseline_gpu_resident(p, in, rows, dev);
      lap("baseline (GPU, kept there)");
      gpu_parts("baseline");
    } catch (const OracleDoesNotFit& e) {
      throw CannotTest(std::string("the GPU oracle cannot hold this problem: ") + e.what());
    }
  } else if (gpu) {
    try {
      r.oracle = naive_attention_gpu(p, in, rows, dev);
      lap("oracle (GPU)");
      gpu_parts("oracle");
      r.baseline = dtype_baseline_gpu(p, in, rows, dev);
      lap("baseline (GPU)");
      gpu_parts("baseline");
    } catch (const OracleDoesNotFit& e) {
      throw CannotTest(std::string("the GPU oracle cannot hold this problem: ") + e.what());
    }
  } else {
    r.oracle = naive_attention(p, in, rows);
    lap("oracle (CPU)");
    r.baseline = dtype_baseline(p, in, rows);
    lap("baseline (CPU)");
  }
  const Sequences seqs(p);
  const int64_t hq = p.heads_q, dqk = p.head_dim_qk;
  r.score_bound.resize(static_cast<size_t>(rows.total() * hq));
  r.score_error = is_fp8(p.dtype) ? fp8_score_accumulation(dqk) : 0.0;
  auto norm = [](const float* x, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
    return std::sqrt(s);
  };
  // Inputs on the device: every row's norm computed there, the same sums (reference/gpu_oracle.h's
  // row_norms), 16 MB of them downloaded instead of 1 GB of q and k read here.
  std::vector<double> q_norms, k_norms;
  if (dev) {
    q_norms = row_norms(dev->q, dev->dtype, p.q_elems() / dqk, dqk);
    k_norms = row_norms(dev->k, dev->dtype, p.k_elems() / dqk, dqk);
  }
  auto q_norm = [&](int64_t b, int64_t h, int64_t i) {
    const int64_t at = seqs.q_row(b, h, i);
    return dev ? q_norms[static_cast<size_t>(at / dqk)] : norm(&in.q[static_cast<size_t>(at)], dqk);
  };
  auto k_norm = [&](int64_t b, int64_t hk, int64_t j) {
    const int64_t at = seqs.k_row(b, hk, j);
    return dev ? k_norms[static_cast<size_t>(at / dqk)] : norm(&in.k[static_cast<size_t>(at)], dqk);
  };
  const bool fp8 = is_fp8(p.dtype);
  // One KV head per iteration, over all threads: at production sizes this reads every q and k.
#pragma omp parallel for collapse(2) schedule(dynamic, 1)
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t hk = 0; hk < p.heads_kv; ++hk) {
      const int64_t skv = seqs.skv(b);
      const double k_mul = fp8 ? descale_of(p, in.descale_k, b, hk) : 1.0, q_mul = fp8 ? descale_of(p, in.descale_q, b, hk) : 1.0;
      std::vector<double> kn(static_cast<size_t>(skv));
      for (int64_t j = 0; j < skv; ++j) kn[static_cast<size_t>(j)] = k_mul * k_norm(b, hk, j);
      const RangeMax kmax(std::move(kn));
      for (int64_t h = hk * p.group(); h < (hk + 1) * p.group(); ++h) {
        // ALiBi adds up to slope · (the row's largest key distance) to a score: part of its magnitude.
        const double slope = p.alibi == Alibi::none ? 0.0 : std::fabs(alibi_slope(p, in.alibi_slopes.data(), b, h));
        const int64_t d = alignment_offset(p, seqs.sq(b), skv);
        for (int64_t ri = 0; ri < rows.count(b); ++ri) {
          const int64_t i = rows.row(b, ri);
          const KeyRange vis = visible_range(p, b, i);
          double bound = 0;
          if (!vis.empty()) {
            const double qn = q_mul * q_norm(b, h, i);
            const int64_t center = p.alibi == Alibi::signed_ ? i : i + d;
            const double far = static_cast<double>(std::max(std::llabs(center - vis.lo), std::llabs(center - (vis.hi - 1))));
            bound = std::fabs(p.softmax_scale()) * qn * kmax(vis.lo, vis.hi) + slope * far;
          }
          r.score_bound[static_cast<size_t>(rows.index(b, h, ri, hq))] = bound;
        }
      }
    }
  lap("score bounds");
  find_unresolved_rows(p, in, r, need_host);
  if (!r.unresolved.empty()) lap("unresolved rows");
  FlashBaseline fb = flash_baseline(p, in, r.oracle.rows, gpu, need_host);
  if (fb.phase) {
    r.flash_baseline = std::move(fb.o);
    lap(fb.phase);
  }
  if (resident) {
    if (r.unresolved.empty()) {  // the element pass runs beside the oracle's O (element_pass_device.h)
      if (!r.flash_baseline.empty()) {
        resident->flash_baseline = DeviceArray(r.flash_baseline.size() * sizeof(float));
        resident->flash_baseline.upload(r.flash_baseline.data(), r.flash_baseline.size() * sizeof(float));
      }
      r.resident = std::move(resident);
    } else {  // rows judged by their contenders are read on the host: everything comes home
      r.resident = std::move(resident);
      bring_home(r);
    }
    lap("device results placed");
  }
  return r;
}

}  // namespace flashcheck
