/* Kernels that are wrong on purpose, one way each, for tests that prove the harness catches them.
 * Each wraps the example plugin's correct kernel and then breaks one thing. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "flashcheck_plugin.h"

const fc_kernel* flashcheck_example_kernel(void);

static int64_t o_bytes(const fc_problem* p) {
  return p->batch * p->heads_q * p->seq_q * p->head_dim_v * (p->dtype == FC_DTYPE_F32 ? 4 : 2);
}
static int supports(const fc_problem* p) { return flashcheck_example_kernel()->supports(p); }
static int base(const fc_problem* p, const void* q, const void* k, const void* v, void* o, float* lse) {
  return flashcheck_example_kernel()->forward(p, q, k, v, o, lse, 0);
}

/* Writes one element past the end of o. */
static int oob(const fc_problem* p, const void* q, const void* k, const void* v, void* o, float* lse, void* s) {
  (void)s;
  int rc = base(p, q, k, v, o, lse);
  memset((char*)o + o_bytes(p), 0, 2);
  return rc;
}
/* Never writes the last query row of the last head. */
static int lazy(const fc_problem* p, const void* q, const void* k, const void* v, void* o, float* lse, void* s) {
  (void)s;
  char keep[4096];
  const int64_t row = p->head_dim_v * (p->dtype == FC_DTYPE_F32 ? 4 : 2);
  if (row > (int64_t)sizeof keep) return 1;
  memcpy(keep, (char*)o + o_bytes(p) - row, (size_t)row); /* the poison */
  int rc = base(p, q, k, v, o, lse);
  memcpy((char*)o + o_bytes(p) - row, keep, (size_t)row);
  return rc;
}
/* Writes base-2 LSE (as the example does) but declares natural log. */
static int liar(const fc_problem* p, const void* q, const void* k, const void* v, void* o, float* lse, void* s) {
  (void)s;
  return base(p, q, k, v, o, lse);
}

static const fc_kernel kBroken[] = {
    {FLASHCHECK_PLUGIN_ABI_VERSION, sizeof(fc_kernel), "broken_oob_write", FC_MEMORY_HOST, FC_LSE_BASE_2,
     FC_EMPTY_LSE_NEG_INF, supports, oob, 0},
    {FLASHCHECK_PLUGIN_ABI_VERSION, sizeof(fc_kernel), "broken_unwritten_row", FC_MEMORY_HOST, FC_LSE_BASE_2,
     FC_EMPTY_LSE_NEG_INF, supports, lazy, 0},
    {FLASHCHECK_PLUGIN_ABI_VERSION, sizeof(fc_kernel), "broken_lse_base", FC_MEMORY_HOST, FC_LSE_BASE_E,
     FC_EMPTY_LSE_NEG_INF, supports, liar, 0},
};

#ifndef FLASHCHECK_BROKEN_ABI2
const fc_kernel* flashcheck_get_kernel(uint32_t index) { return index < 3 ? &kBroken[index] : NULL; }
#endif

/* ==== ABI 2: variant kernels, each wrong one way (and two right ones that declare a convention) ===
 * Built as broken_variant_plugins.so (FLASHCHECK_BROKEN_ABI2), which exports flashcheck_get_kernel2
 * alone. Each wraps the example plugin's correct ABI 2 kernel and breaks one thing; the tests run
 * them through `flashcheck run --plugin` on variant problems and expect the criterion named here. */
#ifdef FLASHCHECK_BROKEN_ABI2
#include <stdlib.h>

const fc_kernel2* flashcheck_example_kernel2(void);

static int supports2(const fc_problem2* p) { return flashcheck_example_kernel2()->supports(p); }
static int base2(const fc_problem2* p, const fc_forward_args* a) { return flashcheck_example_kernel2()->forward(p, a); }
static int64_t out_bytes(const fc_problem2* p) { return p->out_dtype == FC_DTYPE_F32 ? 4 : 2; }

/* Ignores the window's left bound (sees every earlier key): caught by the O criteria and lse. */
static int window_no_left(const fc_problem2* p, const fc_forward_args* a) {
  fc_problem2 q = *p;
  q.window_left = -1;
  return base2(&q, a);
}
/* Declares the inclusive convention but reads the left bound as exclusive (cuDNN's): one key
 * fewer on the left of every windowed row. Caught by the O criteria. */
