#include "verify/baseline.h"

#include <cblas.h>

#include <algorithm>
#include <bit>
#include <climits>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "reference/mask.h"

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

// One row of scores in place: S rounded to the dtype, times scale rounded; softmax in fp32 (max,
// exp, sum, divide), P rounded to the dtype.
template <DType D>
[[gnu::always_inline]] inline void softmax_row_impl(float* s, int64_t n, float scale) {
  for (int64_t j = 0; j < n; ++j) s[j] = rnd<D>(rnd<D>(s[j]) * scale);
  float m = -std::numeric_limits<float>::infinity();
  // Max is order-free; the lanes keep std::max's rule that a NaN score never wins.
#pragma omp simd reduction(max : m)
  for (int64_t j = 0; j < n; ++j) m = m < s[j] ? s[j] : m;
  float l = 0;  // summed in vector lanes, as eager frameworks' vectorised softmax does
#pragma omp simd reduction(+ : l)
  for (int64_t j = 0; j < n; ++j) l += (s[j] = expf(s[j] - m));
  for (int64_t j = 0; j < n; ++j) s[j] = rnd<D>(s[j] / l);
}

// Compiled for SSE2, AVX2 and AVX-512, picked at load time by the CPU (GCC's target_clones), so a
// generic build runs these loops and glibc's vector expf at the widest width the machine has.
#define FC_ROW_CLONES __attribute__((target_clones("default", "avx2", "avx512f")))
FC_ROW_CLONES void softmax_row_f32(float* s, int64_t n, float scale) { softmax_row_impl<DType::f32>(s, n, scale); }
FC_ROW_CLONES void softmax_row_f16(float* s, int64_t n, float scale) { softmax_row_impl<DType::f16>(s, n, scale); }
FC_ROW_CLONES void softmax_row_bf16(float* s, int64_t n, float scale) { softmax_row_impl<DType::bf16>(s, n, scale); }
#undef FC_ROW_CLONES

void softmax_row(DType d, float* s, int64_t n, float scale) {
  switch (d) {
    case DType::f32: return softmax_row_f32(s, n, scale);
    case DType::f16: return softmax_row_f16(s, n, scale);
    case DType::bf16: return softmax_row_bf16(s, n, scale);
  }
}

struct Task {
  int64_t bh, r0, nb, ncols;
};

