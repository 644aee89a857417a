#include "verify/baseline.h"

#include <cblas.h>

#include <algorithm>
#include <bit>
#include <climits>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "reference/mask.h"
#include "reference/score_mod.h"
#include "reference/sequences.h"

// glibc's libmvec has vector variants of expf under the x86-64 vector function ABI; declaring
// them lets `omp simd` loops call the one that matches each clone's vector width.
#pragma omp declare simd notinbranch
extern "C" float expf(float);

namespace flashcheck {

namespace {
// Scratch for S is capped at this many floats per thread (16 MiB): row blocks shrink as seq_kv grows.
constexpr int64_t kScoreBudget = int64_t{4} << 20;
constexpr int64_t kMaxRowBlock = 256;

// round_to(D, x) (reference/dtype.cpp), inlined and branch-free so the per-score loops vectorise
// instead of calling out through a switch for each of Sq·Skv scores. Bit-identical to round_to for
// every fp32 input, NaN payloads included (checked over all 2^32 patterns when written).
template <DType D>
inline float rnd(float x) {
  if constexpr (D == DType::f32) {
    return x;
  } else if constexpr (D == DType::bf16) {
    const uint32_t u = std::bit_cast<uint32_t>(x);
    // Round to nearest even on the 16 dropped bits; a carry past the largest finite gives Inf.
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    const uint32_t quiet_nan = (u | 0x00400000u) & 0xffff0000u;  // truncation must not make Inf
    return std::bit_cast<float>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
  } else {
    const uint32_t u = std::bit_cast<uint32_t>(x), a = u & 0x7fffffffu, sign = u & 0x80000000u;
    // Normal f16: keep 10 of 23 mantissa bits, round the 13 dropped ones to nearest even.
    const uint32_t normal = (u + 0xfffu + ((u >> 13) & 1u)) & 0xffffe000u;
    // Subnormal f16 (|x| < 2^-14): multiples of 2^-24. In [0.5, 1) fp32 spacing is 2^-24, so adding
    // and removing 0.75 rounds |x| to nearest even there; the sign is put back (a zero keeps it).
    const uint32_t sub = std::bit_cast<uint32_t>((std::bit_cast<float>(a) + 0.75f) - 0.75f) | sign;
    // From 65520, the midpoint between 65504 (max f16) and 2^16, ties go to the even 2^16: Inf.
    const uint32_t inf = sign | 0x7f800000u;
    const uint32_t quiet_nan = (u & 0x807fe000u) | 0x7fc00000u;  // f16 keeps 10 payload bits
    const uint32_t r = a > 0x7f800000u ? quiet_nan : a >= 0x477ff000u ? inf : a < 0x38800000u ? sub : normal;
    return std::bit_cast<float>(r);
  }
}

// What one row of the baseline adds to its scores, in fp32 as an eager framework would: the fp8
// descales, softcap, ALiBi bias and the sink (reference/score_mod.h).
struct RowMods {
  float score_mul = 1;  // fp8: q_descale · k_descale, applied to the fp32 dot product before the scale
  bool fp8 = false;
  Softcap<float> cap;
  AlibiBias<float> bias;
  float sink = -std::numeric_limits<float>::infinity();
  int64_t row = 0, key0 = 0;  // the row, and the sequence's key at s[0] (for the bias)
};

// One row of n visible scores in place: S rounded to the dtype, times scale rounded (fp8: the
// fp32 dot product times its descales, times scale rounded to the output dtype); then the
// variants in fp32; softmax in fp32 (max, exp, sum, divide) with the sink in max and sum; P
// rounded to the dtype.
template <DType D>
[[gnu::always_inline]] inline void softmax_row_impl(float* s, int64_t n, float scale, const RowMods& mods) {
  if (mods.fp8) {
    const float mul = mods.score_mul;
    for (int64_t j = 0; j < n; ++j) s[j] = rnd<D>((s[j] * mul) * scale);
  } else {
    for (int64_t j = 0; j < n; ++j) s[j] = rnd<D>(rnd<D>(s[j]) * scale);
  }
  if (mods.cap.active())
    for (int64_t j = 0; j < n; ++j) s[j] = mods.cap(s[j]);
  if (mods.bias.active())
    for (int64_t j = 0; j < n; ++j) s[j] += mods.bias(mods.row, mods.key0 + j);
  float m = -std::numeric_limits<float>::infinity();
  // Max is order-free; the lanes keep std::max's rule that a NaN score never wins.
#pragma omp simd reduction(max : m)
  for (int64_t j = 0; j < n; ++j) m = m < s[j] ? s[j] : m;
  const bool sink = mods.sink > -std::numeric_limits<float>::infinity();
  if (sink && !(m >= mods.sink)) m = std::isnan(m) ? m : mods.sink;  // the sink joins the max (NaN stays)
  float l = 0;  // summed in vector lanes, as eager frameworks' vectorised softmax does
#pragma omp simd reduction(+ : l)
  for (int64_t j = 0; j < n; ++j) l += (s[j] = expf(s[j] - m));
  if (sink) l += expf(mods.sink - m);  // in the denominator, with no value
  for (int64_t j = 0; j < n; ++j) s[j] = rnd<D>(s[j] / l);
}

// Compiled for SSE2, AVX2 and AVX-512, picked at load time by the CPU (GCC's target_clones), so a
// generic build runs these loops and glibc's vector expf at the widest width the machine has.
#define FC_ROW_CLONES __attribute__((target_clones("default", "avx2", "avx512f")))
FC_ROW_CLONES void softmax_row_f32(float* s, int64_t n, float scale, const RowMods& m) { softmax_row_impl<DType::f32>(s, n, scale, m); }
FC_ROW_CLONES void softmax_row_f16(float* s, int64_t n, float scale, const RowMods& m) { softmax_row_impl<DType::f16>(s, n, scale, m); }
FC_ROW_CLONES void softmax_row_bf16(float* s, int64_t n, float scale, const RowMods& m) { softmax_row_impl<DType::bf16>(s, n, scale, m); }
#undef FC_ROW_CLONES

void softmax_row(DType d, float* s, int64_t n, float scale, const RowMods& m) {
  switch (d) {
    case DType::f16: return softmax_row_f16(s, n, scale, m);
    case DType::bf16: return softmax_row_bf16(s, n, scale, m);
    default: return softmax_row_f32(s, n, scale, m);
  }
}

struct Task {
  int64_t b, h, r0, nb, c0, ncols;
};

// D: the dtype scores, P and O are rounded to (for fp8 inputs, the output dtype).
template <DType D>
void baseline_impl(const Problem& p, const Inputs& in, const RowSet& rows, std::vector<float>& out) {
  const Sequences seqs(p);
  const int64_t dqk = p.head_dim_qk, dv = p.head_dim_v, hq = p.heads_q;
  const float scale = static_cast<float>(p.softmax_scale());
  const bool fp8 = is_fp8(p.dtype);
  int64_t skv_max = 1;
  for (int64_t b = 0; b < p.batch; ++b) skv_max = std::max(skv_max, seqs.skv(b));
  const int64_t row_block = std::clamp<int64_t>(kScoreBudget / skv_max, 1, kMaxRowBlock);

  // 0 · Inf and 0 · NaN are NaN: a head whose V holds either must not let masked keys (P = 0)
  // reach a row through the block GEMM; its rows take the per-row product over visible keys.
  const int64_t kv_heads = p.batch * p.heads_kv;
  std::vector<char> v_finite(static_cast<size_t>(kv_heads));
#pragma omp parallel for schedule(static)
  for (int64_t kv = 0; kv < kv_heads; ++kv) {
    const int64_t b = kv / p.heads_kv, hk = kv % p.heads_kv;
    const float* v = in.v.data() + seqs.v_row(b, hk, 0);
    v_finite[static_cast<size_t>(kv)] = std::all_of(v, v + seqs.skv(b) * dv, [](float x) { return std::isfinite(x); });
  }

  // Row blocks of one (sequence, head); a block computes the keys [c0, c0 + ncols) its rows see
  // (both ends of a row's visible keys never decrease with the row).
  std::vector<Task> tasks;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t r0 = 0; r0 < rows.count(b); r0 += row_block) {
        Task t{b, h, r0, std::min(row_block, rows.count(b) - r0), 0, 0};
        const KeyRange first = visible_range(p, b, rows.row(b, r0)), last = visible_range(p, b, rows.row(b, r0 + t.nb - 1));
        t.c0 = first.lo;
        t.ncols = std::max<int64_t>(last.hi - first.lo, 0);
        if (t.ncols > 0) tasks.push_back(t);
      }
  // Largest first (causal blocks differ up to seq_kv-fold), so the dynamic schedule ends evenly.
  std::stable_sort(tasks.begin(), tasks.end(), [](const Task& a, const Task& b) { return a.nb * a.ncols > b.nb * b.ncols; });

#pragma omp parallel
  {
    // Per-thread scratch, reused by every task: O(row_block × seq_kv).
    std::vector<float> qbuf(static_cast<size_t>(row_block * dqk)), sbuf(static_cast<size_t>(row_block * skv_max)),
        obuf(static_cast<size_t>(row_block * dv));
#pragma omp for schedule(dynamic, 1)
    for (size_t ti = 0; ti < tasks.size(); ++ti) {
      const Task& t = tasks[ti];
      const int64_t nb = t.nb, ncols = t.ncols, b = t.b, h = t.h, hk = p.kv_head(h);
      const float* K = in.k.data() + seqs.k_row(b, hk, t.c0);
      const float* V = in.v.data() + seqs.v_row(b, hk, t.c0);
      for (int64_t i = 0; i < nb; ++i)
        std::copy_n(in.q.data() + seqs.q_row(b, h, rows.row(b, t.r0 + i)), dqk, qbuf.data() + i * dqk);
      // S = Q Kᵀ with fp32 accumulation (sgemm; alpha 1 because the product is rounded to the
      // dtype before the scale is applied). Inside this parallel region OpenBLAS's OpenMP build
      // runs single-threaded.
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(nb), static_cast<int>(ncols),
                  static_cast<int>(dqk), 1.0f, qbuf.data(), static_cast<int>(dqk), K, static_cast<int>(dqk), 0.0f,
                  sbuf.data(), static_cast<int>(ncols));
      RowMods mods;
      mods.fp8 = fp8;
      if (fp8)
        mods.score_mul = static_cast<float>(descale_of(p, in.descale_q, b, hk)) * static_cast<float>(descale_of(p, in.descale_k, b, hk));
      mods.cap.cap = static_cast<float>(p.softcap);
      mods.bias = alibi_for<float>(p, in.alibi_slopes.data(), b, h);
      if (p.sinks) mods.sink = in.sinks[static_cast<size_t>(h)];
      for (int64_t i = 0; i < nb; ++i) {
        float* s = sbuf.data() + i * ncols;
        const KeyRange vis = visible_range(p, b, rows.row(b, t.r0 + i));
        mods.row = rows.row(b, t.r0 + i);
        mods.key0 = vis.lo;
        if (vis.count() > 0) softmax_row(D, s + (vis.lo - t.c0), vis.count(), scale, mods);
        // Keys outside the row's range (and whole rows that see none) weigh 0.
        std::fill(s, s + std::clamp<int64_t>(vis.lo - t.c0, 0, ncols), 0.0f);
        std::fill(s + std::clamp<int64_t>(vis.hi - t.c0, 0, ncols), s + ncols, 0.0f);
      }
      // O = P V accumulated in fp32 (fp8: times the V descale), then rounded to the dtype.
      const bool vf = v_finite[static_cast<size_t>(b * p.heads_kv + hk)];
      if (vf)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(nb), static_cast<int>(dv),
                    static_cast<int>(ncols), 1.0f, sbuf.data(), static_cast<int>(ncols), V, static_cast<int>(dv), 0.0f,
                    obuf.data(), static_cast<int>(dv));
      const float v_mul = fp8 ? static_cast<float>(descale_of(p, in.descale_v, b, hk)) : 1.0f;
      for (int64_t i = 0; i < nb; ++i) {
        const KeyRange vis = visible_range(p, b, rows.row(b, t.r0 + i));
        if (vis.empty()) continue;  // the output stays 0
        float* acc = obuf.data() + i * dv;
        if (!vf) {
          std::fill(acc, acc + dv, 0.0f);
          const float* s = sbuf.data() + i * ncols;
          for (int64_t j = vis.lo - t.c0; j < vis.hi - t.c0; ++j)
            for (int64_t x = 0; x < dv; ++x) acc[x] += s[j] * V[j * dv + x];
        }
        float* o = &out[static_cast<size_t>(rows.index(b, h, t.r0 + i, hq) * dv)];
        for (int64_t x = 0; x < dv; ++x) o[x] = rnd<D>(fp8 ? acc[x] * v_mul : acc[x]);
      }
    }
  }
}
}  // namespace

std::vector<float> dtype_baseline(const Problem& p, const Inputs& in, std::span<const int64_t> rows) {
  return dtype_baseline(p, in, RowSet::same(p, rows));
}

std::vector<float> dtype_baseline(const Problem& p, const Inputs& in, const RowSet& rows) {
  validate(p);
  validate_side_inputs(p, in);
  if (p.seq_kv > INT_MAX || p.head_dim_qk > INT_MAX || p.head_dim_v > INT_MAX)
    throw std::invalid_argument("dtype_baseline: seq_kv and head dims must fit the 32-bit CBLAS interface");
  std::vector<float> out(static_cast<size_t>(rows.total() * p.heads_q * p.head_dim_v), 0.0f);
  if (rows.total() == 0) return out;
  // Scores, P and O are rounded to the output dtype: the input dtype, or for fp8 inputs the bf16
  // or f16 an eager framework computes the rest in.
  switch (p.o_dtype()) {
    case DType::f16: baseline_impl<DType::f16>(p, in, rows, out); break;
    case DType::bf16: baseline_impl<DType::bf16>(p, in, rows, out); break;
    default: baseline_impl<DType::f32>(p, in, rows, out); break;
  }
  return out;
}

}  // namespace flashcheck