static int window_as_exclusive(const fc_problem2* p, const fc_forward_args* a) {
  fc_problem2 q = *p;
  if (q.window_left >= 1) --q.window_left;
  return base2(&q, a);
}
/* Right: declares FC_WINDOW_LEFT_EXCLUSIVE, is handed left + 1 and converts back. Must pass. */
static int window_exclusive(const fc_problem2* p, const fc_forward_args* a) {
  fc_problem2 q = *p;
  if (q.window_left >= 1) --q.window_left;
  return base2(&q, a);
}
/* Correct, then writes the first padding row of o (the token after cu_seqlens_q[-1]): caught by
 * padding_written. */
static int padding_write(const fc_problem2* p, const fc_forward_args* a) {
  const int rc = base2(p, a);
  if (p->varlen) memset((char*)a->o.data + p->total_q * a->o.stride_seq * out_bytes(p), 0, (size_t)(p->head_dim_v * out_bytes(p)));
  return rc;
}
/* Reads each sequence's whole last page, past cache_seqlens, into the poisoned tail: caught by
 * nan_inf_positions when a last page is partly filled. */
static int past_cache(const fc_problem2* p, const fc_forward_args* a) {
  if (p->page_size <= 0) return base2(p, a);
  int32_t* lens = (int32_t*)malloc(sizeof(int32_t) * (size_t)p->batch);
  if (!lens) return 1;
  fc_problem2 q = *p;
  fc_forward_args b = *a;
  for (int64_t i = 0; i < p->batch; ++i) {
    lens[i] = (int32_t)((a->cache_seqlens[i] + p->page_size - 1) / p->page_size * p->page_size);
    if (lens[i] > q.max_seqlen_kv) q.max_seqlen_kv = lens[i];
  }
  b.cache_seqlens = lens;
  const int rc = base2(&q, &b);
  free(lens);
  return rc;
}
/* FlashAttention 2's causal ALiBi LSE: + slope·(i + d) per row (base 2 here, as the LSE), dense
 * problems only. Declared (FC_ALIBI_LSE_KEY_OFFSET) it is right; declared exact it fails lse. */
static int alibi_key_offset(const fc_problem2* p, const fc_forward_args* a) {
  const int rc = base2(p, a);
  if (rc || p->causal == FC_CAUSAL_NONE || p->alibi == FC_ALIBI_NONE || !a->lse.data) return rc;
  const int64_t sq = p->max_seqlen_q, skv = p->max_seqlen_kv;
  const int64_t d = p->alibi == FC_ALIBI_SIGNED || p->causal == FC_CAUSAL_TOP_LEFT ? 0 : skv - sq;
  for (int64_t b = 0; b < p->batch; ++b)
    for (int64_t h = 0; h < p->heads_q; ++h) {
      const float slope = a->alibi_slopes[p->alibi_per_batch ? b * p->heads_q + h : h];
      for (int64_t i = 0; i < sq; ++i)
        ((float*)a->lse.data)[b * a->lse.stride_outer + h * a->lse.stride_head + i * a->lse.stride_seq] +=
            (float)(slope * (double)(i + d) * 1.4426950408889634);
    }
  return rc;
}
static int dense_alibi_only(const fc_problem2* p) { return supports2(p) && !p->varlen && !p->has_seqused_kv && p->page_size == 0; }
/* Writes into its input k, then computes correctly: an input is the caller's data. The byte is
 * flipped, not zeroed: a random input's first byte is already 0 for about one seed in 256, and a
 * write that changes nothing cannot be seen (Harness.CountsPaddingWritesAndNamesAWrittenInput failed
 * at FLASHCHECK_SEED=1768202949076271406). */
static int input_write(const fc_problem2* p, const fc_forward_args* a) {
  ((unsigned char*)a->k.data)[0] ^= 0xffu;
  return base2(p, a);
}

/* Applies softcap after the mask: a masked key's -inf becomes -cap, a finite score, and takes
 * weight. f32, dense BHSD only, its own row loop (the bug is in the order, inside the loop). */
