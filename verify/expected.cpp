#include "verify/expected.h"

#include <Eigen/Dense>
#include <cblas.h>
#include <algorithm>
#include <cmath>
#include <set>

#include "reference/big_vector.h"
#include "reference/gpu_oracle.h"
#include "reference/gpu_oracle/detail.h"
#include "reference/mask.h"
#include "reference/replica.h"
#include "reference/sequences.h"
#include "verify/baseline.h"
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
  // predicate, the last tile's partial rows, the block that sees no key). Every tile's two edge rows
  // while they fit in half the budget; beyond that an even spread of tiles, the last tile always.
  if (tile_q > 0) {
    const int64_t tiles = (seq_q + tile_q - 1) / tile_q;
    const int64_t take = std::min(tiles, std::max<int64_t>(count / 4, 1));
    for (int64_t k = 0; k < take; ++k) {
      const int64_t t = take == 1 ? tiles - 1 : k * (tiles - 1) / (take - 1);
      s.insert(t * tile_q);
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

double score_rounding(int64_t head_dim_qk) {
  constexpr double u = 0x1p-23;
  const double nu = static_cast<double>(head_dim_qk) * u;
  return nu / (1.0 - nu) + 4 * u;
}

namespace {

// Expected::unresolved, from the score bounds. Rows whose bound δ stays under kUnresolvedDelta
// (every row of normal, uniform and outlier inputs: δ ~ 1e-4..1e-1) cost one comparison; the rest
// get their scores recomputed in fp64, in blocks of rows per KV head with one BLAS GEMM each, so a
// production-size file of huge scores costs about what the CPU oracle's first GEMM does.
void find_unresolved_rows(const Problem& p, const Inputs& in, Expected& r) {
  const int64_t nr = r.oracle.num_rows(), dqk = p.head_dim_qk, dv = p.head_dim_v, skv = p.seq_kv;
  const double rounding = score_rounding(dqk), scale = p.softmax_scale();
  auto candidate = [&](size_t i) {
    return rounding * r.score_bound[i] >= kUnresolvedDelta && std::isfinite(r.oracle.lse[i]);
  };
  bool any = false;
  for (size_t i = 0; i < r.score_bound.size() && !any; ++i) any = candidate(i);
  if (!any) return;
  using MatD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using MatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  constexpr int64_t kBlock = 128;  // candidate rows per GEMM
  const int64_t kv_heads = p.batch * p.heads_kv;
  std::vector<std::vector<Expected::UnresolvedRow>> found(static_cast<size_t>(kv_heads));
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t bk = 0; bk < kv_heads; ++bk) {
    const int64_t b = bk / p.heads_kv, hk = bk % p.heads_kv;
    std::vector<std::pair<int64_t, int64_t>> rows;  // (h, ri) of this KV head's candidates, in index order
    for (int64_t h = hk * p.group(); h < (hk + 1) * p.group(); ++h)
      for (int64_t ri = 0; ri < nr; ++ri)
        if (candidate(static_cast<size_t>((b * p.heads_q + h) * nr + ri))) rows.emplace_back(h, ri);
    if (rows.empty()) continue;
    const float* vf = in.v.data() + static_cast<size_t>(bk * skv * dv);
    const MatD K = Eigen::Map<const MatF>(in.k.data() + static_cast<size_t>(bk * skv * dqk), skv, dqk).cast<double>();
    MatD Q, S;
    for (size_t c0 = 0; c0 < rows.size(); c0 += kBlock) {
      const int64_t m = static_cast<int64_t>(std::min<size_t>(kBlock, rows.size() - c0));
      Q.resize(m, dqk);
      int64_t ncols = 0;
      for (int64_t i = 0; i < m; ++i) {
        const auto [h, ri] = rows[c0 + static_cast<size_t>(i)];
        const int64_t row = r.oracle.row_at(ri);
        ncols = std::max(ncols, visible_keys(p, row));
        Q.row(i) = Eigen::Map<const Eigen::RowVectorXf>(in.q.data() + static_cast<size_t>(((b * p.heads_q + h) * p.seq_q + row) * dqk), dqk)
                       .cast<double>();
      }
      S.resize(m, ncols);
      // Inside this parallel region OpenBLAS's OpenMP build runs single-threaded.
      cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(ncols), static_cast<int>(dqk),
                  scale, Q.data(), static_cast<int>(dqk), K.data(), static_cast<int>(dqk), 0.0, S.data(), static_cast<int>(ncols));
      for (int64_t i = 0; i < m; ++i) {
        const auto [h, ri] = rows[c0 + static_cast<size_t>(i)];
        const size_t idx = static_cast<size_t>((b * p.heads_q + h) * nr + ri);
        const int64_t n = visible_keys(p, r.oracle.row_at(ri));
        const double reach = S.row(i).head(n).maxCoeff() - 2 * rounding * r.score_bound[idx] - kNegligibleGap;
        Expected::UnresolvedRow u;
        u.index = static_cast<int64_t>(idx);
        for (int64_t j = 0; j < n; ++j) {
          if (!(S(i, j) >= reach)) continue;
          if (++u.contenders == 1) {
            u.lo.assign(vf + j * dv, vf + (j + 1) * dv);
            u.hi = u.lo;
            continue;
          }
          for (int64_t c = 0; c < dv; ++c) {
            u.lo[static_cast<size_t>(c)] = std::min(u.lo[static_cast<size_t>(c)], vf[j * dv + c]);
            u.hi[static_cast<size_t>(c)] = std::max(u.hi[static_cast<size_t>(c)], vf[j * dv + c]);
          }
        }
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
  Expected r;
  const double n_rows = static_cast<double>(rows.empty() ? p.seq_q : static_cast<int64_t>(rows.size()));
  const double work = static_cast<double>(p.batch * p.heads_q) * n_rows * static_cast<double>(p.seq_kv) *
                      static_cast<double>(p.head_dim_qk + p.head_dim_v);
  bool gpu = oracle == OracleChoice::gpu;
  if (oracle == OracleChoice::gpu) {
    if (auto why = gpu_oracle_unavailable()) throw CannotTest("--oracle gpu: " + *why);
  } else if (oracle == OracleChoice::automatic) {
    gpu = work >= kGpuOracleWork && !gpu_oracle_unavailable();
  }
  PhaseTimer clock(r.timings);
  auto lap = [&](const char* phase) { clock.lap(phase); };
  // Where a GPU call's wall time went (host allocation, packing, copies, kernels): sub-phases,
  // indented, that the callers' totals skip.
  auto gpu_parts = [&](const char* what) {
    const gpu_oracle_detail::Timing g = gpu_oracle_detail::last_timing();
    for (auto [name, ms] : {std::pair{"result alloc", g.result_alloc_ms}, {"pack", g.pack_ms}, {"device alloc", g.alloc_ms},
                            {"upload", g.h2d_ms}, {"kernels", g.kernel_ms}, {"download", g.d2h_ms}})
      r.timings.emplace_back(std::string("  ") + what + ": " + name, ms / 1e3);
  };
  if (gpu) {
    try {
      r.oracle = naive_attention_gpu(p, in, rows);
      lap("oracle (GPU)");
      gpu_parts("oracle");
      r.baseline = dtype_baseline_gpu(p, in, rows);
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
  const int64_t nr = r.oracle.num_rows();
  r.score_bound.resize(static_cast<size_t>(p.batch * p.heads_q * nr));
  auto norm = [](const float* x, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
    return std::sqrt(s);
  };
  // One KV head per iteration, over all threads: at production sizes this reads every q and k.
#pragma omp parallel for collapse(2) schedule(dynamic, 1)
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t hk = 0; hk < p.heads_kv; ++hk) {
      // Prefix maxima of ‖k_j‖: a row's visible keys are always a prefix.
      std::vector<double> kmax(static_cast<size_t>(p.seq_kv));
      double m = 0;
      for (int64_t j = 0; j < p.seq_kv; ++j)
        kmax[static_cast<size_t>(j)] = m = std::max(m, norm(&in.k[static_cast<size_t>(((b * p.heads_kv + hk) * p.seq_kv + j) * p.head_dim_qk)], p.head_dim_qk));
      for (int64_t h = hk * p.group(); h < (hk + 1) * p.group(); ++h)
        for (int64_t ri = 0; ri < nr; ++ri) {
          const int64_t i = r.oracle.row_at(ri), n = visible_keys(p, i);

          const double qn = norm(&in.q[static_cast<size_t>(((b * p.heads_q + h) * p.seq_q + i) * p.head_dim_qk)], p.head_dim_qk);
          r.score_bound[static_cast<size_t>((b * p.heads_q + h) * nr + ri)] =
              n ? std::fabs(p.softmax_scale()) * qn * kmax[static_cast<size_t>(n - 1)] : 0.0;
        }
    }
  lap("score bounds");
  find_unresolved_rows(p, in, r);
  if (!r.unresolved.empty()) lap("unresolved rows");
  if (p.dtype == DType::f32) {
    ReplicaConfig cfg;
    cfg.block_q = cfg.block_kv = 64;
    cfg.round_p = false;
    cfg.finite_neg_inf = false;
    // Over the same rows as the oracle (all, or the sample), in the same [B, Hq, rows, Dv] layout.
    r.flash_baseline = replica_attention(p, in, cfg, {}, r.oracle.rows).o;
    lap("flash baseline (replica)");
  }
  return r;
}

}  // namespace flashcheck
