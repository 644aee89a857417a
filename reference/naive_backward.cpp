#include "reference/naive_backward.h"

#include <cblas.h>
#include <omp.h>

#include <Eigen/Dense>
#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "reference/backward_rows.h"
#include "reference/mask.h"
#include "reference/score_mod.h"
#include "reference/sequences.h"

namespace flashcheck {

namespace {
using backward::RowMods;
using backward::RowStats;
using MatD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapD = Eigen::Map<MatD>;
using CMapD = Eigen::Map<const MatD>;
using CMapRow = Eigen::Map<const Eigen::RowVectorXd>;
using CMapCol = Eigen::Map<const Eigen::VectorXd>;
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Block sizes. None depends on the thread count: a block's GEMMs sum in an order fixed by its
// shape, so fixed shapes make the results bitwise the same on 1 thread or 128.
// Doubles in one scratch matrix of the row pass (8 MiB; two, or three with a softcap, per thread):
// row blocks shrink as the keys they see grow, as the forward's do.
constexpr int64_t kScoreBudget = int64_t{1} << 20;
// Tallest row block of the row pass (the forward's measured best, reference/naive.cpp).
constexpr int64_t kMaxRowBlock = 256;
// Keys per task of the key pass, and rows per step of its GEMMs: dV += Pᵀ dO and dK += dSᵀ Q then
// run 256 × D × 256, shapes OpenBLAS runs near its peak.
constexpr int64_t kKeyBlock = 256;
constexpr int64_t kRowStep = 256;
// Keys per unit of the K/V widening.
constexpr int64_t kSlab = 512;
// A chunk whose row blocks hold fewer (pair × head dim) products than this runs on one thread: its
// few hundred microseconds of work would cost less than a parallel region's start and barriers
// (and far less on a loaded machine, where a barrier waits for a descheduled thread). Fuzz
// campaigns call the oracle on thousands of such problems. Results do not change: tasks are the
// same on any number of threads.
constexpr int64_t kParallelWork = int64_t{1} << 22;

int I(int64_t x) { return static_cast<int>(x); }  // CBLAS (LP64) dimensions; checked to fit on entry

// C (m × n) = A (m × k) · Bᵀ (B n × k), all row-major and packed.
void gemm_abt(int64_t m, int64_t n, int64_t k, const double* a, const double* b, double* c) {
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, I(m), I(n), I(k), 1.0, a, I(k), b, I(k), 0.0, c, I(n));
}
// C (m × n) = A (m × k) · B (k × n).
void gemm_ab(int64_t m, int64_t n, int64_t k, const double* a, const double* b, double* c) {
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, I(m), I(n), I(k), 1.0, a, I(k), b, I(n), 0.0, c, I(n));
}
// C (m × n) += Aᵀ · B, with A k × m and B k × n.
void gemm_atb_add(int64_t m, int64_t n, int64_t k, const double* a, const double* b, double* c) {
  cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, I(m), I(n), I(k), 1.0, a, I(m), b, I(n), 1.0, c, I(n));
}

void check_inputs(const Problem& p, const Inputs& in, std::span<const float> d_out) {
  validate(p);
  validate_side_inputs(p, in);
  auto size = [](const char* name, size_t have, int64_t need) {
    if (static_cast<int64_t>(have) != need)
      throw std::invalid_argument(std::string("naive_attention_backward: ") + name + " has " + std::to_string(have) +
                                  " values; the problem needs " + std::to_string(need));
  };
  size("q", in.q.size(), p.q_elems());
  size("k", in.k.size(), p.k_elems());
  size("v", in.v.size(), p.v_elems());
  size("dO", d_out.size(), p.o_elems());
  if (p.seq_kv > INT_MAX || p.head_dim_qk > INT_MAX || p.head_dim_v > INT_MAX)
    throw std::invalid_argument("naive_attention_backward: seq_kv and head dims must fit the 32-bit CBLAS interface");
}

// Row pass task: rows [r0, r0 + nb) of query head h of sequence b; keys [c0, c0 + ncols) are those
// any of its rows sees (rows ascend, and both ends of a row's visible keys never decrease with it).
struct RowTask {
  int64_t c, b, h, r0, nb, c0, ncols;
  int64_t work() const { return nb * (ncols + 1); }
};
// Key pass task: keys [j0, j0 + nk) of KV head hk of sequence b; rows [ia, ib) of each query head
// of the group are those that may see one of them.
struct KeyTask {
  int64_t c, b, hk, j0, nk, ia, ib;
  int64_t work() const { return (ib - ia + 1) * nk; }
};

