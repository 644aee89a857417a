#include "reference/naive.h"

#include "reference/big_vector.h"

#include <cblas.h>
#include <omp.h>

#include <Eigen/Dense>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>

#include "reference/mask.h"
#include "reference/row_simd.h"
#include "reference/score_mod.h"
#include "reference/sequences.h"
#include "reference/strip_plan.h"

namespace flashcheck {

namespace {
using MatD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapD = Eigen::Map<MatD>;
constexpr double kNegInf = -std::numeric_limits<double>::infinity();
// Scratch for S is capped at this many doubles per thread (16 MiB): row blocks shrink as seq_kv grows.
constexpr int64_t kScoreBudget = int64_t{2} << 20;
// Tallest row block. Every GEMM call packs the K (or V) prefix it reads afresh, so taller blocks
// amortise that copy over more rows, but past ~256 rows the block's scores (rows × seq_kv doubles)
// fall out of the caches. On the H100 machine's 16-core Xeon (AVX-512, warm, 1×4×4096×128):
// 128 rows 288 GFLOPS, 256 rows 352, 512 rows 277 (PERF.md, session 4).
constexpr int64_t kMaxRowBlock = 256;
// Tasks of the schedule's last round are halved, but not below this many rows (BLAS packs K and V
// afresh for every block, so short blocks cost more per row).
constexpr int64_t kMinSplitRows = 32;

int64_t env_int(const char* name, int64_t lo, int64_t hi, int64_t fallback) {
  const char* e = std::getenv(name);
  const long long x = e ? std::atoll(e) : 0;
  return x >= lo && x <= hi ? static_cast<int64_t>(x) : fallback;
}

// kMaxRowBlock, or FLASHCHECK_ORACLE_ROW_BLOCK (1..4096); the score budget still caps it.
int64_t max_row_block() {
  static const int64_t v = env_int("FLASHCHECK_ORACLE_ROW_BLOCK", 1, 4096, kMaxRowBlock);
  return v;
}

// FLASHCHECK_ORACLE_PROFILE=1: where a call's time went, on stderr: each step's thread-seconds
// averaged over the threads, and the wall time of the whole call. What the steps do not explain is
// the threads' waiting (uneven ends) and what lies outside them (allocation, fork/join).
struct Profile {
  double setup = 0, kv = 0, widen = 0, scores = 0, softmax = 0, pv = 0, store = 0, idle = 0;
  Profile& operator+=(const Profile& o) {
    setup += o.setup, kv += o.kv, widen += o.widen, scores += o.scores, softmax += o.softmax, pv += o.pv, store += o.store,
        idle += o.idle;
    return *this;
  }
};
bool profiling() {
  static const bool on = env_int("FLASHCHECK_ORACLE_PROFILE", 1, 1, 0) == 1;
  return on;
}
// Adds the seconds since the previous lap to `slot` (no clock reads unless profiling).
struct Lap {
  bool on = profiling();
  std::chrono::steady_clock::time_point t = on ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  void operator()(double& slot) {
    if (!on) return;
    const auto now = std::chrono::steady_clock::now();
    slot += std::chrono::duration<double>(now - t).count();
    t = now;
  }
};

// One unit of work: a block of query rows of one (batch, query head).
struct Task {
  int64_t kv;    // index into this chunk's widened K/V heads
  int64_t b, h;  // sequence and query head
  int64_t r0;    // first row (index into the sequence's evaluated rows)
  int64_t nb;    // rows in the block
  int64_t c0;    // first key any row of the block sees
  int64_t ncols; // keys from c0 on that some row of the block sees: others are never touched
};

// Step 1: dot products D = Q Kᵀ, one fp64 GEMM (nb × ncols, row-major), with alpha 1: the scale is
// applied by step 2, one rounding per visible score. Passing the scale as alpha would leave its
// rounding to the BLAS kernel, and kernels differ: on a Sapphire Rapids host OpenBLAS 0.3.21 folded
// alpha in before the sum (scores of outlier keys 57 ulp off where the dot product itself is exact;
// session 7, PERF.md), which the GPU oracle's derived bound rightly refused.
// One call per piece of the block's strip (reference/strip_plan.h): nb rows against ncols keys,
// into S whose rows are lds apart. A score is one dot product whichever piece computes it.
void dots(int64_t nb, int64_t ncols, int64_t dqk, const double* q, const double* k, double* s, int64_t lds) {
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(nb), static_cast<int>(ncols), static_cast<int>(dqk),
              1.0, q, static_cast<int>(dqk), k, static_cast<int>(dqk), 0.0, s, static_cast<int>(lds));
}

// What one row adds to its scores before the softmax: softcap, ALiBi bias and the sink logit
// (reference/score_mod.h), in fp64.
struct RowMods {
  double scale = 1;  // the softmax scale: every score is rd(rd(q·k) · scale)
  Softcap<double> cap;
  AlibiBias<double> bias;
  double sink = -std::numeric_limits<double>::infinity();  // −inf: no sink
  bool any() const { return cap.active() || bias.active(); }
};

// Step 2, one row of S (ncols columns from key c0 on) whose visible keys are [lo, hi) of the
// sequence: scale, modifiers, row max, exp, sum. Leaves E = exp(s - max) in s (keys outside [lo, hi)
// exactly 0), writes the row's LSE and returns the sum ℓ (the sink's share included). The
// division by ℓ is left to the Dv outputs (step 4) instead of the Skv exponentials: the same
// quotient up to one rounding, and Skv/Dv times fewer divides.
double softmax_row(const RowKernels& rk, double* s, int64_t row, KeyRange vis, int64_t c0, int64_t ncols,
                   const RowMods& mods, double* lse) {
  const int64_t n = vis.count();
  if (n == 0) {  // sees no key: O = 0, LSE = -inf (set by the caller), with or without a sink
    std::fill_n(s, ncols, 0.0);
    return 0.0;
  }
  double* const x = s + (vis.lo - c0);
  double scale = mods.scale;
  if (mods.any()) {  // the modifiers take the scaled score; row_max then only finds the max
    for (int64_t j = 0; j < n; ++j) x[j] = mods.cap(x[j] * scale) + mods.bias(row, vis.lo + j);
    scale = 1;
  }
  const RowMax mx = rk.row_max(x, n, scale);
  // The sink joins the max too: a sink far above every score would otherwise overflow exp.
  const double m = std::max(mx.m, mods.sink);
  if (mx.nan || mx.m == kNegInf || m == std::numeric_limits<double>::infinity()) {
    // NaN scores, all scores -inf (0/0) or a +inf score (inf - inf): the softmax itself is
    // undefined, so the row is NaN rather than anything a kernel could match by accident.
    std::fill_n(s, ncols, std::numeric_limits<double>::quiet_NaN());
    *lse = std::numeric_limits<double>::quiet_NaN();
    return std::numeric_limits<double>::quiet_NaN();
  }
  double l = rk.exp_sum(x, n, m);
  if (mods.sink > kNegInf) l += std::exp(mods.sink - m);  // in the denominator, with no value
  std::fill(s, x, 0.0);
  std::fill(x + n, s + ncols, 0.0);
  *lse = m + std::log(l);
  return l;
}

// Step 3: U = E V, the second fp64 GEMM (unnormalised outputs, nb × dv), one call per piece of the
// strip: E's rows are lde apart; beta 1 adds the piece to what the row's other pieces summed.
void weighted_sum(int64_t nb, int64_t ncols, int64_t dv, const double* e, int64_t lde, const double* v, double* u, double beta) {
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(nb), static_cast<int>(dv), static_cast<int>(ncols),
              1.0, e, static_cast<int>(lde), v, static_cast<int>(dv), beta, u, static_cast<int>(dv));
}

