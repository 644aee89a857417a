#include "reference/naive.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "reference/mask.h"

namespace flashcheck {

namespace {
using MatD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
constexpr double kNegInf = -std::numeric_limits<double>::infinity();
// Scratch for S is capped at this many doubles per thread (16 MiB): row blocks shrink as seq_kv grows.
constexpr int64_t kScoreBudget = int64_t{2} << 20;
}  // namespace

OracleResult naive_attention(const Problem& p, const Inputs& in, std::span<const int64_t> rows) {
  validate(p);
  if (static_cast<int64_t>(in.q.size()) != p.q_elems() || static_cast<int64_t>(in.k.size()) != p.k_elems() ||
      static_cast<int64_t>(in.v.size()) != p.v_elems())
    throw std::invalid_argument("naive_attention: input sizes do not match the problem");
  OracleResult r;
  r.rows.assign(rows.begin(), rows.end());
  for (size_t i = 0; i < r.rows.size(); ++i) {
    if (r.rows[i] < 0 || r.rows[i] >= p.seq_q) throw std::out_of_range("naive_attention: row out of range");
    if (i && r.rows[i] <= r.rows[i - 1]) throw std::invalid_argument("naive_attention: rows must be ascending");
  }
  r.num_rows = r.rows.empty() ? p.seq_q : static_cast<int64_t>(r.rows.size());
  const int64_t nr = r.num_rows, dqk = p.head_dim_qk, dv = p.head_dim_v, skv = p.seq_kv;
  r.o.assign(static_cast<size_t>(p.batch * p.heads_q * nr * dv), 0.0);
  r.lse.assign(static_cast<size_t>(p.batch * p.heads_q * nr), kNegInf);
  const double scale = p.softmax_scale();
  const int64_t row_block = std::clamp<int64_t>(kScoreBudget / skv, 1, 64);
  const int64_t nblocks = (nr + row_block - 1) / row_block;
  const int64_t group = p.group();

  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t hk = 0; hk < p.heads_kv; ++hk) {
      // Widen this KV head once; every query head of its group reads it.
      const size_t koff = static_cast<size_t>((b * p.heads_kv + hk) * skv);
      const MatD K = Eigen::Map<const MatF>(in.k.data() + koff * dqk, skv, dqk).cast<double>();
      const MatD V = Eigen::Map<const MatF>(in.v.data() + koff * dv, skv, dv).cast<double>();
      // 0 · Inf and 0 · NaN are NaN: with non-finite values, a masked key must not reach a row
      // through the block GEMM, so such heads take the row-by-row path below.
      const bool v_finite = V.allFinite();

#pragma omp parallel for schedule(dynamic, 1)
      for (int64_t task = 0; task < group * nblocks; ++task) {
        const int64_t hq = hk * group + task / nblocks;
        const int64_t r0 = (task % nblocks) * row_block;
        const int64_t nb = std::min(row_block, nr - r0);
        const size_t bh = static_cast<size_t>(b * p.heads_q + hq);
        const float* qh = in.q.data() + bh * static_cast<size_t>(p.seq_q * dqk);

        MatD Q(nb, dqk);
        int64_t ncols = 0;  // keys any row of this block sees: later keys are never touched
        for (int64_t i = 0; i < nb; ++i) {
          int64_t row = r.row_at(r0 + i);
          Q.row(i) = Eigen::Map<const Eigen::RowVectorXf>(qh + row * dqk, dqk).cast<double>();
          ncols = std::max(ncols, visible_keys(p, row));
        }
        if (ncols == 0) continue;  // whole block sees nothing: the O = 0, LSE = -inf defaults stand

        // Step 1: scores.
        MatD S = (Q * K.topRows(ncols).transpose()) * scale;
        // Step 2: row max over the visible keys, exp, sum. Masked keys get P = 0 exactly.
        for (int64_t i = 0; i < nb; ++i) {
          const int64_t n = visible_keys(p, r.row_at(r0 + i));
          auto s = S.row(i);
          if (n == 0) {
            s.setZero();
            continue;
          }
          double m = kNegInf;
          bool nan = false;
          for (int64_t j = 0; j < n; ++j) {
            nan |= std::isnan(s(j));
            m = std::max(m, s(j));
          }
          double* lse = &r.lse[bh * static_cast<size_t>(nr) + static_cast<size_t>(r0 + i)];
          if (nan || m == kNegInf || m == std::numeric_limits<double>::infinity()) {
            // NaN scores, all scores -inf (0/0) or a +inf score (inf - inf): the softmax itself is
            // undefined, so the row is NaN rather than anything a kernel could match by accident.
            s.setConstant(std::numeric_limits<double>::quiet_NaN());
            *lse = std::numeric_limits<double>::quiet_NaN();
            continue;
          }
          s.head(n) = (s.head(n).array() - m).exp();
          if (n < ncols) s.tail(ncols - n).setZero();
          const double l = s.head(n).sum();
          *lse = m + std::log(l);
          s.head(n) /= l;
        }
        // Step 3: O = P V.
        MatD O;
        if (v_finite) O = S * V.topRows(ncols);
        for (int64_t i = 0; i < nb; ++i) {
          double* dst = &r.o[(bh * static_cast<size_t>(nr) + static_cast<size_t>(r0 + i)) * static_cast<size_t>(dv)];
          const int64_t n = visible_keys(p, r.row_at(r0 + i));
          if (n == 0) continue;
          if (v_finite)
            Eigen::Map<Eigen::RowVectorXd>(dst, dv) = O.row(i);
          else
            Eigen::Map<Eigen::RowVectorXd>(dst, dv) = S.row(i).head(n) * V.topRows(n);
        }
      }
    }
  }
  return r;
}

}  // namespace flashcheck