struct Scratch {
  std::vector<double> q, g;  // widened Q and dO rows
  HugeBuffer<double> p_buf, dp_buf, c_buf;
  double* p = nullptr;   // scores → probabilities
  double* dp = nullptr;  // dP → dS
  double* c = nullptr;   // the softcap's derivative (softcap only)
};

class BackwardRun {
 public:
  BackwardRun(const Problem& p, const Inputs& in, std::span<const float> d_out)
      : p_(p), in_(in), dout_(d_out), seqs_(p), dqk_(p.head_dim_qk), dv_(p.head_dim_v), scale_(p.softmax_scale()),
        fp8_(is_fp8(p.dtype)), threads_(omp_get_max_threads()) {
    plan_row_blocks();
    r_.dq = uninit_big_vector<double>(static_cast<size_t>(p.q_elems()));
    r_.dk = uninit_big_vector<double>(static_cast<size_t>(p.k_elems()));
    r_.dv = uninit_big_vector<double>(static_cast<size_t>(p.v_elems()));
    const size_t rows = static_cast<size_t>(p.lse_elems());
    stats_.resize(rows);
    delta_.resize(rows);
    if (p.sinks) sink_part_.assign(rows, 0.0);
    scratch_.resize(static_cast<size_t>(threads_));
  }

  BackwardResult run() {
    const int64_t units = p_.batch * p_.heads_kv;
    for (int64_t u0 = 0; u0 < units;) u0 += run_chunk(u0, chunk_size(u0));
    sum_sink_grads();
    return std::move(r_);
  }

 private:
  int64_t b_of(int64_t c) const { return (u0_ + c) / p_.heads_kv; }
  int64_t hk_of(int64_t c) const { return (u0_ + c) % p_.heads_kv; }
  const double* k_of(int64_t c) const { return kvw_ + kv_at_[static_cast<size_t>(c)]; }
  const double* v_of(int64_t c) const { return k_of(c) + seqs_.skv(b_of(c)) * dqk_; }
  // Whether K rows [j0, j1) of chunk head c are all finite (a scan of j1 − j0 flags: nothing
  // beside the GEMMs over the same keys).
  bool k_finite(int64_t c, int64_t j0, int64_t j1) const {
    const uint8_t* bad = kbad_.data() + kv_rows_at_[static_cast<size_t>(c)];
    return std::find(bad + j0, bad + j1, uint8_t{1}) == bad + j1;
  }

  // The row pass's block height and widest strip: rows of a block see at most
  // min(Skv, width + rows − 1) keys, width the span one row sees (a window bounded on both sides).
  void plan_row_blocks() {
    int64_t skv_max = 1;
    for (int64_t b = 0; b < p_.batch; ++b) skv_max = std::max(skv_max, seqs_.skv(b));
    const bool causal = p_.causal != Causal::none;
    const bool narrow = p_.window.left >= 0 && (p_.window.right >= 0 || causal);
    const int64_t right = causal ? 0 : std::min(p_.window.right, skv_max);
    const int64_t width = narrow ? std::min(skv_max, std::min(p_.window.left, skv_max) + right + 1) : skv_max;
    span_ = std::min(skv_max, width + kMaxRowBlock);
    row_block_ = std::clamp<int64_t>(kScoreBudget / span_, 1, kMaxRowBlock);
  }

  // KV heads (units (b, hk)) from u0 on whose widened K/V fit the threads' budget, at least one and
  // no more once both passes have four tasks per thread (each pass ends with a barrier, so fewer
  // would leave threads idle). Chunking changes no result: a unit's tasks are the same in any chunk.
  int64_t chunk_size(int64_t u0) const {
    const int64_t units = p_.batch * p_.heads_kv;
    int64_t n = 0, doubles = 0, n_rows = 0, n_keys = 0;
    while (u0 + n < units) {
      const int64_t b = (u0 + n) / p_.heads_kv;
      const int64_t more = seqs_.skv(b) * (dqk_ + dv_);
      const bool enough = n_rows >= 4 * threads_ && n_keys >= 4 * threads_;
      if (n > 0 && (doubles + more > 2 * threads_ * kScoreBudget || enough)) break;
      doubles += more;
      n_rows += p_.group() * ((seqs_.sq(b) + row_block_ - 1) / row_block_);
      n_keys += (seqs_.skv(b) + kKeyBlock - 1) / kKeyBlock;
      ++n;
    }
    return n;
  }

