/* An out-of-tree kernel as a plugin: plain C, host memory, so it runs on machines without a GPU.
 * It computes attention one query row at a time (scores, then a softmax in double) for every
 * variant ABI 2 describes: sliding windows, softcap, ALiBi (both forms, slopes per head or per
 * batch), attention sinks, BHSD/BSHD/THD layouts through their strides, variable-length batches,
 * seqused_kv, paged KV caches of any page size, fp8 e4m3/e5m2 inputs with descales, and bf16, f16
 * or f32 output. It writes its LSE in base 2 (declared, so flashcheck converts it).
 *
 * It exports both entries: ABI 2 (`flashcheck_get_kernel2`, everything above) and ABI 1
 * (`flashcheck_get_kernel`, plain attention in f32 and bf16; f16 is declined through supports(),
 * which a campaign counts as skipped), so a flashcheck that predates ABI 2 still loads it.
 * Build: cc -shared -fPIC -O2 -lm. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flashcheck_plugin.h"

/* ---- Element types ---------------------------------------------------------------------------- */

static float from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* A minifloat with `mbits` mantissa bits and exponent bias `bias` (f16, e4m3, e5m2), exactly. */
static float minifloat(uint32_t sign, uint32_t e, uint32_t m, int mbits, int bias) {
  const float v = e == 0 ? ldexpf((float)m, 1 - bias - mbits) : ldexpf((float)(m | (1u << mbits)), (int)e - bias - mbits);
  return sign ? -v : v;
}

static float load(const void* base, int64_t i, fc_dtype d) {
  const uint8_t* b8 = (const uint8_t*)base;
  const uint16_t* b16 = (const uint16_t*)base;
  switch (d) {
    case FC_DTYPE_F32: return ((const float*)base)[i];
    case FC_DTYPE_BF16: return from_bits((uint32_t)b16[i] << 16); /* bf16 is the top half of an f32 */
    case FC_DTYPE_F16: {
      const uint32_t h = b16[i], e = (h >> 10) & 31u, m = h & 1023u;
      if (e == 31) return m ? NAN : ((h >> 15) ? -INFINITY : INFINITY);
      return minifloat(h >> 15, e, m, 10, 15);
    }
    case FC_DTYPE_E4M3: { /* "fn": no infinities; S.1111.111 is NaN */
      const uint32_t x = b8[i], e = (x >> 3) & 15u, m = x & 7u;
      if (e == 15 && m == 7) return NAN;
      return minifloat(x >> 7, e, m, 3, 7);
    }
    case FC_DTYPE_E5M2: {
      const uint32_t x = b8[i], e = (x >> 2) & 31u, m = x & 3u;
      if (e == 31) return m ? NAN : ((x >> 7) ? -INFINITY : INFINITY);
      return minifloat(x >> 7, e, m, 2, 15);
    }
  }
  return NAN;
}

/* f32 -> f16, round to nearest even (nearbyintf rounds so in the default mode). */
static uint16_t to_f16(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  const float a = fabsf(x);
  if (isnan(x)) return sign | 0x7e00u;
  if (a >= 65520.0f) return sign | 0x7c00u; /* at or past the midpoint above 65504: infinity */
  if (a < 6.103515625e-05f) return sign | (uint16_t)nearbyintf(a * 16777216.0f); /* subnormal: units of 2^-24 */
  int e;
  const float f = frexpf(a, &e); /* a = f * 2^e, f in [0.5, 1) */
  uint32_t m = (uint32_t)nearbyintf(ldexpf(f, 11));
  if (m == 2048) m = 1024, ++e;
  return sign | (uint16_t)((uint32_t)(e + 14) << 10) | (uint16_t)(m - 1024);
}

