#include "reference/naive.h"

#include "reference/big_vector.h"

#include <cblas.h>
#include <immintrin.h>
#include <omp.h>

#include <Eigen/Dense>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "reference/mask.h"

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

// glibc's vector exp (libmvec, x86-64 vector function ABI; glibc documents 1 ulp for these): the
// softmax's exp over Sq·Skv scores would otherwise cost as much as both GEMMs. The variant is picked
// at run time like OpenBLAS's kernels, so a generic build uses AVX-512 where the CPU has it.
extern "C" {
__m128d _ZGVbN2v_exp(__m128d);
__attribute__((target("avx2"))) __m256d _ZGVdN4v_exp(__m256d);
__attribute__((target("avx512f"))) __m512d _ZGVeN8v_exp(__m512d);
}

// The row steps of the softmax, one set per vector width. NaN scores never win the max
// (max(x, m) returns m when x is NaN) and are reported separately.
struct RowMax {
  double m;
  bool nan;
};

RowMax row_max_sse2(const double* s, int64_t n) {
  __m128d vm = _mm_set1_pd(kNegInf), bad = _mm_setzero_pd();
  int64_t j = 0;
  for (; j + 2 <= n; j += 2) {
    const __m128d x = _mm_loadu_pd(s + j);
    bad = _mm_or_pd(bad, _mm_cmpunord_pd(x, x));
    vm = _mm_max_pd(x, vm);
  }
  double lanes[2];
  _mm_storeu_pd(lanes, vm);
  RowMax r{std::max(lanes[0], lanes[1]), _mm_movemask_pd(bad) != 0};
  for (; j < n; ++j) {
    r.nan |= std::isnan(s[j]);
    r.m = std::max(r.m, s[j]);
  }
  return r;
}

// s[j] = exp(s[j] - m) for j < n, returning their sum.
double exp_sum_sse2(double* s, int64_t n, double m) {
  const __m128d vm = _mm_set1_pd(m);
  __m128d acc = _mm_setzero_pd();
  int64_t j = 0;
  for (; j + 2 <= n; j += 2) {
    const __m128d e = _ZGVbN2v_exp(_mm_sub_pd(_mm_loadu_pd(s + j), vm));
    _mm_storeu_pd(s + j, e);
    acc = _mm_add_pd(acc, e);
  }
  double lanes[2];
  _mm_storeu_pd(lanes, acc);
  double l = lanes[0] + lanes[1];
  for (; j < n; ++j) l += (s[j] = std::exp(s[j] - m));
  return l;
}

__attribute__((target("avx2"))) RowMax row_max_avx2(const double* s, int64_t n) {
  __m256d vm = _mm256_set1_pd(kNegInf), bad = _mm256_setzero_pd();
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    const __m256d x = _mm256_loadu_pd(s + j);
    bad = _mm256_or_pd(bad, _mm256_cmp_pd(x, x, _CMP_UNORD_Q));
    vm = _mm256_max_pd(x, vm);
  }
  double lanes[4];
  _mm256_storeu_pd(lanes, vm);
  RowMax r{std::max(std::max(lanes[0], lanes[1]), std::max(lanes[2], lanes[3])), _mm256_movemask_pd(bad) != 0};
  for (; j < n; ++j) {
    r.nan |= std::isnan(s[j]);
    r.m = std::max(r.m, s[j]);
  }
  return r;
}

__attribute__((target("avx2"))) double exp_sum_avx2(double* s, int64_t n, double m) {
  const __m256d vm = _mm256_set1_pd(m);
  __m256d acc = _mm256_setzero_pd();
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    const __m256d e = _ZGVdN4v_exp(_mm256_sub_pd(_mm256_loadu_pd(s + j), vm));
    _mm256_storeu_pd(s + j, e);
    acc = _mm256_add_pd(acc, e);
  }
  double lanes[4];
  _mm256_storeu_pd(lanes, acc);
  double l = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  for (; j < n; ++j) l += (s[j] = std::exp(s[j] - m));
  return l;
}