  int64_t run_chunk(int64_t u0, int64_t n) {
    u0_ = u0;
    kv_at_.assign(static_cast<size_t>(n) + 1, 0);
    kv_rows_at_.assign(static_cast<size_t>(n) + 1, 0);
    std::vector<std::pair<int64_t, int64_t>> slabs;  // (chunk head, first key)
    for (int64_t c = 0; c < n; ++c) {
      const int64_t skv = seqs_.skv(b_of(c));
      kv_at_[static_cast<size_t>(c) + 1] = kv_at_[static_cast<size_t>(c)] + skv * (dqk_ + dv_);
      kv_rows_at_[static_cast<size_t>(c) + 1] = kv_rows_at_[static_cast<size_t>(c)] + skv;
      for (int64_t j = 0; j < skv; j += kSlab) slabs.emplace_back(c, j);
    }
    kvw_ = kv_.fit(static_cast<size_t>(std::max<int64_t>(kv_at_.back(), 1)));
    kbad_.resize(static_cast<size_t>(kv_rows_at_.back()));  // every flag is written by widen_slab
    const std::vector<RowTask> rows = row_tasks(n);
    const std::vector<KeyTask> keys = key_tasks(n);
    int64_t work = 0;
    for (const RowTask& t : rows) work += t.nb * t.ncols * (dqk_ + dv_);

#pragma omp parallel num_threads(static_cast<int>(threads_)) if (work >= kParallelWork)
    {
      Scratch& sc = scratch_[static_cast<size_t>(omp_get_thread_num())];
      fit(sc);
#pragma omp for schedule(static)
      for (size_t x = 0; x < slabs.size(); ++x) widen_slab(slabs[x].first, slabs[x].second);
      // Both lists are largest first (causal blocks differ up to Skv-fold), so the dynamic
      // schedule ends evenly; which thread runs a task changes nothing in its results.
#pragma omp for schedule(dynamic, 1)
      for (size_t t = 0; t < rows.size(); ++t) row_task(rows[t], sc);
#pragma omp for schedule(dynamic, 1)
      for (size_t t = 0; t < keys.size(); ++t) key_task(keys[t], sc);
    }
    return n;
  }

  void fit(Scratch& sc) const {
    const int64_t rows = std::max(row_block_, kRowStep);
    sc.q.resize(static_cast<size_t>(rows * dqk_));
    sc.g.resize(static_cast<size_t>(rows * dv_));
    const size_t cells = static_cast<size_t>(std::max(row_block_ * span_, kRowStep * kKeyBlock));
    sc.p = sc.p_buf.fit(cells);
    sc.dp = sc.dp_buf.fit(cells);
    if (p_.softcap > 0) sc.c = sc.c_buf.fit(cells);
  }

  // Keys [j0, j0 + kSlab) of chunk head c widened to fp64 (fp8 values times their descale: exact,
  // 4 + 24 significant bits), and which K rows hold a non-finite value.
  void widen_slab(int64_t c, int64_t j0) {
    const int64_t b = b_of(c), hk = hk_of(c), nj = std::min(kSlab, seqs_.skv(b) - j0);
    double* K = kvw_ + kv_at_[static_cast<size_t>(c)] + j0 * dqk_;
    double* V = kvw_ + kv_at_[static_cast<size_t>(c)] + seqs_.skv(b) * dqk_ + j0 * dv_;
    MapD(K, nj, dqk_) = Eigen::Map<const MatF>(in_.k.data() + seqs_.k_row(b, hk, j0), nj, dqk_).cast<double>();
    MapD(V, nj, dv_) = Eigen::Map<const MatF>(in_.v.data() + seqs_.v_row(b, hk, j0), nj, dv_).cast<double>();
    if (fp8_) {
      MapD(K, nj, dqk_) *= descale_of(p_, in_.descale_k, b, hk);
      MapD(V, nj, dv_) *= descale_of(p_, in_.descale_v, b, hk);
    }
    uint8_t* bad = kbad_.data() + kv_rows_at_[static_cast<size_t>(c)] + j0;
    for (int64_t j = 0; j < nj; ++j) bad[j] = CMapRow(K + j * dqk_, dqk_).allFinite() ? 0 : 1;
  }