static void store(void* base, int64_t i, float x, fc_dtype d) {
  if (d == FC_DTYPE_F32) {
    ((float*)base)[i] = x;
    return;
  }
  if (d == FC_DTYPE_F16) {
    ((uint16_t*)base)[i] = to_f16(x);
    return;
  }
  uint32_t u;
  memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    ((uint16_t*)base)[i] = (uint16_t)((u >> 16) | 0x40u);
    return;
  }
  u += 0x7fffu + ((u >> 16) & 1u); /* bf16: round to nearest even */
  ((uint16_t*)base)[i] = (uint16_t)(u >> 16);
}

/* ---- One batch element's lengths, and where its rows are ------------------------------------ */

typedef struct {
  int64_t sq, skv;    /* queries; keys used */
  int64_t q0, kv0;    /* first token of the sequence (thd) */
} seq_t;

static seq_t sequence(const fc_problem2* p, const fc_forward_args* a, int64_t b) {
  seq_t s = {p->max_seqlen_q, p->max_seqlen_kv, 0, 0};
  if (p->varlen) {
    s.q0 = a->cu_seqlens_q[b];
    s.sq = a->cu_seqlens_q[b + 1] - s.q0;
  }
  if (p->page_size > 0) {
    s.skv = a->cache_seqlens[b];
  } else if (p->varlen) {
    s.kv0 = a->cu_seqlens_kv[b];
    s.skv = a->cu_seqlens_kv[b + 1] - s.kv0;
  }
  if (p->has_seqused_kv) s.skv = a->seqused_kv[b];
  return s;
}

/* Row i of head h of a query-side tensor (q, o, lse): packed by token, or dense by sequence. */
static int64_t q_side(const fc_problem2* p, const fc_tensor* t, int64_t b, const seq_t* s, int64_t h, int64_t i) {
  if (p->varlen) return (s->q0 + i) * t->stride_seq + h * t->stride_head;
  return b * t->stride_outer + i * t->stride_seq + h * t->stride_head;
}

/* Key j of KV head hk: through the block table, packed by token, or dense. */
static int64_t kv_side(const fc_problem2* p, const fc_forward_args* a, const fc_tensor* t, int64_t b, const seq_t* s, int64_t hk,
                       int64_t j) {
  if (p->page_size > 0) {
    const int64_t page = a->block_table[b * p->max_pages_per_seq + j / p->page_size];
    return page * t->stride_outer + (j % p->page_size) * t->stride_seq + hk * t->stride_head;
  }
  if (p->varlen) return (s->kv0 + j) * t->stride_seq + hk * t->stride_head;
  return b * t->stride_outer + j * t->stride_seq + hk * t->stride_head;
}

static float descale(const fc_problem2* p, const float* d, int64_t b, int64_t hk) {
  if (!d || p->descale == FC_DESCALE_NONE) return 1.0f;
  return p->descale == FC_DESCALE_TENSOR ? d[0] : d[b * p->heads_kv + hk];
}

/* ---- Input checks: a caller's arguments that contradict the problem are refused, not read --- */

static char g_message[256];
static const char* g_error = "";

static int refuse(const char* field, int64_t at, int64_t value, const char* why) {
  snprintf(g_message, sizeof g_message, "%s[%lld] = %lld %s", field, (long long)at, (long long)value, why);
  g_error = g_message;
  return 2;
}