__attribute__((target("avx512f"))) RowMax row_max_avx512(const double* s, int64_t n) {
  __m512d vm = _mm512_set1_pd(kNegInf);
  __mmask8 bad = 0;
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m512d x = _mm512_loadu_pd(s + j);
    bad |= _mm512_cmp_pd_mask(x, x, _CMP_UNORD_Q);
    vm = _mm512_mask_max_pd(vm, 0xff, x, vm);  // = max(x, vm); GCC 12's unmasked form warns
  }
  // (GCC 12's _mm512_reduce_* helpers warn about an uninitialised temporary: reduce by hand.)
  double lanes[8];
  _mm512_storeu_pd(lanes, vm);
  RowMax r{*std::max_element(lanes, lanes + 8), bad != 0};
  for (; j < n; ++j) {
    r.nan |= std::isnan(s[j]);
    r.m = std::max(r.m, s[j]);
  }
  return r;
}

__attribute__((target("avx512f"))) double exp_sum_avx512(double* s, int64_t n, double m) {
  const __m512d vm = _mm512_set1_pd(m);
  __m512d acc = _mm512_setzero_pd();
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m512d e = _ZGVeN8v_exp(_mm512_sub_pd(_mm512_loadu_pd(s + j), vm));
    _mm512_storeu_pd(s + j, e);
    acc = _mm512_add_pd(acc, e);
  }
  double lanes[8];
  _mm512_storeu_pd(lanes, acc);
  double l = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
  for (; j < n; ++j) l += (s[j] = std::exp(s[j] - m));
  return l;
}

struct RowKernels {
  const char* name;
  RowMax (*row_max)(const double*, int64_t);
  double (*exp_sum)(double*, int64_t, double);
};

// The widest the CPU runs; FLASHCHECK_ORACLE_ISA=sse2|avx2 caps it, so every variant can be tested
// on one machine.
const RowKernels& row_kernels() {
  static const RowKernels k = [] {
    const RowKernels sse2{"sse2", row_max_sse2, exp_sum_sse2};
    const RowKernels avx2{"avx2", row_max_avx2, exp_sum_avx2};
    const RowKernels avx512{"avx512", row_max_avx512, exp_sum_avx512};
    const char* cap = std::getenv("FLASHCHECK_ORACLE_ISA");
    const bool allow_avx2 = !cap || std::strcmp(cap, "sse2") != 0;
    const bool allow_avx512 = allow_avx2 && (!cap || std::strcmp(cap, "avx2") != 0);
    __builtin_cpu_init();
    if (allow_avx512 && __builtin_cpu_supports("avx512f")) return avx512;
    if (allow_avx2 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return avx2;
    return sse2;
  }();
  return k;
}

// An integer environment setting in [lo, hi], else `fallback`: tuning knobs for another machine.
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
  double setup = 0, widen = 0, scores = 0, softmax = 0, pv = 0, store = 0, idle = 0;
  Profile& operator+=(const Profile& o) {
    setup += o.setup, widen += o.widen, scores += o.scores, softmax += o.softmax, pv += o.pv, store += o.store, idle += o.idle;
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
  int64_t bh;    // b * heads_q + hq
  int64_t r0;    // first row (index into OracleResult rows)
  int64_t nb;    // rows in the block
  int64_t ncols; // keys any row of the block sees: later keys are never touched
};

// Step 1: scores S = (Q Kᵀ) · scale, one fp64 GEMM (nb × ncols, row-major). BLAS applies alpha to
// each finished dot product (C = alpha·(A·B)), so every score is the rounded dot product times
// scale, rounded, however the call is split over threads.
void scores(int64_t nb, int64_t ncols, int64_t dqk, double scale, const double* q, const double* k, double* s) {
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(nb), static_cast<int>(ncols), static_cast<int>(dqk),
              scale, q, static_cast<int>(dqk), k, static_cast<int>(dqk), 0.0, s, static_cast<int>(ncols));
}