  // Rows [r0, r0 + n) of query head h: Q widened (times its KV head's descale) and dO widened;
  // returns whether both are all finite.
  bool widen_rows(int64_t b, int64_t h, int64_t r0, int64_t n, Scratch& sc) const {
    MapD q(sc.q.data(), n, dqk_), g(sc.g.data(), n, dv_);
    q = Eigen::Map<const MatF>(in_.q.data() + seqs_.q_row(b, h, r0), n, dqk_).cast<double>();
    if (fp8_) q *= descale_of(p_, in_.descale_q, b, p_.kv_head(h));
    g = Eigen::Map<const MatF>(dout_.data() + seqs_.o_row(b, h, r0), n, dv_).cast<double>();
    return q.allFinite() && g.allFinite();
  }

  RowMods mods_for(int64_t b, int64_t h) const {
    RowMods m;
    m.scale = scale_;
    m.cap.cap = p_.softcap;
    m.bias = alibi_for<double>(p_, in_.alibi_slopes.data(), b, h);
    if (p_.sinks) m.sink = in_.sinks[static_cast<size_t>(h)];
    return m;
  }

  std::vector<RowTask> row_tasks(int64_t n) const {
    std::vector<RowTask> tasks;
    for (int64_t c = 0; c < n; ++c) {
      const int64_t b = b_of(c), hk = hk_of(c), sq = seqs_.sq(b);
      for (int64_t h = hk * p_.group(); h < (hk + 1) * p_.group(); ++h)
        for (int64_t r0 = 0; r0 < sq; r0 += row_block_) {
          const int64_t nb = std::min(row_block_, sq - r0);
          const int64_t c0 = visible_range(p_, b, r0).lo, hi = visible_range(p_, b, r0 + nb - 1).hi;
          tasks.push_back({c, b, h, r0, nb, c0, std::max<int64_t>(hi - c0, 0)});
        }
    }
    std::stable_sort(tasks.begin(), tasks.end(), [](const RowTask& a, const RowTask& b) { return a.work() > b.work(); });
    return tasks;
  }