static int softcap_late_supports(const fc_problem2* p) {
  return p->dtype == FC_DTYPE_F32 && p->layout == FC_LAYOUT_BHSD && !p->varlen && !p->has_seqused_kv && p->page_size == 0 &&
         p->alibi == FC_ALIBI_NONE && !p->has_sinks && p->softcap > 0 && p->max_seqlen_kv <= 4096;
}
static int softcap_late(const fc_problem2* p, const fc_forward_args* a) {
  double s[4096];
  const int64_t sq = p->max_seqlen_q, skv = p->max_seqlen_kv, d = p->causal == FC_CAUSAL_TOP_LEFT ? 0 : skv - sq;
  const float *q = (const float*)a->q.data, *k = (const float*)a->k.data, *v = (const float*)a->v.data;
  for (int64_t b = 0; b < p->batch; ++b)
    for (int64_t h = 0; h < p->heads_q; ++h) {
      const int64_t hk = h / (p->heads_q / p->heads_kv);
      for (int64_t i = 0; i < sq; ++i) {
        const float* qi = q + b * a->q.stride_outer + h * a->q.stride_head + i * a->q.stride_seq;
        float* oi = (float*)a->o.data + b * a->o.stride_outer + h * a->o.stride_head + i * a->o.stride_seq;
        double m = -INFINITY, l = 0;
        for (int64_t j = 0; j < skv; ++j) {
          const float* kj = k + b * a->k.stride_outer + hk * a->k.stride_head + j * a->k.stride_seq;
          double dot = 0;
          for (int64_t c = 0; c < p->head_dim_qk; ++c) dot += (double)qi[c] * kj[c];
          const int masked = (p->causal != FC_CAUSAL_NONE && j > i + d) || (p->window_left >= 0 && j < i + d - p->window_left) ||
                             (p->window_right >= 0 && j > i + d + p->window_right);
          s[j] = p->softcap * tanh((masked ? -INFINITY : dot * p->scale) / p->softcap); /* the bug: cap after the mask */
          if (s[j] > m) m = s[j];
        }
        for (int64_t j = 0; j < skv; ++j) l += exp(s[j] - m);
        for (int64_t c = 0; c < p->head_dim_v; ++c) {
          double acc = 0;
          for (int64_t j = 0; j < skv; ++j)
            acc += exp(s[j] - m) * v[b * a->v.stride_outer + hk * a->v.stride_head + j * a->v.stride_seq + c];
          oi[c] = (float)(acc / l);
        }
        if (a->lse.data)
          ((float*)a->lse.data)[b * a->lse.stride_outer + h * a->lse.stride_head + i * a->lse.stride_seq] =
              (float)((m + log(l)) * 1.4426950408889634);
      }
    }
  return 0;
}

/* Correct, then writes 0 over every NaN and Inf of o and every NaN of lse (an empty row's -inf
 * stays): a kernel that hides bad inputs
 * (FlashAttention-style epilogues that turn a NaN row sum into an empty row do the same). Dense
 * problems only (it walks the buffers whole). Caught on the cases that carry a NaN or Inf
 * (nan_inf_positions); declared with FC_LIMIT_FINITE_INPUTS it is drawn none and passes. */
static int squash_supports(const fc_problem2* p) {
  return supports2(p) && p->layout == FC_LAYOUT_BHSD && !p->varlen && !p->has_seqused_kv && p->page_size == 0 &&
         p->dtype <= FC_DTYPE_BF16;
}
static int nan_squash(const fc_problem2* p, const fc_forward_args* a) {
  const int rc = base2(p, a);
  if (rc) return rc;
  for (int64_t i = 0; i < a->o.numel; ++i) {
    if (p->out_dtype == FC_DTYPE_F32) {
      float* x = (float*)a->o.data + i;
      if (!isfinite(*x)) *x = 0.0f;
    } else {
      uint16_t* x = (uint16_t*)a->o.data + i;
      const uint16_t exponent = p->out_dtype == FC_DTYPE_F16 ? 0x7c00u : 0x7f80u;
      if ((*x & exponent) == exponent) *x = 0;
    }
  }
  for (int64_t i = 0; a->lse.data && i < a->lse.numel; ++i)
    if (isnan(((float*)a->lse.data)[i])) ((float*)a->lse.data)[i] = 0.0f;
  return 0;
}
/* Declares Sq = Skv and lengths in multiples of 16 (ABI 2.1's limits) and takes nothing else: a
 * campaign must hand it only such problems (no case declined). */
static int limits_supports(const fc_problem2* p) {
  return squash_supports(p) && p->max_seqlen_q == p->max_seqlen_kv && p->max_seqlen_q % 16 == 0;
}