// Step 2, one row of S with n of its ncols keys visible: row max, exp, sum. Leaves E = exp(s - max)
// in s (masked keys exactly 0), writes the row's LSE and returns the sum ℓ. The division by ℓ is
// left to the Dv outputs (step 4) instead of the Skv exponentials: the same quotient up to one
// rounding, and Skv/Dv times fewer divides.
double softmax_row(const RowKernels& rk, double* s, int64_t n, int64_t ncols, double* lse) {
  if (n == 0) {  // sees no key: O = 0, LSE = -inf (set by the caller)
    std::fill_n(s, ncols, 0.0);
    return 0.0;
  }
  const RowMax mx = rk.row_max(s, n);
  const double m = mx.m;
  if (mx.nan || m == kNegInf || m == std::numeric_limits<double>::infinity()) {
    // NaN scores, all scores -inf (0/0) or a +inf score (inf - inf): the softmax itself is
    // undefined, so the row is NaN rather than anything a kernel could match by accident.
    std::fill_n(s, ncols, std::numeric_limits<double>::quiet_NaN());
    *lse = std::numeric_limits<double>::quiet_NaN();
    return std::numeric_limits<double>::quiet_NaN();
  }
  const double l = rk.exp_sum(s, n, m);
  std::fill(s + n, s + ncols, 0.0);
  *lse = m + std::log(l);
  return l;
}

// Step 3: U = E V, the second fp64 GEMM (unnormalised outputs, nb × dv).
void weighted_sum(int64_t nb, int64_t ncols, int64_t dv, const double* e, const double* v, double* u) {
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(nb), static_cast<int>(dv), static_cast<int>(ncols),
              1.0, e, static_cast<int>(ncols), v, static_cast<int>(dv), 0.0, u, static_cast<int>(dv));
}