// Step 4, one row: O = U / ℓ. With non-finite values in V (v_finite false) U is not taken from the
// block GEMM: 0 · Inf and 0 · NaN are NaN, so a masked key (E = 0) must not reach the row, and the
// row is recomputed over its visible keys only (e and v both start at the row's first visible key).
void store_row(double* dst, const double* u, const double* e, const double* v, int64_t n, int64_t dv, double l,
               bool v_finite) {
  if (n == 0) {  // sees no key: O = 0 (the output is sized without a zero pass)
    std::fill_n(dst, dv, 0.0);
    return;
  }
  if (v_finite) {
    for (int64_t c = 0; c < dv; ++c) dst[c] = u[c] / l;
  } else {
    Eigen::Map<Eigen::RowVectorXd> o(dst, dv);
    o = Eigen::Map<const Eigen::RowVectorXd>(e, n) * Eigen::Map<const MatD>(v, n, dv);
    o /= l;
  }
}

}  // namespace

OracleResult naive_attention(const Problem& p, const Inputs& in, std::span<const int64_t> rows) {
  return naive_attention(p, in, RowSet::same(p, rows));
}

OracleResult naive_attention(const Problem& p, const Inputs& in, const RowSet& rows) {
  return naive_attention(p, in, rows, StripSplit::oracle_default());
}