static int check_args(const fc_problem2* p, const fc_forward_args* a) {
  if (p->varlen) {
    if (!a->cu_seqlens_q || (p->page_size == 0 && !a->cu_seqlens_kv)) return refuse("cu_seqlens", 0, 0, "missing");
    for (int64_t b = 0; b <= p->batch; ++b) {
      const int32_t* cu[2] = {a->cu_seqlens_q, p->page_size == 0 ? a->cu_seqlens_kv : NULL};
      const int64_t total[2] = {p->total_q, p->total_kv};
      for (int k = 0; k < 2; ++k) {
        if (!cu[k]) continue;
        const char* name = k ? "cu_seqlens_kv" : "cu_seqlens_q";
        if (b == 0 && cu[k][0] != 0) return refuse(name, 0, cu[k][0], "(must start at 0)");
        if (b > 0 && cu[k][b] < cu[k][b - 1]) return refuse(name, b, cu[k][b], "(decreasing)");
        if (b == p->batch && cu[k][b] != total[k]) return refuse(name, b, cu[k][b], "(must end at the total)");
      }
    }
  }
  for (int64_t b = 0; b < p->batch; ++b) {
    const seq_t s = sequence(p, a, b);
    const int64_t stored = p->page_size > 0 ? a->cache_seqlens[b]
                           : p->varlen      ? a->cu_seqlens_kv[b + 1] - a->cu_seqlens_kv[b]
                                            : p->max_seqlen_kv;
    if (stored > p->max_seqlen_kv) return refuse("keys of sequence", b, stored, "(past max_seqlen_kv)");
    if (s.skv < 0 || s.skv > stored) return refuse("seqused_kv", b, s.skv, "(past the keys stored)");
    if (s.sq < 0 || s.sq > p->max_seqlen_q) return refuse("queries of sequence", b, s.sq, "(past max_seqlen_q)");
    if (p->page_size > 0) {
      if (s.skv < 0 || s.skv > p->max_pages_per_seq * p->page_size) return refuse("cache_seqlens", b, s.skv, "(past the block table)");
      for (int64_t j = 0; j * p->page_size < s.skv; ++j) {
        const int32_t page = a->block_table[b * p->max_pages_per_seq + j];
        if (page < 0 || page >= p->num_pages) return refuse("block_table", b * p->max_pages_per_seq + j, page, "(no such page)");
      }
    }
  }
  return 0;
}

/* ---- The attention ------------------------------------------------------------------------ */

/* Keys [lo, hi) visible to query i of a sequence (sq queries, skv keys): the causal mode and the
 * window (inclusive bounds, -1 unbounded) around the aligned key i + d. */
static void visible(const fc_problem2* p, int64_t sq, int64_t skv, int64_t i, int64_t* lo, int64_t* hi) {
  const int64_t d = p->causal == FC_CAUSAL_TOP_LEFT ? 0 : skv - sq, far = sq + skv + 1;
  int64_t left = p->window_left, right = p->window_right;
  *lo = 0;
  *hi = skv;
  if (p->causal != FC_CAUSAL_NONE) right = 0; /* min(right, 0), unbounded counting as +inf */
  if (left >= 0) {
    if (left > far) left = far; /* clamped: no sum below can overflow */
    if (i + d - left > *lo) *lo = i + d - left;
  }
  if (right >= 0) {
    if (right > far) right = far;
    if (i + d + right + 1 < *hi) *hi = i + d + right + 1;
  }
  if (*hi < *lo) *hi = *lo;
}