// Step 4, one row: O = U / ℓ. With non-finite values in V (v_finite false) U is not taken from the
// block GEMM: 0 · Inf and 0 · NaN are NaN, so a masked key (E = 0) must not reach the row, and the
// row is recomputed over its n visible keys only.
void store_row(double* dst, const double* u, const double* e, const double* v, int64_t n, int64_t dv, double l,
               bool v_finite) {
  if (n == 0) return;  // O stays 0
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
  const auto call_start = std::chrono::steady_clock::now();
  validate(p);
  if (static_cast<int64_t>(in.q.size()) != p.q_elems() || static_cast<int64_t>(in.k.size()) != p.k_elems() ||
      static_cast<int64_t>(in.v.size()) != p.v_elems())
    throw std::invalid_argument("naive_attention: input sizes do not match the problem");
  // CBLAS (LP64) takes int dimensions and leading dimensions.
  if (p.seq_kv > INT_MAX || p.head_dim_qk > INT_MAX || p.head_dim_v > INT_MAX)
    throw std::invalid_argument("naive_attention: seq_kv and head dims must fit the 32-bit CBLAS interface");
  OracleResult r;
  r.rows.assign(rows.begin(), rows.end());
  for (size_t i = 0; i < r.rows.size(); ++i) {
    if (r.rows[i] < 0 || r.rows[i] >= p.seq_q) throw std::out_of_range("naive_attention: row out of range");
    if (i && r.rows[i] <= r.rows[i - 1]) throw std::invalid_argument("naive_attention: rows must be ascending");
  }
  r.num_rows = r.rows.empty() ? p.seq_q : static_cast<int64_t>(r.rows.size());
  const int64_t nr = r.num_rows, dqk = p.head_dim_qk, dv = p.head_dim_v, skv = p.seq_kv;
  r.o = big_vector<double>(static_cast<size_t>(p.batch * p.heads_q * nr * dv));
  r.lse.assign(static_cast<size_t>(p.batch * p.heads_q * nr), kNegInf);
  if (nr == 0) return r;
  const double scale = p.softmax_scale();
  const int64_t threads = omp_get_max_threads();
  const RowKernels& rk = row_kernels();
  // Tall blocks, but at least two per thread over the whole problem so no thread idles.
  const int64_t all_rows = p.batch * p.heads_q * nr;
  const int64_t row_block = std::min({nr, std::clamp<int64_t>(kScoreBudget / skv, 1, max_row_block()),
                                      std::max<int64_t>(1, (all_rows + 2 * threads - 1) / (2 * threads))});
  const int64_t nblocks = (nr + row_block - 1) / row_block;
  const int64_t group = p.group();

  // KV heads are processed in chunks: a chunk's K and V are widened to fp64 once (every query head
  // of a group reads them) and all its row blocks form one pool of tasks. Pooling several heads
  // keeps every thread busy when one head has fewer blocks than threads, or causal blocks of very
  // different sizes; the widened chunk is capped at the threads' score budget, so memory stays
  // O(threads × row_block × seq_kv) plus one head's K/V.
  const int64_t kv_heads = p.batch * p.heads_kv;
  const int64_t kv_doubles = skv * (dqk + dv);
  const int64_t tasks_per_kv = group * nblocks;
  const int64_t chunk = std::clamp<int64_t>((4 * threads + tasks_per_kv - 1) / tasks_per_kv, 1,
                                            std::max<int64_t>(1, threads * kScoreBudget / kv_doubles));
  // Widened K/V (tens of MiB at long sequences), first touched by the threads that widen into it:
  // zero-filling it first would be a serial pass and, on a VM, a hypervisor trap per 4 KiB page.
  HugeBuffer<double> kvbuf;
  std::vector<char> v_finite;
  std::vector<Task> tasks;
  // Per-thread scratch, kept across chunks: O(row_block × seq_kv) each.
  struct Scratch {
    std::vector<double> q, u, l;
    HugeBuffer<double> s;  // scores, up to 16 MiB: huge pages, no zero pass (big_vector.h)
  };
  std::vector<Scratch> scratch(static_cast<size_t>(threads));
  std::vector<Profile> spent(static_cast<size_t>(threads));
  Profile serial;

  for (int64_t kv0 = 0; kv0 < kv_heads; kv0 += chunk) {
    const int64_t nkv = std::min(chunk, kv_heads - kv0);
    Lap widen_lap;
    double* const kvw = kvbuf.fit(static_cast<size_t>(nkv * kv_doubles));
    v_finite.assign(static_cast<size_t>(nkv), 1);
    auto Kw = [&](int64_t c) { return kvw + c * kv_doubles; };
    auto Vw = [&](int64_t c) { return kvw + c * kv_doubles + skv * dqk; };

    tasks.clear();
    for (int64_t c = 0; c < nkv; ++c) {
      const int64_t b = (kv0 + c) / p.heads_kv, hk = (kv0 + c) % p.heads_kv;
      for (int64_t hq = hk * group; hq < (hk + 1) * group; ++hq)
        for (int64_t r0 = 0; r0 < nr; r0 += row_block) {
          Task t{c, b * p.heads_q + hq, r0, std::min(row_block, nr - r0), 0};
          // Rows ascend and visible_keys is monotone in the row: the block's last row sees most.
          t.ncols = visible_keys(p, r.row_at(r0 + t.nb - 1));
          if (t.ncols > 0) tasks.push_back(t);  // a block that sees nothing keeps O = 0, LSE = -inf
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
    for (bool split = true; split;) {
      split = false;
      int64_t after = 0;  // work of the tasks after tasks[i] (smallest last)
      for (size_t i = tasks.size(); i-- > 0;) {
        Task& t = tasks[i];
        const int64_t work = t.nb * t.ncols;
        if (t.nb >= 2 * kMinSplitRows && work * threads > after + work) {
          Task tail = t;
          t.nb /= 2;
          t.ncols = visible_keys(p, r.row_at(t.r0 + t.nb - 1));
          tail.r0 += t.nb;
          tail.nb -= t.nb;
          tasks.push_back(tail);
          split = true;
        }
        after += work;
      }
      largest_first();
    }

#pragma omp parallel num_threads(static_cast<int>(threads))
    {
      // Widen this chunk's KV heads once, in slabs of rows spread over the threads.
      constexpr int64_t kSlab = 512;
      const int64_t slabs = (skv + kSlab - 1) / kSlab;
#pragma omp for schedule(static)
      for (int64_t x = 0; x < nkv * slabs; ++x) {
        const int64_t c = x / slabs, j0 = (x % slabs) * kSlab, nj = std::min(kSlab, skv - j0);
        const size_t off = static_cast<size_t>((kv0 + c) * skv + j0);
        MapD(Kw(c) + j0 * dqk, nj, dqk) = Eigen::Map<const MatF>(in.k.data() + off * dqk, nj, dqk).cast<double>();
        MapD(Vw(c) + j0 * dv, nj, dv) = Eigen::Map<const MatF>(in.v.data() + off * dv, nj, dv).cast<double>();
        // 0 · Inf and 0 · NaN are NaN: with non-finite values, a masked key must not reach a row
        // through the block GEMM, so such heads take the row-by-row path of store_row.
        if (!MapD(Vw(c) + j0 * dv, nj, dv).allFinite()) {
#pragma omp atomic write
          v_finite[static_cast<size_t>(c)] = 0;
        }
      }  // implicit barrier: K/V complete before any task reads them
#pragma omp master
      widen_lap(serial.widen);

      const size_t me = static_cast<size_t>(omp_get_thread_num());
      Scratch& sc = scratch[me];
      Profile& mine = spent[me];
      Lap lap;
      sc.q.resize(static_cast<size_t>(row_block * dqk));
      sc.u.resize(static_cast<size_t>(row_block * dv));
      sc.l.resize(static_cast<size_t>(row_block));
      double* const s = sc.s.fit(static_cast<size_t>(row_block * skv));
      lap(mine.setup);
#pragma omp for schedule(dynamic, 1) nowait
      for (size_t ti = 0; ti < tasks.size(); ++ti) {
        const Task& t = tasks[ti];
        const bool vf = v_finite[static_cast<size_t>(t.kv)];
        const float* qh = in.q.data() + static_cast<size_t>(t.bh) * static_cast<size_t>(p.seq_q * dqk);
        for (int64_t i = 0; i < t.nb; ++i)
          MapD(sc.q.data() + i * dqk, 1, dqk) = Eigen::Map<const MatF>(qh + r.row_at(t.r0 + i) * dqk, 1, dqk).cast<double>();
        lap(mine.widen);
        // Inside this parallel region OpenBLAS's OpenMP build runs single-threaded.
        scores(t.nb, t.ncols, dqk, scale, sc.q.data(), Kw(t.kv), s);
        lap(mine.scores);
        // Row by row, so each row's passes run in cache.
        for (int64_t i = 0; i < t.nb; ++i)
          sc.l[static_cast<size_t>(i)] = softmax_row(rk, s + i * t.ncols, visible_keys(p, r.row_at(t.r0 + i)), t.ncols,
                                                     &r.lse[static_cast<size_t>(t.bh * nr + t.r0 + i)]);
        lap(mine.softmax);
        if (vf) weighted_sum(t.nb, t.ncols, dv, s, Vw(t.kv), sc.u.data());
        lap(mine.pv);
        for (int64_t i = 0; i < t.nb; ++i)
          store_row(&r.o[static_cast<size_t>((t.bh * nr + t.r0 + i) * dv)], sc.u.data() + i * dv, s + i * t.ncols, Vw(t.kv),
                    visible_keys(p, r.row_at(t.r0 + i)), dv, sc.l[static_cast<size_t>(i)], vf);
        lap(mine.store);
      }
#pragma omp barrier
      lap(mine.idle);  // this thread's wait for the last task of the chunk
    }
  }
  if (profiling()) {
    Profile all;
    for (const Profile& x : spent) all += x;
    const double n = static_cast<double>(threads);
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - call_start).count();
    std::fprintf(stderr,
                 "oracle profile: %lld-row blocks, %d threads, wall %.4f s; per thread: K/V widen %.4f setup %.4f Q widen %.4f "
                 "scores %.4f softmax %.4f pv %.4f store %.4f idle %.4f\n",
                 static_cast<long long>(row_block), static_cast<int>(threads), wall, serial.widen, all.setup / n, all.widen / n,
                 all.scores / n, all.softmax / n, all.pv / n, all.store / n, all.idle / n);
  }
  return r;
}

}  // namespace flashcheck
