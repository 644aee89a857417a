#include "reference/replica.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "reference/mask.h"
#include "reference/replica_numerics.h"
#include "reference/sequences.h"

namespace flashcheck {

namespace {
using MatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kLog2eF = static_cast<float>(kLog2e);
constexpr float kLn2F = static_cast<float>(kLn2);
using replica_detail::head_numerics;
using replica_detail::HeadNumerics;
// The finite stand-in for -inf: large enough that exp2((-2^30 - m)·scale) underflows to 0, small
// enough that (-2^30) - (-2^30) = 0 instead of the NaN that -inf - (-inf) gives.
constexpr float kFiniteNegInf = -1073741824.0f;

// One unit of work: up to Br evaluated rows (from the r0-th on) of sequence b, query head h.
struct Task {
  int64_t b, h, r0, nq;
};

}  // namespace

ReplicaResult replica_attention(const Problem& p, const Inputs& in, const ReplicaConfig& cfg,
                                std::span<const int64_t> trace_rows, std::span<const int64_t> rows) {
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] < 0 || rows[i] >= p.seq_q)
      throw std::out_of_range("replica_attention: row " + std::to_string(rows[i]) + " is outside [0, seq_q = " +
                              std::to_string(p.seq_q) + ")");
    if (i && rows[i] <= rows[i - 1])
      throw std::invalid_argument("replica_attention: rows must be ascending and unique (row " + std::to_string(rows[i]) +
                                  " follows " + std::to_string(rows[i - 1]) + ")");
  }
  return replica_attention(p, in, cfg, trace_rows, RowSet::same(p, rows));
}

ReplicaResult replica_attention(const Problem& p, const Inputs& in, const ReplicaConfig& cfg,
                                std::span<const int64_t> trace_rows, const RowSet& rows) {
  validate(p);
  validate_side_inputs(p, in);
  if (cfg.block_q <= 0 || cfg.block_kv <= 0) throw std::invalid_argument("replica: tile sizes must be positive");
  if (static_cast<int64_t>(in.q.size()) != p.q_elems() || static_cast<int64_t>(in.k.size()) != p.k_elems() ||
      static_cast<int64_t>(in.v.size()) != p.v_elems())
    throw std::invalid_argument("replica_attention: input sizes do not match the problem");
  if (rows.batch() != p.batch) throw std::invalid_argument("replica_attention: the row set is for another batch size");
  for (int64_t b = 0; b < p.batch; ++b)
    if (rows.count(b) > 0 && (rows.row(b, 0) < 0 || rows.row(b, rows.count(b) - 1) >= p.sq(b)))
      throw std::out_of_range("replica_attention: the row set has rows outside sequence " + std::to_string(b) + "'s " +
                              std::to_string(p.sq(b)) + " queries");
  const Sequences seqs(p);
  ReplicaResult res;
  res.rows = rows;
  const int64_t dqk = p.head_dim_qk, dv = p.head_dim_v, hq = p.heads_q;
  const int64_t br = cfg.block_q, bc = cfg.block_kv;
  res.o.assign(static_cast<size_t>(rows.total() * hq * dv), 0.0f);
  res.lse.assign(static_cast<size_t>(rows.total() * hq), -kInf);
  // The running max is kept over raw scores, as the kernels do, which is right only for a positive
  // scale: with scale < 0 the largest raw score is the smallest scaled one and every exponent turns
  // positive. So the raw scores are taken with the scale's sign (S = -Q Kᵀ for scale < 0, exact)
  // and |scale| multiplies them: the same scaled scores, and the very same bits for scale > 0.
  const bool negative_scale = p.softmax_scale() < 0;
  const float init_max = cfg.finite_neg_inf ? kFiniteNegInf : -kInf;
  const int k_off = cfg.p_offset(p);
  // With exp2 the offset joins the max, as FlashAttention 3 does (exp2(s·sc − (m·sc − k))); with exp
  // P is multiplied by 2^k, exactly.
  const float off2 = cfg.use_exp2 ? static_cast<float>(k_off) : 0.0f;
  const bool scale_p = !cfg.use_exp2 && k_off != 0;
  auto ex = [&](float x) { return cfg.use_exp2 ? std::exp2(x) : std::exp(x); };
  const DType odt = p.o_dtype();
  // One task = one chunk of up to Br evaluated rows of one (sequence, head). With every row
  // evaluated a chunk is exactly a kernel's q-tile (tiles start at each sequence's first row). With
  // a subset, a chunk gathers Br selected rows that may lie in different q-tiles; each row still
  // gets the result its own q-tile gives it, because nothing in the online softmax mixes rows: S =
  // Q Kᵀ, the modifiers, the running max, ℓ and the O rescale are per row, and O = P V takes row i
  // of P only. What depends on the chunk is which KV tiles are visited (those some row of the chunk
  // sees, with skip_masked_tiles), and a tile wholly masked for a row leaves that row exactly as it
  // was: every score is -inf, so m_new = m, corr = exp(0) = 1, every p is exp(-inf) = 0, and O·1 +
  // 0·V = O for finite V (the SkippingMaskedTilesChangesNothing tests). The one difference is
  // Eigen's GEMM, which may sum a row's products in another order when the block has another row
  // count (bounded in replica_test.cpp).
  std::vector<Task> tasks;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t r0 = 0; r0 < rows.count(b); r0 += br) tasks.push_back({b, h, r0, std::min(br, rows.count(b) - r0)});
  const int64_t n_tasks = static_cast<int64_t>(tasks.size());
  std::vector<std::vector<TraceEntry>> traces(static_cast<size_t>(n_tasks));