static int attend(const fc_problem2* p, const fc_forward_args* a) {
  const int rc = check_args(p, a);
  if (rc) return rc;
  double* s = (double*)malloc(sizeof(double) * (size_t)(p->max_seqlen_kv > 0 ? p->max_seqlen_kv : 1));
  double* acc = (double*)malloc(sizeof(double) * (size_t)p->head_dim_v);
  if (!s || !acc) {
    free(s);
    free(acc);
    g_error = "out of memory";
    return 1;
  }
  const int64_t group = p->heads_q / p->heads_kv;
  for (int64_t b = 0; b < p->batch; ++b) {
    const seq_t sq = sequence(p, a, b);
    const int64_t d = p->causal == FC_CAUSAL_TOP_LEFT ? 0 : sq.skv - sq.sq;
    for (int64_t h = 0; h < p->heads_q; ++h) {
      const int64_t hk = h / group;
      const double dq = descale(p, a->descale_q, b, hk), dk = descale(p, a->descale_k, b, hk), dv = descale(p, a->descale_v, b, hk);
      const double slope = p->alibi == FC_ALIBI_NONE ? 0 : a->alibi_slopes[p->alibi_per_batch ? b * p->heads_q + h : h];
      const double sink = p->has_sinks ? a->sinks[h] : -INFINITY;
      for (int64_t i = 0; i < sq.sq; ++i) {
        int64_t lo, hi;
        visible(p, sq.sq, sq.skv, i, &lo, &hi);
        const int64_t qr = q_side(p, &a->q, b, &sq, h, i), orow = q_side(p, &a->o, b, &sq, h, i);
        double m = -INFINITY;
        for (int64_t j = lo; j < hi; ++j) {
          const int64_t kr = kv_side(p, a, &a->k, b, &sq, hk, j);
          double dot = 0;
          for (int64_t c = 0; c < p->head_dim_qk; ++c)
            dot += (double)load(a->q.data, qr + c, p->dtype) * dq * ((double)load(a->k.data, kr + c, p->dtype) * dk);
          double x = dot * p->scale;
          if (p->softcap > 0) x = p->softcap * tanh(x / p->softcap); /* before the mask and the bias */
          if (p->alibi == FC_ALIBI_SYMMETRIC) x -= slope * (double)llabs(i + d - j);
          if (p->alibi == FC_ALIBI_SIGNED) x += slope * (double)(j - i);
          s[j - lo] = x;
          if (x > m) m = x;
        }
        if (hi <= lo) { /* no visible key: O = 0, LSE = -inf, sink or not */
          for (int64_t c = 0; c < p->head_dim_v; ++c) store(a->o.data, orow + c, 0.0f, p->out_dtype);
          if (a->lse.data) ((float*)a->lse.data)[q_side(p, &a->lse, b, &sq, h, i)] = -INFINITY;
          continue;
        }
        if (sink > m) m = sink; /* the sink joins the max and the denominator, not the values */
        double l = isinf(sink) ? 0 : exp(sink - m);
        for (int64_t c = 0; c < p->head_dim_v; ++c) acc[c] = 0;
        for (int64_t j = lo; j < hi; ++j) {
          const double w = exp(s[j - lo] - m);
          const int64_t vr = kv_side(p, a, &a->v, b, &sq, hk, j);
          l += w;
          for (int64_t c = 0; c < p->head_dim_v; ++c) acc[c] += w * ((double)load(a->v.data, vr + c, p->dtype) * dv);
        }
        for (int64_t c = 0; c < p->head_dim_v; ++c) store(a->o.data, orow + c, (float)(acc[c] / l), p->out_dtype);
        if (a->lse.data) /* base 2, as declared */
          ((float*)a->lse.data)[q_side(p, &a->lse, b, &sq, h, i)] = (float)((m + log(l)) * 1.4426950408889634);
      }
    }
  }
  free(s);
  free(acc);
  return 0;
}

static const char* last_error(void) { return g_error; }

/* ---- ABI 2 ---------------------------------------------------------------------------------- */

static int supports2(const fc_problem2* p) {
  const int fp8 = p->dtype == FC_DTYPE_E4M3 || p->dtype == FC_DTYPE_E5M2;
  return p->head_dim_v <= 1024 && p->max_seqlen_kv <= (1 << 20) && (fp8 || p->out_dtype == p->dtype);
}

static int forward2(const fc_problem2* p, const fc_forward_args* a) { return attend(p, a); }

static const fc_space2 kSpace2 = {
    sizeof(fc_space2),
    0x1fu, /* f32, f16, bf16, e4m3, e5m2 */
    0u,    /* every causal mode */
    0,     0,          (int64_t)1 << 20, NULL, 0, NULL, 0, NULL, 0,
    (1u << FC_LAYOUT_BHSD) | (1u << FC_LAYOUT_BSHD) | (1u << FC_LAYOUT_THD),
    FC_VARIANT_WINDOW | FC_VARIANT_SOFTCAP | FC_VARIANT_ALIBI_PER_BATCH | FC_VARIANT_SINKS | FC_VARIANT_SEQUSED | FC_VARIANT_PAGED,
    (1u << FC_ALIBI_SYMMETRIC) | (1u << FC_ALIBI_SIGNED),
    (1u << FC_DTYPE_BF16) | (1u << FC_DTYPE_F16),
    (1u << FC_DESCALE_NONE) | (1u << FC_DESCALE_TENSOR) | (1u << FC_DESCALE_HEAD),
    NULL,  0, /* any page size */
    FC_WINDOW_INCLUSIVE,
    FC_ALIBI_LSE_EXACT,
};