OracleResult naive_attention(const Problem& p, const Inputs& in, const RowSet& rows, const StripSplit& split) {
  const auto call_start = std::chrono::steady_clock::now();
  validate(p);
  validate_side_inputs(p, in);
  if (static_cast<int64_t>(in.q.size()) != p.q_elems() || static_cast<int64_t>(in.k.size()) != p.k_elems() ||
      static_cast<int64_t>(in.v.size()) != p.v_elems())
    throw std::invalid_argument("naive_attention: input sizes do not match the problem");
  if (rows.batch() != p.batch) throw std::invalid_argument("naive_attention: the row set is for another batch size");
  // CBLAS (LP64) takes int dimensions and leading dimensions.
  if (p.seq_kv > INT_MAX || p.head_dim_qk > INT_MAX || p.head_dim_v > INT_MAX)
    throw std::invalid_argument("naive_attention: seq_kv and head dims must fit the 32-bit CBLAS interface");
  const Sequences seqs(p);
  OracleResult r;
  r.rows = rows;
  const int64_t dqk = p.head_dim_qk, dv = p.head_dim_v, hq = p.heads_q;
  // Every row is written by its task (store_row), so no zero pass: the threads that write the rows
  // fault their pages in (big_vector.h).
  r.o = uninit_big_vector<double>(static_cast<size_t>(rows.total() * hq * dv));
  r.lse.assign(static_cast<size_t>(rows.total() * hq), kNegInf);
  if (rows.total() == 0) return r;
  const double scale = p.softmax_scale();
  const int64_t threads = omp_get_max_threads();
  const RowKernels& rk = row_kernels();
  // The widest a row block's keys get: every used key, or for a window bounded on both sides its
  // width plus the block's own rows.
  int64_t skv_max = 0;
  for (int64_t b = 0; b < p.batch; ++b) skv_max = std::max(skv_max, seqs.skv(b));
  skv_max = std::max<int64_t>(skv_max, 1);
  const bool narrow = p.window.left >= 0 && (p.window.right >= 0 || p.causal != Causal::none);
  const int64_t width = narrow ? p.window.left + (p.causal != Causal::none ? 0 : p.window.right) + 1 : skv_max;
  // Tall blocks, but at least two per thread over the whole problem so no thread idles.
  const int64_t all_rows = rows.total() * hq;
  const int64_t row_block = std::min({std::clamp<int64_t>(kScoreBudget / std::min(skv_max, width + kMaxRowBlock), 1, max_row_block()),
                                      std::max<int64_t>(1, (all_rows + 2 * threads - 1) / (2 * threads))});
  // A block's keys run from its first row's first visible key to its last row's last: sampled
  // rows far apart would make that much wider than what they see, so a block also ends where its
  // span would pass this (the scratch holds row_block × span_cap scores).
  const int64_t span_cap = std::min(skv_max, std::max<int64_t>(4 * width + row_block, 1024));
  const int64_t group = p.group();

  // KV heads are processed in chunks: a chunk's K and V are widened to fp64 once (every query head
  // of a group reads them; fp8 values times their descale, exactly) and all its row blocks form one
  // pool of tasks. Pooling several heads keeps every thread busy when one head has fewer blocks than
  // threads, or causal blocks of very different sizes; the widened chunk is capped at the threads'
  // score budget, so memory stays O(threads × row_block × seq_kv) plus a few heads' K/V.
  const int64_t kv_heads = p.batch * p.heads_kv;
  auto kv_doubles = [&](int64_t bk) { return seqs.skv(bk / p.heads_kv) * (dqk + dv); };
  // Widened K/V (tens of MiB at long sequences), first touched by the threads that widen into it:
  // zero-filling it first would be a serial pass and, on a VM, a hypervisor trap per 4 KiB page.
  HugeBuffer<double> kvbuf;
  // K/V are widened in slabs of kSlab keys, on demand: the first task that needs a slab widens it
  // (state 0 → 1 → 2), a task that finds it in progress waits. The widening, bound by memory
  // bandwidth, then overlaps other threads' GEMMs instead of being a phase of its own with a
  // barrier (6-10% of a (1024, 0) window call at Sq = 32768 on 16 threads, session 7).
  constexpr int64_t kSlab = 512;
  std::unique_ptr<std::atomic<uint8_t>[]> slab_state;
  std::unique_ptr<std::atomic<uint8_t>[]> slab_finite;  // the slab's V values are all finite
  std::vector<int64_t> slab_at;  // first slab of each chunk head
  std::vector<int64_t> kv_at;  // offset of each chunk head's widened K (its V follows)
  std::vector<Task> tasks;
  // Per-thread scratch, kept across chunks: O(row_block × span_cap) each.
  struct Scratch {
    std::vector<double> q, u, l;
    std::vector<KeyRange> vis;       // the block's rows' visible keys
    std::vector<StripPiece> pieces;  // its GEMMs (reference/strip_plan.h)
    HugeBuffer<double> s;  // scores, up to 16 MiB: huge pages, no zero pass (big_vector.h)
  };
  std::vector<Scratch> scratch(static_cast<size_t>(threads));
  std::vector<Profile> spent(static_cast<size_t>(threads));
  const bool fp8 = is_fp8(p.dtype);
  std::atomic<bool> plan_broken{false};

  for (int64_t kv0 = 0; kv0 < kv_heads;) {
    // The chunk: at least one KV head, more while they fit the threads' score budget and the
    // pool is short of four tasks per thread, or the chunk holds less than one thread's score
    // budget of widened K/V: thousands of tiny heads (a wide grid: B·H of 5,000 with a few keys
    // each) would otherwise be thousands of chunks, each a parallel region and its barriers
    // (seconds on a loaded machine, where a waiting thread spins against the others).
    int64_t nkv = 0, doubles = 0, pool = 0;
    while (kv0 + nkv < kv_heads) {
      const int64_t more = kv_doubles(kv0 + nkv);
      if (nkv > 0 && (doubles + more > threads * kScoreBudget || (pool >= 4 * threads && doubles >= kScoreBudget))) break;
      doubles += more;
      pool += group * ((rows.count((kv0 + nkv) / p.heads_kv) + row_block - 1) / row_block);
      ++nkv;
    }
    double* const kvw = kvbuf.fit(static_cast<size_t>(std::max<int64_t>(doubles, 1)));
    kv_at.assign(static_cast<size_t>(nkv) + 1, 0);
    for (int64_t c = 0; c < nkv; ++c) kv_at[static_cast<size_t>(c) + 1] = kv_at[static_cast<size_t>(c)] + kv_doubles(kv0 + c);
    auto skv_of = [&](int64_t c) { return seqs.skv((kv0 + c) / p.heads_kv); };
    auto Kw = [&](int64_t c) { return kvw + kv_at[static_cast<size_t>(c)]; };
    auto Vw = [&](int64_t c) { return kvw + kv_at[static_cast<size_t>(c)] + skv_of(c) * dqk; };
    slab_at.assign(static_cast<size_t>(nkv) + 1, 0);
    for (int64_t c = 0; c < nkv; ++c) slab_at[static_cast<size_t>(c) + 1] = slab_at[static_cast<size_t>(c)] + (skv_of(c) + kSlab - 1) / kSlab;
    const auto slabs = static_cast<size_t>(slab_at.back());
    slab_state.reset(new std::atomic<uint8_t>[slabs]);
    slab_finite.reset(new std::atomic<uint8_t>[slabs]);
    for (size_t x = 0; x < slabs; ++x) slab_state[x].store(0, std::memory_order_relaxed), slab_finite[x].store(1, std::memory_order_relaxed);
    // Widens slab x of chunk head c (fp8 values times their descale, exactly).
    auto widen_slab = [&](int64_t c, int64_t x) {
      const int64_t j0 = x * kSlab, nj = std::min(kSlab, skv_of(c) - j0);
      const int64_t b = (kv0 + c) / p.heads_kv, hk = (kv0 + c) % p.heads_kv;
      const float* ks = in.k.data() + seqs.k_row(b, hk, j0);
      const float* vs = in.v.data() + seqs.v_row(b, hk, j0);
      MapD(Kw(c) + j0 * dqk, nj, dqk) = Eigen::Map<const MatF>(ks, nj, dqk).cast<double>();
      MapD(Vw(c) + j0 * dv, nj, dv) = Eigen::Map<const MatF>(vs, nj, dv).cast<double>();
      if (fp8) {  // an fp8 value times an fp32 descale is exact in fp64 (4 + 24 significant bits)
        MapD(Kw(c) + j0 * dqk, nj, dqk) *= descale_of(p, in.descale_k, b, hk);
        MapD(Vw(c) + j0 * dv, nj, dv) *= descale_of(p, in.descale_v, b, hk);
      }
      return MapD(Vw(c) + j0 * dv, nj, dv).allFinite();
    };
    // Keys [j0, j1) of chunk head c widened, by this thread or another; returns whether their
    // values are all finite.
    // First every unclaimed slab is claimed and widened, then the ones others hold are waited for:
    // threads that start on the same keys (the first tasks of a dense causal chunk need them all)
    // widen different slabs instead of queueing behind one.
    auto ensure_keys = [&](int64_t c, int64_t j0, int64_t j1) {
      const size_t base = static_cast<size_t>(slab_at[static_cast<size_t>(c)]);
      const int64_t x0 = j0 / kSlab, x1 = (j1 + kSlab - 1) / kSlab;
      for (int64_t x = x0; x < x1; ++x) {
        std::atomic<uint8_t>& st = slab_state[base + static_cast<size_t>(x)];
        uint8_t todo = 0;
        if (st.load(std::memory_order_relaxed) == 0 && st.compare_exchange_strong(todo, 1, std::memory_order_acquire)) {
          slab_finite[base + static_cast<size_t>(x)].store(widen_slab(c, x) ? 1 : 0, std::memory_order_relaxed);
          st.store(2, std::memory_order_release);
        }
      }
      bool finite = true;
      for (int64_t x = x0; x < x1; ++x) {
        while (slab_state[base + static_cast<size_t>(x)].load(std::memory_order_acquire) != 2) _mm_pause();
        finite &= slab_finite[base + static_cast<size_t>(x)].load(std::memory_order_relaxed) != 0;
      }
      return finite;
    };

    tasks.clear();
    for (int64_t c = 0; c < nkv; ++c) {
      const int64_t b = (kv0 + c) / p.heads_kv, hk = (kv0 + c) % p.heads_kv;
      const int64_t nr = rows.count(b);
      for (int64_t hq_i = hk * group; hq_i < (hk + 1) * group; ++hq_i)
        for (int64_t r0 = 0; r0 < nr;) {
          // Rows ascend and both ends of a row's visible keys never decrease with the row, so the
          // block's keys are [first row's lo, last row's hi).
          Task t{c, b, hq_i, r0, 0, 0, 0};
          const KeyRange first = visible_range(p, b, rows.row(b, r0));
          int64_t hi = first.hi;
          while (t.nb < row_block && r0 + t.nb < nr) {
            const KeyRange kr = visible_range(p, b, rows.row(b, r0 + t.nb));
            if (t.nb > 0 && kr.hi - first.lo > span_cap) break;
            hi = std::max(hi, kr.hi);
            ++t.nb;
          }
          t.c0 = first.lo;
          t.ncols = std::max<int64_t>(hi - first.lo, 0);
          if (t.ncols > 0) tasks.push_back(t);
          else  // a block that sees nothing: O = 0 (here, as no task writes it), LSE = -inf
            std::fill_n(&r.o[static_cast<size_t>(rows.index(b, hq_i, r0, hq) * dv)], t.nb * dv, 0.0);
          r0 += t.nb;
        }
    }
    // Largest first (causal blocks differ up to seq_kv-fold), so the dynamic schedule ends evenly.
    auto largest_first = [&] {
      std::stable_sort(tasks.begin(), tasks.end(), [](const Task& a, const Task& b) { return a.nb * a.ncols > b.nb * b.ncols; });
    };
    largest_first();
    // Even so, the chunk ends when its last task does: the threads that draw the last round of
    // tasks leave the others idle for up to a task's length (~9 ms of 83 at 1×4×4096×128, PERF.md).
    // So tasks larger than the work left after them per thread are halved, again and again (the
    // halves join the tail), down to kMinSplitRows: the last rounds get short, like OpenMP's guided
    // schedule but decided before the run, so the grouping of rows never depends on timing. The
    // results do not depend on how rows are grouped into tasks.
    auto cols_of = [&](Task& t) {
      const KeyRange a = visible_range(p, t.b, rows.row(t.b, t.r0));
      int64_t hi = a.hi;
      for (int64_t i = 1; i < t.nb; ++i) hi = std::max(hi, visible_range(p, t.b, rows.row(t.b, t.r0 + i)).hi);
      t.c0 = a.lo;
      t.ncols = std::max<int64_t>(hi - a.lo, 0);
    };
    for (bool split = true; split;) {
      split = false;
      int64_t after = 0;  // work of the tasks after tasks[i] (smallest last)
      for (size_t i = tasks.size(); i-- > 0;) {
        Task& t = tasks[i];
        const int64_t work = t.nb * t.ncols;
        if (t.nb >= 2 * kMinSplitRows && work * threads > after + work) {
          Task tail = t;
          t.nb /= 2;
          cols_of(t);
          tail.r0 += t.nb;
          tail.nb -= t.nb;
          cols_of(tail);
          if (tail.ncols > 0) tasks.push_back(tail);
          else  // rows that see nothing: O = 0, as for such blocks above
            std::fill_n(&r.o[static_cast<size_t>(rows.index(tail.b, tail.h, tail.r0, hq) * dv)], tail.nb * dv, 0.0);
          split = true;
        }
        after += work;
      }
      largest_first();
    }

#pragma omp parallel num_threads(static_cast<int>(threads))
    {
      const size_t me = static_cast<size_t>(omp_get_thread_num());
      Scratch& sc = scratch[me];
      Profile& mine = spent[me];
      Lap lap;
      sc.q.resize(static_cast<size_t>(row_block * dqk));
      sc.u.resize(static_cast<size_t>(row_block * dv));
      sc.l.resize(static_cast<size_t>(row_block));
      double* const s = sc.s.fit(static_cast<size_t>(row_block * std::max(span_cap, int64_t{1})));
      lap(mine.setup);
#pragma omp for schedule(dynamic, 1) nowait
      for (size_t ti = 0; ti < tasks.size(); ++ti) {
        const Task& t = tasks[ti];
        // 0 · Inf and 0 · NaN are NaN: with non-finite values among the strip's V, a masked key
        // must not reach a row through the block GEMM, so such strips take store_row's row path.
        const bool vf = ensure_keys(t.kv, t.c0, t.c0 + t.ncols);
        lap(mine.kv);
        const int64_t hk = (kv0 + t.kv) % p.heads_kv;
        const double q_descale = fp8 ? descale_of(p, in.descale_q, t.b, hk) : 1.0;
        for (int64_t i = 0; i < t.nb; ++i) {
          MapD(sc.q.data() + i * dqk, 1, dqk) =
              Eigen::Map<const MatF>(in.q.data() + seqs.q_row(t.b, t.h, rows.row(t.b, t.r0 + i)), 1, dqk).cast<double>();
          if (fp8) MapD(sc.q.data() + i * dqk, 1, dqk) *= q_descale;
        }
        sc.vis.resize(static_cast<size_t>(t.nb));
        for (int64_t i = 0; i < t.nb; ++i) sc.vis[static_cast<size_t>(i)] = visible_range(p, t.b, rows.row(t.b, t.r0 + i));
        // The strip's middle as one GEMM over every row, its masked corners in smaller pieces.
        plan_strip(sc.vis, split, sc.pieces);
        // The scratch holds the strip only. A piece past it would be the planner's bug, reported
        // after the parallel region (an exception must not leave it).
        if (std::any_of(sc.pieces.begin(), sc.pieces.end(),
                        [&](const StripPiece& x) { return x.k0 < t.c0 || x.k0 + x.nk > t.c0 + t.ncols; })) {
          plan_broken.store(true, std::memory_order_relaxed);
          continue;
        }
        lap(mine.widen);  // Q widened and the strip planned
        // Inside this parallel region OpenBLAS's OpenMP build runs single-threaded. Scores outside
        // every piece are masked: step 2 never reads them (it zeroes them).
        for (const StripPiece& x : sc.pieces)
          dots(x.nr, x.nk, dqk, sc.q.data() + x.r0 * dqk, Kw(t.kv) + x.k0 * dqk, s + x.r0 * t.ncols + (x.k0 - t.c0), t.ncols);
        lap(mine.scores);
        RowMods mods;
        mods.scale = scale;
        mods.cap.cap = p.softcap;
        mods.bias = alibi_for<double>(p, in.alibi_slopes.data(), t.b, t.h);
        if (p.sinks) mods.sink = in.sinks[static_cast<size_t>(t.h)];
        // Row by row, so each row's passes run in cache.
        for (int64_t i = 0; i < t.nb; ++i) {
          const int64_t row = rows.row(t.b, t.r0 + i);
          sc.l[static_cast<size_t>(i)] =
              softmax_row(rk, s + i * t.ncols, row, sc.vis[static_cast<size_t>(i)], t.c0, t.ncols, mods,
                          &r.lse[static_cast<size_t>(rows.index(t.b, t.h, t.r0 + i, hq))]);
        }
        lap(mine.softmax);
        // U over the same pieces. Split, a row's sum is its pieces' sums added in plan order (the
        // middle first): the same terms as one GEMM over the strip, in another order, and the
        // plan depends on the block's rows alone. A single piece is the strip's GEMM as before.
        if (vf) {
          if (sc.pieces.size() > 1) std::fill_n(sc.u.data(), t.nb * dv, 0.0);
          for (const StripPiece& x : sc.pieces)
            weighted_sum(x.nr, x.nk, dv, s + x.r0 * t.ncols + (x.k0 - t.c0), t.ncols, Vw(t.kv) + x.k0 * dv,
                         sc.u.data() + x.r0 * dv, sc.pieces.size() > 1 ? 1.0 : 0.0);
        }
        lap(mine.pv);
        for (int64_t i = 0; i < t.nb; ++i) {
          const KeyRange vis = sc.vis[static_cast<size_t>(i)];
          store_row(&r.o[static_cast<size_t>(rows.index(t.b, t.h, t.r0 + i, hq) * dv)], sc.u.data() + i * dv,
                    s + i * t.ncols + (vis.lo - t.c0), Vw(t.kv) + vis.lo * dv, vis.count(), dv, sc.l[static_cast<size_t>(i)], vf);
        }
        lap(mine.store);
      }
#pragma omp barrier
      lap(mine.idle);  // this thread's wait for the last task of the chunk
    }
    kv0 += nkv;
  }
  if (plan_broken.load()) throw std::logic_error("naive_attention: a strip piece reaches past its block's keys (reference/strip_plan.cpp)");
  if (profiling()) {
    Profile all;
    for (const Profile& x : spent) all += x;
    const double n = static_cast<double>(threads);
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - call_start).count();
    std::fprintf(stderr,
                 "oracle profile: %lld-row blocks, %d threads, wall %.4f s; per thread: setup %.4f K/V widen (or wait) %.4f Q widen %.4f "
                 "scores %.4f softmax %.4f pv %.4f store %.4f idle %.4f\n",
                 static_cast<long long>(row_block), static_cast<int>(threads), wall, all.setup / n, all.kv / n, all.widen / n,
                 all.scores / n, all.softmax / n, all.pv / n, all.store / n, all.idle / n);
  }
  return r;
}

}  // namespace flashcheck