template <DType D>
void baseline_impl(const Problem& p, const Inputs& in, std::span<const int64_t> rows, std::vector<float>& out) {
  const int64_t nr = rows.empty() ? p.seq_q : static_cast<int64_t>(rows.size());
  const int64_t dqk = p.head_dim_qk, dv = p.head_dim_v, skv = p.seq_kv;
  const float scale = static_cast<float>(p.softmax_scale());
  auto row_at = [&](int64_t r) { return rows.empty() ? r : rows[static_cast<size_t>(r)]; };
  const int64_t row_block = std::min(nr, std::clamp<int64_t>(kScoreBudget / skv, 1, kMaxRowBlock));

  // 0 · Inf and 0 · NaN are NaN: a head whose V holds either must not let masked keys (P = 0)
  // reach a row through the block GEMM; its rows take the per-row product over visible keys.
  const int64_t kv_heads = p.batch * p.heads_kv;
  std::vector<char> v_finite(static_cast<size_t>(kv_heads));
#pragma omp parallel for schedule(static)
  for (int64_t kv = 0; kv < kv_heads; ++kv) {
    const float* v = in.v.data() + static_cast<size_t>(kv * skv * dv);
    v_finite[static_cast<size_t>(kv)] = std::all_of(v, v + skv * dv, [](float x) { return std::isfinite(x); });
  }

  std::vector<Task> tasks;
  for (int64_t bh = 0; bh < p.batch * p.heads_q; ++bh)
    for (int64_t r0 = 0; r0 < nr; r0 += row_block) {
      Task t{bh, r0, std::min(row_block, nr - r0), 0};
      t.ncols = visible_keys(p, row_at(r0 + t.nb - 1));  // rows ascend: the last one sees most
      if (t.ncols > 0) tasks.push_back(t);
    }
  // Largest first (causal blocks differ up to seq_kv-fold), so the dynamic schedule ends evenly.
  std::stable_sort(tasks.begin(), tasks.end(), [](const Task& a, const Task& b) { return a.nb * a.ncols > b.nb * b.ncols; });

#pragma omp parallel
  {
    // Per-thread scratch, reused by every task: O(row_block × seq_kv).
    std::vector<float> qbuf(static_cast<size_t>(row_block * dqk)), sbuf(static_cast<size_t>(row_block * skv)),
        obuf(static_cast<size_t>(row_block * dv));
#pragma omp for schedule(dynamic, 1)
    for (size_t ti = 0; ti < tasks.size(); ++ti) {
      const Task& t = tasks[ti];
      const int64_t nb = t.nb, ncols = t.ncols, b = t.bh / p.heads_q, h = t.bh % p.heads_q;
      const int64_t kv = b * p.heads_kv + p.kv_head(h);
      const float* K = in.k.data() + static_cast<size_t>(kv * skv * dqk);
      const float* V = in.v.data() + static_cast<size_t>(kv * skv * dv);
      for (int64_t i = 0; i < nb; ++i)
        std::copy_n(in.q.data() + static_cast<size_t>((t.bh * p.seq_q + row_at(t.r0 + i)) * dqk), dqk,
                    qbuf.data() + i * dqk);
      // S = Q Kᵀ with fp32 accumulation (sgemm; alpha 1 because the product is rounded to the
      // dtype before the scale is applied). Inside this parallel region OpenBLAS's OpenMP build
      // runs single-threaded.
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(nb), static_cast<int>(ncols),
                  static_cast<int>(dqk), 1.0f, qbuf.data(), static_cast<int>(dqk), K, static_cast<int>(dqk), 0.0f,
                  sbuf.data(), static_cast<int>(ncols));
      for (int64_t i = 0; i < nb; ++i) {
        float* s = sbuf.data() + i * ncols;
        const int64_t n = visible_keys(p, row_at(t.r0 + i));
        softmax_row(D, s, n, scale);
        std::fill(s + n, s + ncols, 0.0f);  // masked keys (and whole rows that see none) weigh 0
      }
      // O = P V accumulated in fp32, then rounded to the dtype.
      const bool vf = v_finite[static_cast<size_t>(kv)];
      if (vf)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(nb), static_cast<int>(dv),
                    static_cast<int>(ncols), 1.0f, sbuf.data(), static_cast<int>(ncols), V, static_cast<int>(dv), 0.0f,
                    obuf.data(), static_cast<int>(dv));
      for (int64_t i = 0; i < nb; ++i) {
        const int64_t n = visible_keys(p, row_at(t.r0 + i));
        if (n == 0) continue;  // the output stays 0
        float* acc = obuf.data() + i * dv;
        if (!vf) {
          std::fill(acc, acc + dv, 0.0f);
          const float* s = sbuf.data() + i * ncols;
          for (int64_t j = 0; j < n; ++j)
            for (int64_t x = 0; x < dv; ++x) acc[x] += s[j] * V[j * dv + x];
        }
        float* o = &out[static_cast<size_t>((t.bh * nr + t.r0 + i) * dv)];
        for (int64_t x = 0; x < dv; ++x) o[x] = rnd<D>(acc[x]);
      }
    }
  }
}
}  // namespace

std::vector<float> dtype_baseline(const Problem& p, const Inputs& in, std::span<const int64_t> rows) {
  validate(p);
  if (p.seq_kv > INT_MAX || p.head_dim_qk > INT_MAX || p.head_dim_v > INT_MAX)
    throw std::invalid_argument("dtype_baseline: seq_kv and head dims must fit the 32-bit CBLAS interface");
  const int64_t nr = rows.empty() ? p.seq_q : static_cast<int64_t>(rows.size());
  std::vector<float> out(static_cast<size_t>(p.batch * p.heads_q * nr * p.head_dim_v), 0.0f);
  if (nr == 0) return out;
  switch (p.dtype) {
    case DType::f32: baseline_impl<DType::f32>(p, in, rows, out); break;
    case DType::f16: baseline_impl<DType::f16>(p, in, rows, out); break;
    case DType::bf16: baseline_impl<DType::bf16>(p, in, rows, out); break;
  }
  return out;
}

}  // namespace flashcheck