  // The rows of sequence b that may see a key of [j0, j1): the first whose visible keys end past
  // j0 up to the first whose visible keys start at j1 or later (both ends ascend with the row).
  std::pair<int64_t, int64_t> rows_seeing(int64_t b, int64_t j0, int64_t j1) const {
    auto first = [&](auto past) {  // the first row for which past(visible_range) holds
      int64_t lo = 0, hi = seqs_.sq(b);
      while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (past(visible_range(p_, b, mid))) hi = mid;
        else lo = mid + 1;
      }
      return lo;
    };
    const int64_t ia = first([&](KeyRange r) { return r.hi > j0; });
    const int64_t ib = first([&](KeyRange r) { return r.lo >= j1; });
    return {ia, std::max(ia, ib)};
  }

  std::vector<KeyTask> key_tasks(int64_t n) const {
    std::vector<KeyTask> tasks;
    for (int64_t c = 0; c < n; ++c) {
      const int64_t b = b_of(c), skv = seqs_.skv(b);
      for (int64_t j0 = 0; j0 < skv; j0 += kKeyBlock) {
        const int64_t nk = std::min(kKeyBlock, skv - j0);
        const auto [ia, ib] = rows_seeing(b, j0, j0 + nk);
        tasks.push_back({c, b, hk_of(c), j0, nk, ia, ib});
      }
    }
    std::stable_sort(tasks.begin(), tasks.end(), [](const KeyTask& a, const KeyTask& b) { return a.work() > b.work(); });
    return tasks;
  }

  // Pass 1, one row block: P, D and dS of every row, and its dQ rows.
  void row_task(const RowTask& t, Scratch& sc) {
    double* dq = r_.dq.data() + seqs_.q_row(t.b, t.h, t.r0);
    if (t.ncols == 0) {  // no row of the block sees a key: dQ = 0, and nothing to remember
      std::fill_n(dq, t.nb * dqk_, 0.0);
      for (int64_t i = 0; i < t.nb; ++i) forget_row(t.b, t.h, t.r0 + i);
      return;
    }
    widen_rows(t.b, t.h, t.r0, t.nb, sc);  // non-finite rows reach only themselves here
    const double* K = k_of(t.c) + t.c0 * dqk_;
    gemm_abt(t.nb, t.ncols, dqk_, sc.q.data(), K, sc.p);
    gemm_abt(t.nb, t.ncols, dv_, sc.g.data(), v_of(t.c) + t.c0 * dv_, sc.dp);
    const RowMods mods = mods_for(t.b, t.h);
    for (int64_t i = 0; i < t.nb; ++i) first_pass_row(t, i, mods, sc);
    // dQ = dS K. Masked entries of dS are exact zeros, but 0 · Inf is NaN: a strip holding a
    // non-finite key must not reach rows that do not see it, so such strips go row by row over
    // each row's visible keys only.
    const double* dS = sc.dp;
    if (k_finite(t.c, t.c0, t.c0 + t.ncols)) {
      gemm_ab(t.nb, dqk_, t.ncols, dS, K, dq);
    } else {
      for (int64_t i = 0; i < t.nb; ++i) {
        const KeyRange vis = visible_range(p_, t.b, t.r0 + i);
        Eigen::Map<Eigen::RowVectorXd> row(dq + i * dqk_, dqk_);
        if (vis.empty()) row.setZero();
        else row.noalias() = CMapRow(dS + i * t.ncols + (vis.lo - t.c0), vis.count()) * CMapD(k_of(t.c) + vis.lo * dqk_, vis.count(), dqk_);
      }
    }
    MapD(dq, t.nb, dqk_) *= scale_;  // dQ = scale · Σ dS k: one rounding per element
  }

  // A row that sees no key: it adds nothing to any gradient.
  void forget_row(int64_t b, int64_t h, int64_t row) {
    const size_t at = static_cast<size_t>(seqs_.lse_at(b, h, row));
    stats_[at] = {kNegInf, 0.0};
    delta_[at] = 0;
    if (p_.sinks) sink_part_[at] = 0;
  }

  // Row i of a row block: scores → P, D, dS (zero outside the row's visible keys), and the row's
  // statistics and sink contribution kept for pass 2 and the end.
  void first_pass_row(const RowTask& t, int64_t i, const RowMods& mods, Scratch& sc) {
    const int64_t row = t.r0 + i;
    const KeyRange vis = visible_range(p_, t.b, row);
    double* pr = sc.p + i * t.ncols;
    double* dsr = sc.dp + i * t.ncols;
    if (vis.empty()) {
      std::fill_n(dsr, t.ncols, 0.0);
      forget_row(t.b, t.h, row);
      return;
    }
    const int64_t off = vis.lo - t.c0, n = vis.count();
    double* cr = p_.softcap > 0 ? sc.c + i * t.ncols + off : nullptr;
    backward::final_scores(mods, pr + off, n, row, vis.lo, cr);
    const RowStats st = backward::softmax_in_place(pr + off, n, mods.sink);
    const double d = backward::row_delta(pr + off, dsr + off, n);
    backward::score_grads(pr + off, dsr + off, cr, n, d);
    std::fill(dsr, dsr + off, 0.0);
    std::fill(dsr + off + n, dsr + t.ncols, 0.0);
    const size_t at = static_cast<size_t>(seqs_.lse_at(t.b, t.h, row));
    stats_[at] = st;
    delta_[at] = d;
    // −P_sink · D (naive_backward.h); a −inf sink takes no weight and gets no gradient.
    if (p_.sinks) sink_part_[at] = mods.sink > kNegInf ? -backward::sink_prob(mods.sink, st) * d : 0.0;
  }

  // The visible keys of `row` within the key task's block, relative to the block: [off, off + n).
  std::pair<int64_t, int64_t> in_block(const KeyTask& t, int64_t row) const {
    const KeyRange vis = visible_range(p_, t.b, row);
    const int64_t a = std::max(vis.lo, t.j0), e = std::min(vis.hi, t.j0 + t.nk);
    return {a - t.j0, std::max<int64_t>(e - a, 0)};
  }

  // Pass 2, one key block: dK and dV of its keys, summed over every row of the group that sees
  // them, in a fixed order (query heads ascending, then row steps).
  void key_task(const KeyTask& t, Scratch& sc) {
    double* dk = r_.dk.data() + seqs_.k_row(t.b, t.hk, t.j0);
    double* dv = r_.dv.data() + seqs_.v_row(t.b, t.hk, t.j0);
    std::fill_n(dk, t.nk * dqk_, 0.0);
    std::fill_n(dv, t.nk * dv_, 0.0);
    const double* K = k_of(t.c) + t.j0 * dqk_;
    const double* V = v_of(t.c) + t.j0 * dv_;
    for (int64_t h = t.hk * p_.group(); h < (t.hk + 1) * p_.group(); ++h) {
      const RowMods mods = mods_for(t.b, h);
      for (int64_t r0 = t.ia; r0 < t.ib; r0 += kRowStep) {
        const int64_t nr = std::min(kRowStep, t.ib - r0);
        const bool finite = widen_rows(t.b, h, r0, nr, sc);
        gemm_abt(nr, t.nk, dqk_, sc.q.data(), K, sc.p);
        gemm_abt(nr, t.nk, dv_, sc.g.data(), V, sc.dp);
        for (int64_t i = 0; i < nr; ++i) second_pass_row(t, h, r0 + i, i, mods, sc);
        if (finite) {
          gemm_atb_add(t.nk, dv_, nr, sc.p, sc.g.data(), dv);
          gemm_atb_add(t.nk, dqk_, nr, sc.dp, sc.q.data(), dk);
        } else {
          add_row_by_row(t, r0, nr, sc, dk, dv);
        }
      }
    }
    MapD(dk, t.nk, dqk_) *= scale_;  // dK = scale · Σ dS q
  }

  // Row i (query `row` of head h) of a key block's step: P from the row's saved statistics, dS;
  // both zero outside the keys the row sees.
  void second_pass_row(const KeyTask& t, int64_t h, int64_t row, int64_t i, const RowMods& mods, Scratch& sc) {
    double* pr = sc.p + i * t.nk;
    double* dsr = sc.dp + i * t.nk;
    const auto [off, n] = in_block(t, row);
    if (n == 0) {
      std::fill_n(pr, t.nk, 0.0);
      std::fill_n(dsr, t.nk, 0.0);
      return;
    }
    const size_t at = static_cast<size_t>(seqs_.lse_at(t.b, h, row));
    double* cr = p_.softcap > 0 ? sc.c + i * t.nk + off : nullptr;
    backward::final_scores(mods, pr + off, n, row, t.j0 + off, cr);
    backward::probs_from_stats(pr + off, n, stats_[at]);
    backward::score_grads(pr + off, dsr + off, cr, n, delta_[at]);
    for (double* x : {pr, dsr}) {
      std::fill(x, x + off, 0.0);
      std::fill(x + off + n, x + t.nk, 0.0);
    }
  }

  // dV += Pᵀ dO and dK += dSᵀ Q as one rank-1 update per row over the keys it sees: with a
  // non-finite q or dO row in the step, the GEMM would carry 0 · Inf into keys the row does not see.
  void add_row_by_row(const KeyTask& t, int64_t r0, int64_t nr, const Scratch& sc, double* dk, double* dv) const {
    for (int64_t i = 0; i < nr; ++i) {
      const auto [off, n] = in_block(t, r0 + i);
      if (n == 0) continue;
      MapD(dv + off * dv_, n, dv_).noalias() += CMapCol(sc.p + i * t.nk + off, n) * CMapRow(sc.g.data() + i * dv_, dv_);
      MapD(dk + off * dqk_, n, dqk_).noalias() += CMapCol(sc.dp + i * t.nk + off, n) * CMapRow(sc.q.data() + i * dqk_, dqk_);
    }
  }

  // dsink_h: the rows' contributions summed in a fixed order (sequence, then row).
  void sum_sink_grads() {
    if (!p_.sinks) return;
    r_.dsinks.assign(static_cast<size_t>(p_.heads_q), 0.0);
    for (int64_t h = 0; h < p_.heads_q; ++h)
      for (int64_t b = 0; b < p_.batch; ++b)
        for (int64_t i = 0; i < seqs_.sq(b); ++i) r_.dsinks[static_cast<size_t>(h)] += sink_part_[static_cast<size_t>(seqs_.lse_at(b, h, i))];
  }

  const Problem& p_;
  const Inputs& in_;
  std::span<const float> dout_;
  const Sequences seqs_;
  const int64_t dqk_, dv_;
  const double scale_;
  const bool fp8_;
  const int64_t threads_;
  int64_t row_block_ = 1, span_ = 1;
  BackwardResult r_;
  std::vector<RowStats> stats_;    // per logical row (Sequences::lse_at): the softmax's max and 1/sum
  std::vector<double> delta_;      // D per row
  std::vector<double> sink_part_;  // −P_sink · D per row (sinks only)
  std::vector<Scratch> scratch_;   // per thread
  // The current chunk: units u0_ .. ; widened K then V of each, and which K rows are not finite.
  int64_t u0_ = 0;
  HugeBuffer<double> kv_;
  double* kvw_ = nullptr;
  std::vector<int64_t> kv_at_, kv_rows_at_;
  std::vector<uint8_t> kbad_;
};

}  // namespace

BackwardResult naive_attention_backward(const Problem& p, const Inputs& in, std::span<const float> d_out) {
  check_inputs(p, in, d_out);
  return BackwardRun(p, in, d_out).run();
}

}  // namespace flashcheck
