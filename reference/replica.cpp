#include "reference/replica.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "reference/mask.h"

namespace flashcheck {

namespace {
using MatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kLog2eF = static_cast<float>(kLog2e);
constexpr float kLn2F = static_cast<float>(kLn2);
// The finite stand-in for -inf: large enough that exp2((-2^30 - m)·scale) underflows to 0, small
// enough that (-2^30) - (-2^30) = 0 instead of the NaN that -inf - (-inf) gives.
constexpr float kFiniteNegInf = -1073741824.0f;
}  // namespace

ReplicaResult replica_attention(const Problem& p, const Inputs& in, const ReplicaConfig& cfg,
                                std::span<const int64_t> trace_rows, std::span<const int64_t> rows) {
  validate(p);
  if (cfg.block_q <= 0 || cfg.block_kv <= 0) throw std::invalid_argument("replica: tile sizes must be positive");
  if (static_cast<int64_t>(in.q.size()) != p.q_elems() || static_cast<int64_t>(in.k.size()) != p.k_elems() ||
      static_cast<int64_t>(in.v.size()) != p.v_elems())
    throw std::invalid_argument("replica_attention: input sizes do not match the problem");
  ReplicaResult res;
  res.rows.assign(rows.begin(), rows.end());
  for (size_t i = 0; i < res.rows.size(); ++i) {
    if (res.rows[i] < 0 || res.rows[i] >= p.seq_q)
      throw std::out_of_range("replica_attention: row " + std::to_string(res.rows[i]) + " is outside [0, seq_q = " +
                              std::to_string(p.seq_q) + ")");
    if (i && res.rows[i] <= res.rows[i - 1])
      throw std::invalid_argument("replica_attention: rows must be ascending and unique (row " +
                                  std::to_string(res.rows[i]) + " follows " + std::to_string(res.rows[i - 1]) + ")");
  }
  const bool subset = !res.rows.empty();
  res.num_rows = subset ? static_cast<int64_t>(res.rows.size()) : p.seq_q;
  const int64_t dqk = p.head_dim_qk, dv = p.head_dim_v, sq = p.seq_q, skv = p.seq_kv, nr = res.num_rows;
  const int64_t br = cfg.block_q, bc = cfg.block_kv;
  res.o.assign(static_cast<size_t>(p.batch * p.heads_q * nr * dv), 0.0f);
  res.lse.assign(static_cast<size_t>(p.batch * p.heads_q * nr), -kInf);
  // With exp2 the scale carries log2(e): exp(x·s) = 2^(x·s·log2 e), folded into one multiply.
  // The running max is kept over raw scores, as the kernels do, which is right only for a positive
  // scale: with scale < 0 the largest raw score is the smallest scaled one and every exponent turns
  // positive. So the raw scores are taken with the scale's sign (S = -Q Kᵀ for scale < 0, exact)
  // and |scale| multiplies them: the same scaled scores, and the very same bits for scale > 0.
  const bool negative_scale = p.softmax_scale() < 0;
  const float scale = static_cast<float>(std::fabs(p.softmax_scale())) * (cfg.use_exp2 ? kLog2eF : 1.0f);
  const float init_max = cfg.finite_neg_inf ? kFiniteNegInf : -kInf;
  auto ex = [&](float x) { return cfg.use_exp2 ? std::exp2(x) : std::exp(x); };
  // One task = one chunk of up to Br evaluated rows of one (b, h). With every row evaluated a chunk
  // is exactly a kernel's q-tile. With a subset, a chunk gathers Br selected rows that may lie in
  // different q-tiles; each row still gets the result its own q-tile gives it, because nothing in
  // the online softmax mixes rows: S = Q Kᵀ, the running max, ℓ and the O rescale are per row, and
  // O = P V takes row i of P only. What depends on the chunk is which KV tiles are visited (up to
  // the chunk's last row's visible prefix, with skip_masked_tiles), and a tile wholly masked for a
  // row leaves that row exactly as it was: every score is -inf, so m_new = m, corr = exp(0) = 1,
  // every p is exp(-inf) = 0, and O·1 + 0·V = O for finite V (the SkippingMaskedTilesChangesNothing
  // property). The one difference is Eigen's GEMM, which may sum a row's products in another order
  // when the block has another row count (bounded in replica_test.cpp).
  const int64_t chunks = (nr + br - 1) / br;
  const int64_t n_tasks = p.batch * p.heads_q * chunks;
  std::vector<std::vector<TraceEntry>> traces(static_cast<size_t>(n_tasks));

#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t task = 0; task < n_tasks; ++task) {
    const int64_t bh = task / chunks, c0 = (task % chunks) * br;  // c0: the chunk's first evaluated row
    const int64_t b = bh / p.heads_q, h = bh % p.heads_q;
    const int64_t hk = p.kv_head(h);
    const int64_t nq = std::min(br, nr - c0);
    auto row = [&](int64_t i) { return res.row_at(c0 + i); };  // query row of the chunk's i-th row
    const float* qp = in.q.data() + (bh * sq + row(0)) * dqk;  // every row: contiguous, read in place
    std::vector<float> q_rows;  // a subset: the chunk's query rows gathered
    if (subset) {
      q_rows.resize(static_cast<size_t>(nq * dqk));
      for (int64_t i = 0; i < nq; ++i)
        std::copy_n(in.q.data() + (bh * sq + row(i)) * dqk, dqk, q_rows.data() + i * dqk);
      qp = q_rows.data();
    }
    const float* kp = in.k.data() + (b * p.heads_kv + hk) * skv * dqk;
    const float* vp = in.v.data() + (b * p.heads_kv + hk) * skv * dv;
    Eigen::Map<const MatF> Q(qp, nq, dqk);

    std::vector<float> m(static_cast<size_t>(nq), init_max), l(static_cast<size_t>(nq), 0.0f);
    MatF O = MatF::Zero(nq, dv);
    int64_t kv_end = skv;  // keys past the last row's visible prefix are never loaded
    if (cfg.skip_masked_tiles) kv_end = visible_keys(p, row(nq - 1));
    const int64_t kv_tiles = (kv_end + bc - 1) / bc;
    for (int64_t kt = 0; kt < kv_tiles; ++kt) {
      const int64_t k0 = kt * bc, nk = std::min(bc, skv - k0);
      Eigen::Map<const MatF> K(kp + k0 * dqk, nk, dqk);
      Eigen::Map<const MatF> V(vp + k0 * dv, nk, dv);
      MatF S = Q * K.transpose();  // raw scores, fp32 accumulation
      if (negative_scale) S = -S;
      for (int64_t i = 0; i < nq; ++i) {
        const int64_t n = visible_keys(p, row(i));
        for (int64_t j = 0; j < nk; ++j)
          if (k0 + j >= n) S(i, j) = -kInf;  // masked scores are true -inf: exp of them is exactly 0
      }
      for (int64_t i = 0; i < nq; ++i) {
        float m_new = m[i];
        for (int64_t j = 0; j < nk; ++j) m_new = std::max(m_new, S(i, j));
        // With a -inf initial max and a row that has seen only masked keys, m_new is still -inf and
        // (s - m_new)·scale would be -inf - (-inf) = NaN; kernels substitute 0 for the max there
        // (every p is then exp(-inf) = 0 anyway). The finite fill avoids the case altogether.
        const float m_use = (m_new == -kInf) ? 0.0f : m_new;
        const float corr = ex((m[i] - m_use) * scale);  // rescales what was accumulated so far
        float rowsum = 0.0f;
        for (int64_t j = 0; j < nk; ++j) {
          const float pij = ex(S(i, j) * scale - m_use * scale);
          rowsum += pij;
          S(i, j) = cfg.round_p ? (cfg.truncate ? round_toward_zero(p.dtype, pij) : round_to(p.dtype, pij)) : pij;
        }
        l[i] = l[i] * corr + rowsum;
        O.row(i) *= corr;
        m[i] = m_new;
      }
      O.noalias() += S * V;  // P·V with fp32 accumulators
      for (int64_t t : trace_rows) {
        int64_t i = -1;  // t's place in the chunk; stays -1 when this chunk does not evaluate t
        if (!subset) {
          if (t >= c0 && t < c0 + nq) i = t - c0;
        } else {  // the chunk's rows are ascending
          const auto first = res.rows.begin() + c0, last = first + nq;
          if (const auto it = std::lower_bound(first, last, t); it != last && *it == t) i = it - first;
        }
        if (i < 0) continue;
        traces[static_cast<size_t>(task)].push_back(
            {b, h, t, kt, m[i], l[i], std::vector<float>(O.row(i).data(), O.row(i).data() + dv)});
      }
    }
    for (int64_t i = 0; i < nq; ++i) {
      float* o = res.o.data() + (bh * nr + c0 + i) * dv;
      float* lse = res.lse.data() + bh * nr + c0 + i;
      if (l[i] == 0.0f || visible_keys(p, row(i)) == 0) continue;  // no key seen: O = 0, LSE = -inf
      const float inv = 1.0f / l[i];
      for (int64_t c = 0; c < dv; ++c)
        o[c] = cfg.truncate ? round_toward_zero(p.dtype, O(i, c) * inv) : round_to(p.dtype, O(i, c) * inv);
      // LSE = scaled max + log(ℓ), converted to natural log when the kernel worked in base 2.
      *lse = cfg.use_exp2 ? (m[i] * scale + std::log2(l[i])) * kLn2F : m[i] * scale + std::log(l[i]);
    }
  }
  for (auto& t : traces) std::move(t.begin(), t.end(), std::back_inserter(res.trace));
  return res;
}

}  // namespace flashcheck