#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t task = 0; task < n_tasks; ++task) {
    const Task& tk = tasks[static_cast<size_t>(task)];
    const int64_t b = tk.b, h = tk.h, nq = tk.nq, hk = p.kv_head(h), skv = seqs.skv(b);
    const HeadNumerics hn = head_numerics(p, in, cfg.use_exp2, cfg.alibi_lse, b, h);
    const float sc = hn.sc;
    auto row = [&](int64_t i) { return rows.row(b, tk.r0 + i); };  // query row of the chunk's i-th row
    // Consecutive rows (every row, or a run of a sample) are read in place; others are gathered.
    const float* qp = in.q.data() + seqs.q_row(b, h, row(0));
    std::vector<float> q_rows;
    if (row(nq - 1) - row(0) != nq - 1) {
      q_rows.resize(static_cast<size_t>(nq * dqk));
      for (int64_t i = 0; i < nq; ++i) std::copy_n(in.q.data() + seqs.q_row(b, h, row(i)), dqk, q_rows.data() + i * dqk);
      qp = q_rows.data();
    }
    const float* kp = in.k.data() + seqs.k_row(b, hk, 0);
    const float* vp = in.v.data() + seqs.v_row(b, hk, 0);
    Eigen::Map<const MatF> Q(qp, nq, dqk);

    // Every mask is one interval of keys per row (reference/mask.h), both ends non-decreasing in
    // the row: the chunk's keys run from its first seeing row's first key to its last row's last.
    std::vector<KeyRange> vis(static_cast<size_t>(nq));
    int64_t lo = skv, hi = 0;
    for (int64_t i = 0; i < nq; ++i) {
      const KeyRange r = vis[static_cast<size_t>(i)] = visible_range(p, b, row(i));
      if (!r.empty()) lo = std::min(lo, r.lo), hi = std::max(hi, r.hi);
    }
    int64_t kt_begin = 0, kt_end = (skv + bc - 1) / bc;
    if (cfg.skip_masked_tiles) {  // tiles no row sees are never loaded, left of a window as right of the diagonal
      kt_begin = hi > lo ? lo / bc : 0;
      kt_end = hi > lo ? (hi + bc - 1) / bc : 0;
    }

    std::vector<float> m(static_cast<size_t>(nq), init_max), l(static_cast<size_t>(nq), 0.0f);
    MatF O = MatF::Zero(nq, dv);
    for (int64_t kt = kt_begin; kt < kt_end; ++kt) {
      const int64_t k0 = kt * bc, nk = std::min(bc, skv - k0);
      Eigen::Map<const MatF> K(kp + k0 * dqk, nk, dqk);
      Eigen::Map<const MatF> V(vp + k0 * dv, nk, dv);
      MatF S = Q * K.transpose();  // raw scores, fp32 accumulation (fp8: on the raw fp8 values)
      if (negative_scale) S = -S;
      // Score modifiers in FlashAttention's order: softcap (tanh in fp32), mask (-inf: exp of it is
      // exactly 0), ALiBi (fp32, raw units). A tile every row sees whole only takes the modifiers.
      const bool mods = hn.cap_mul > 0 || hn.bias.active();
      for (int64_t i = 0; i < nq; ++i) {
        const KeyRange r = vis[static_cast<size_t>(i)];
        const bool edge = k0 < r.lo || k0 + nk > r.hi;
        if (!edge && !mods) continue;
        const int64_t qi = row(i);
        for (int64_t j = 0; j < nk; ++j) {
          float& s = S(i, j);
          if (edge && !r.contains(k0 + j)) {
            s = -kInf;
            continue;
          }
          if (hn.cap_mul > 0) s = std::tanh(s * hn.cap_mul);
          if (hn.bias.active()) s += hn.key_offset ? hn.bias.slope * static_cast<float>(k0 + j) : hn.bias(qi, k0 + j);
        }
      }
      for (int64_t i = 0; i < nq; ++i) {
        float m_new = m[i];
        for (int64_t j = 0; j < nk; ++j) m_new = std::max(m_new, S(i, j));
        // With a -inf initial max and a row that has seen only masked keys, m_new is still -inf and
        // (s - m_new)·scale would be -inf - (-inf) = NaN; kernels substitute 0 for the max there
        // (every p is then exp(-inf) = 0 anyway). The finite fill avoids the case altogether.
        const float m_use = (m_new == -kInf) ? 0.0f : m_new;
        const float corr = ex((m[i] - m_use) * sc);  // rescales what was accumulated so far
        const float max_scaled = m_use * sc - off2;
        float rowsum = 0.0f;
        for (int64_t j = 0; j < nk; ++j) {
          float pij = ex(S(i, j) * sc - max_scaled);
          if (scale_p) pij = std::ldexp(pij, k_off);
          rowsum += pij;
          S(i, j) = cfg.round_p ? (cfg.truncate ? round_toward_zero(p.dtype, pij) : round_to(p.dtype, pij)) : pij;
        }
        l[i] = l[i] * corr + rowsum;
        O.row(i) *= corr;
        m[i] = m_new;
      }
      O.noalias() += S * V;  // P·V with fp32 accumulators (fp8: rounded P times the raw fp8 V)
      for (int64_t t : trace_rows) {
        // t's place in the chunk (its rows ascend); none when this chunk does not evaluate t
        const auto chunk = rows.rows_of(b).subspan(static_cast<size_t>(tk.r0), static_cast<size_t>(nq));
        const auto it = std::lower_bound(chunk.begin(), chunk.end(), t);
        if (it == chunk.end() || *it != t) continue;
        const int64_t i = it - chunk.begin();
        traces[static_cast<size_t>(task)].push_back(
            {b, h, t, kt, m[i], l[i], std::vector<float>(O.row(i).data(), O.row(i).data() + dv)});
      }
    }
    for (int64_t i = 0; i < nq; ++i) {
      if (vis[static_cast<size_t>(i)].empty()) continue;  // no key seen: O = 0, LSE = -inf, sink or not
      const size_t at = static_cast<size_t>(rows.index(b, h, tk.r0 + i, hq));
      float li = l[i];
      float ms = m[i] * sc;  // the running max in the exponent's units
      if (p.sinks) {
        // The sink joins at the end, in fp32, in the max as in the denominator (as the oracle): a
        // sink above the keys' max rescales ℓ and O by exp(m − sink) first, so a sink far above
        // every score cannot overflow exp. Its weight carries P's 2^k like every other term. (Some
        // kernels add exp(sink − m) without taking the max; they agree while sink − m stays small.)
        if (hn.sink > ms) {
          const float a = ex(ms - hn.sink);
          li *= a;
          O.row(i) *= a;
          ms = hn.sink;
        }
        li += std::ldexp(ex(hn.sink - ms), k_off);
      }
      if (li == 0.0f) continue;  // every weight underflowed (the -2^30 fill's lost rows): O = 0, LSE = -inf
      float* o = res.o.data() + at * static_cast<size_t>(dv);
      float inv = 1.0f / li;
      if (is_fp8(p.dtype)) inv *= hn.v_descale;  // FlashAttention 3: O · (v_descale / ℓ)
      for (int64_t c = 0; c < dv; ++c) {
        const float x = O(i, c) * inv;
        o[c] = !cfg.round_o ? x : cfg.truncate ? round_toward_zero(odt, x) : round_to(odt, x);
      }
      // LSE = scaled max + log(ℓ / 2^k), converted to natural log when the kernel worked in base 2.
      const float lsum = k_off ? std::ldexp(li, -k_off) : li;
      res.lse[at] = cfg.use_exp2 ? (ms + std::log2(lsum)) * kLn2F : ms + std::log(lsum);
    }
  }
  for (auto& t : traces) std::move(t.begin(), t.end(), std::back_inserter(res.trace));
  return res;
}

}  // namespace flashcheck