#define ALL_VARIANTS \
  FC_VARIANT_WINDOW | FC_VARIANT_SOFTCAP | FC_VARIANT_ALIBI_PER_BATCH | FC_VARIANT_SINKS | FC_VARIANT_SEQUSED | FC_VARIANT_PAGED
#define SPACE2(name, layouts, variants, convention, alibi_lse)                                                           \
  static const fc_space2 name = {sizeof(fc_space2), 0x1fu, 0, 0, 0, 1 << 20, NULL, 0, NULL, 0, NULL, 0, layouts, variants, \
                                 6u, (1u << FC_DTYPE_BF16) | (1u << FC_DTYPE_F16), 7u, NULL, 0, convention, alibi_lse}
SPACE2(kEvery, 7u, ALL_VARIANTS, FC_WINDOW_INCLUSIVE, FC_ALIBI_LSE_EXACT);
SPACE2(kExclusive, 7u, ALL_VARIANTS, FC_WINDOW_LEFT_EXCLUSIVE, FC_ALIBI_LSE_EXACT);
SPACE2(kDenseKeyOffset, 3u, FC_VARIANT_WINDOW | FC_VARIANT_SOFTCAP | FC_VARIANT_ALIBI_PER_BATCH, FC_WINDOW_INCLUSIVE,
       FC_ALIBI_LSE_KEY_OFFSET);
SPACE2(kDenseExact, 3u, FC_VARIANT_WINDOW | FC_VARIANT_SOFTCAP | FC_VARIANT_ALIBI_PER_BATCH, FC_WINDOW_INCLUSIVE,
       FC_ALIBI_LSE_EXACT);
SPACE2(kDenseSoftcap, 1u, FC_VARIANT_WINDOW | FC_VARIANT_SOFTCAP, FC_WINDOW_INCLUSIVE, FC_ALIBI_LSE_EXACT);
/* ABI 2.1: plain attention in bhsd within declared limits. */
#define LIMITED(name, limits, multiple)                                                                                  \
  static const fc_space2 name = {sizeof(fc_space2), 7u, 0, 0, 0, 1 << 20, NULL, 0, NULL, 0, NULL, 0, 1u, 0, 0, 0, 0, NULL, 0, \
                                 FC_WINDOW_INCLUSIVE, FC_ALIBI_LSE_EXACT, limits, multiple}
LIMITED(kDense, 0u, 0);
LIMITED(kDenseFinite, FC_LIMIT_FINITE_INPUTS, 0);
LIMITED(kEqualBy16, FC_LIMIT_EQUAL_LENGTHS, 16);

#define KERNEL2(name, sup, fn, space) \
  { FLASHCHECK_PLUGIN_ABI2_VERSION, sizeof(fc_kernel2), name, FC_MEMORY_HOST, FC_LSE_BASE_2, FC_EMPTY_LSE_NEG_INF, sup, fn, 0, &space, 0, 0 }

static const fc_kernel2 kBroken2[] = {
    KERNEL2("broken_window_left", supports2, window_no_left, kEvery),
    KERNEL2("broken_window_convention", supports2, window_as_exclusive, kEvery),
    KERNEL2("variant_window_exclusive", supports2, window_exclusive, kExclusive),
    KERNEL2("broken_padding_write", supports2, padding_write, kEvery),
    KERNEL2("broken_past_cache", supports2, past_cache, kEvery),
    KERNEL2("broken_alibi_lse", dense_alibi_only, alibi_key_offset, kDenseExact),
    KERNEL2("variant_alibi_key_offset", dense_alibi_only, alibi_key_offset, kDenseKeyOffset),
    KERNEL2("broken_input_write", supports2, input_write, kEvery),
    KERNEL2("broken_softcap_late", softcap_late_supports, softcap_late, kDenseSoftcap),
    KERNEL2("broken_nan_squash", squash_supports, nan_squash, kDense),
    KERNEL2("variant_nan_squash_declared", squash_supports, nan_squash, kDenseFinite),
    KERNEL2("variant_limits", limits_supports, base2, kEqualBy16),
};

const fc_kernel2* flashcheck_get_kernel2(uint32_t index) {
  return index < sizeof kBroken2 / sizeof kBroken2[0] ? &kBroken2[index] : NULL;
}
#endif /* FLASHCHECK_BROKEN_ABI2 */