static const fc_kernel2 kKernel2 = {FLASHCHECK_PLUGIN_ABI2_VERSION, sizeof(fc_kernel2), "example_cpu_plugin", FC_MEMORY_HOST,
                                    FC_LSE_BASE_2, FC_EMPTY_LSE_NEG_INF, supports2, forward2, last_error, &kSpace2, NULL, 0};

const fc_kernel2* flashcheck_example_kernel2(void) { return &kKernel2; }

/* ---- ABI 1: plain attention on contiguous BHSD tensors, through the same code ---------------- */

static int supports(const fc_problem* p) {
  return (p->dtype == FC_DTYPE_F32 || p->dtype == FC_DTYPE_BF16) && p->head_dim_v <= 1024 && p->seq_kv <= (1 << 20);
}

static int forward(const fc_problem* p, const void* q, const void* k, const void* v, void* o, float* lse, void* stream) {
  fc_problem2 p2;
  fc_forward_args a;
  memset(&p2, 0, sizeof p2);
  memset(&a, 0, sizeof a);
  p2.struct_size = sizeof p2;
  p2.batch = p->batch, p2.heads_q = p->heads_q, p2.heads_kv = p->heads_kv;
  p2.head_dim_qk = p->head_dim_qk, p2.head_dim_v = p->head_dim_v;
  p2.max_seqlen_q = p->seq_q, p2.max_seqlen_kv = p->seq_kv;
  p2.total_q = p->batch * p->seq_q, p2.total_kv = p->batch * p->seq_kv;
  p2.dtype = p2.out_dtype = p->dtype;
  p2.causal = p->causal;
  p2.scale = p->scale;
  p2.window_left = p2.window_right = -1;
  p2.layout = FC_LAYOUT_BHSD;
  a.struct_size = sizeof a;
  /* [B, H, S, D]: row (b, s, h) at b * H*S*D + s * D + h * S*D. */
  const fc_tensor qt = {(void*)q, p->heads_q * p->seq_q * p->head_dim_qk, p->head_dim_qk, p->seq_q * p->head_dim_qk, 0};
  const fc_tensor kt = {(void*)k, p->heads_kv * p->seq_kv * p->head_dim_qk, p->head_dim_qk, p->seq_kv * p->head_dim_qk, 0};
  const fc_tensor vt = {(void*)v, p->heads_kv * p->seq_kv * p->head_dim_v, p->head_dim_v, p->seq_kv * p->head_dim_v, 0};
  const fc_tensor ot = {o, p->heads_q * p->seq_q * p->head_dim_v, p->head_dim_v, p->seq_q * p->head_dim_v, 0};
  const fc_tensor lt = {lse, p->heads_q * p->seq_q, 1, p->seq_q, 0};
  a.q = qt, a.k = kt, a.v = vt, a.o = ot, a.lse = lt;
  a.stream = stream;
  return attend(&p2, &a);
}

static const fc_kernel kKernel = {FLASHCHECK_PLUGIN_ABI_VERSION,
                                  sizeof(fc_kernel),
                                  "example_cpu_plugin",
                                  FC_MEMORY_HOST,
                                  FC_LSE_BASE_2,
                                  FC_EMPTY_LSE_NEG_INF,
                                  supports,
                                  forward,
                                  last_error};

const fc_kernel* flashcheck_example_kernel(void) { return &kKernel; }

#ifndef FLASHCHECK_NO_ENTRY
const fc_kernel* flashcheck_get_kernel(uint32_t index) { return index == 0 ? &kKernel : NULL; }
const fc_kernel2* flashcheck_get_kernel2(uint32_t index) { return index == 0 ? &kKernel2 : NULL; }
#endif
