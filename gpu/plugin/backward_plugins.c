/* Kernels with a backward pass (ABI 2, host memory, plain attention in BHSD, f32/f16/bf16) for the
 * tests of `flashcheck run --backward`: one correct, and broken ones each failing one gradient (or
 * determinism, or by crashing). Both passes follow FlashAttention-2's numerics (fp32 scores and
 * LSE; P, and in the backward dS, rounded to the input dtype before their GEMMs), with sums in
 * double: the forward saves
 * LSE = m + log(l) from the same fp32 scores the backward recomputes (a backward whose scores
 * differ from its forward's recomputes a one-hot P off 1 by the LSE's rounding, which the
 * criteria rightly fail); the backward's formulas, from the forward's O and LSE:
 *   P = exp(s·scale − LSE), D = rowsum(dO ∘ O), dV = Pᵀ dO, dP = dO Vᵀ, dS = P ∘ (dP − D),
 *   dQ = scale·dS K, dK = scale·dSᵀ Q, dK and dV of a KV head summed over its query group. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "flashcheck_plugin.h"

typedef enum { CORRECT, DQ_NO_SCALE, DK_FIRST_HEAD, DV_ROW_UNWRITTEN, NOISY_REPEATS, ABORTS, DEFAULT_MODE_DQ_NO_SCALE } flaw_t;

static float load(const void* base, int64_t i, fc_dtype d) {
  uint32_t u;
  float f;
  if (d == FC_DTYPE_F32) return ((const float*)base)[i];
  const uint16_t h = ((const uint16_t*)base)[i];
  if (d == FC_DTYPE_BF16) {
    u = (uint32_t)h << 16;
    memcpy(&f, &u, 4);
    return f;
  }
  _Float16 x;
  memcpy(&x, &h, 2);
  return (float)x;
}

/* Round to nearest even (finite values, or ±Inf past the dtype's range). */
static void store(void* base, int64_t i, float x, fc_dtype d) {
  uint32_t u;
  if (d == FC_DTYPE_F32) {
    ((float*)base)[i] = x;
    return;
  }
  if (d == FC_DTYPE_BF16) {
    memcpy(&u, &x, 4);
    ((uint16_t*)base)[i] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    return;
  }
  _Float16 h = (_Float16)x;
  memcpy((uint16_t*)base + i, &h, 2);
}

/* x rounded to dtype d (FlashAttention-2 rounds P and dS so before their 16-bit GEMMs). */
static float rnd(float x, fc_dtype d) {
  uint32_t bits = 0;
  store(&bits, 0, x, d);
  return load(&bits, 0, d);
}

/* Element (b, h, i, d) of a tensor: its rows are (outer = b, seq = i, head = h), D contiguous. */
static int64_t at(const fc_tensor* t, int64_t b, int64_t h, int64_t i, int64_t d) {
  return b * t->stride_outer + i * t->stride_seq + h * t->stride_head + d;
}

static const char* g_error = "";
/* Backward calls since the last forward: a campaign calls the forward once per case, then the
 * backward (3 times for a deterministic one). */
static int64_t g_calls = 0;

static const char* last_error(void) { return g_error; }

/* Plain attention in BHSD only: what the space below declares. */
static int supports(const fc_problem2* p) {
  return p->layout == FC_LAYOUT_BHSD && !p->has_sinks && p->page_size == 0 && !p->has_seqused_kv && p->softcap == 0 &&
         p->alibi == FC_ALIBI_NONE && p->window_left < 0 && p->window_right < 0 && p->dtype == p->out_dtype &&
         (p->dtype == FC_DTYPE_F32 || p->dtype == FC_DTYPE_F16 || p->dtype == FC_DTYPE_BF16);
}

/* The keys row i sees: [0, hi), causal top-left j <= i, bottom-right j <= i + Sk − Sq. */
static int64_t visible_end(const fc_problem2* p, int64_t i) {
  const int64_t Sq = p->max_seqlen_q, Sk = p->max_seqlen_kv;
  int64_t hi = Sk;
  if (p->causal == FC_CAUSAL_TOP_LEFT) hi = i + 1 < Sk ? i + 1 : Sk;
  if (p->causal == FC_CAUSAL_BOTTOM_RIGHT) hi = i + 1 + Sk - Sq < Sk ? i + 1 + Sk - Sq : Sk;
  return hi;
}

/* The fp32 score of (query row i of head h, key j of KV head hk), the same bits in both passes
 * (summed in double: this kernel is at least as accurate as the same-dtype baselines it is judged
 * against, so a correct kernel passes every case, not most). */
static float score(const fc_problem2* p, const fc_forward_args* a, int64_t b, int64_t h, int64_t hk, int64_t i, int64_t j) {
  double dot = 0;
  for (int64_t c = 0; c < p->head_dim_qk; ++c)
    dot += (double)load(a->q.data, at(&a->q, b, h, i, c), p->dtype) * load(a->k.data, at(&a->k, b, hk, j, c), p->dtype);
  return (float)(dot * p->scale);
}

static int forward(const fc_problem2* p, const fc_forward_args* a) {
  g_calls = 0;
  const int64_t group = p->heads_q / p->heads_kv, Dv = p->head_dim_v;
  float* s = malloc((size_t)(p->max_seqlen_kv + 1) * sizeof(float));
  double* acc = malloc((size_t)(Dv + 1) * sizeof(double));
  if (!s || !acc) {
    free(s), free(acc);
    g_error = "out of memory";
    return 1;
  }
  for (int64_t b = 0; b < p->batch; ++b)
    for (int64_t h = 0; h < p->heads_q; ++h)
      for (int64_t i = 0; i < p->max_seqlen_q; ++i) {
        const int64_t hi = visible_end(p, i);
        float m = -INFINITY;
        double l = 0;
        for (int64_t j = 0; j < hi; ++j) {
          s[j] = score(p, a, b, h, h / group, i, j);
          m = s[j] > m ? s[j] : m;
        }
        for (int64_t c = 0; c < Dv; ++c) acc[c] = 0;
        for (int64_t j = 0; j < hi; ++j) {
          const double w = exp((double)s[j] - m), wr = rnd((float)w, p->dtype); /* l sums P as computed, P·V takes it rounded */
          l += w;
          for (int64_t c = 0; c < Dv; ++c) acc[c] += wr * load(a->v.data, at(&a->v, b, h / group, j, c), p->dtype);
        }
        for (int64_t c = 0; c < Dv; ++c) store(a->o.data, at(&a->o, b, h, i, c), hi > 0 ? (float)(acc[c] / l) : 0.0f, p->dtype);
        if (a->lse.data) ((float*)a->lse.data)[at(&a->lse, b, h, i, 0)] = hi > 0 ? (float)(m + log(l)) : -INFINITY;
      }
  free(s), free(acc);
  return 0;
}

static int backward(const fc_problem2* p, const fc_forward_args* a, const fc_backward_args* g, flaw_t flaw) {
  const int64_t B = p->batch, Hq = p->heads_q, Hk = p->heads_kv, Sq = p->max_seqlen_q, Sk = p->max_seqlen_kv;
  const int64_t Dk = p->head_dim_qk, Dv = p->head_dim_v, group = Hq / Hk;
  const fc_dtype d = p->dtype;
  const double scale = p->scale;
  if (flaw == ABORTS) abort();
  double* dq = calloc((size_t)(Sq * Dk + 1), sizeof(double));
  double* dk = calloc((size_t)(Hk * Sk * Dk + 1), sizeof(double));
  double* dv = calloc((size_t)(Hk * Sk * Dv + 1), sizeof(double));
  float* s = malloc((size_t)(Sk + 1) * sizeof(float)); /* dS of the row, rounded */
  if (!dq || !dk || !dv || !s) {
    free(dq), free(dk), free(dv), free(s);
    g_error = "out of memory";
    return 1;
  }
  ++g_calls;
  for (int64_t b = 0; b < B; ++b) {
    memset(dk, 0, (size_t)(Hk * Sk * Dk) * sizeof(double));
    memset(dv, 0, (size_t)(Hk * Sk * Dv) * sizeof(double));
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t hk = h / group;
      memset(dq, 0, (size_t)(Sq * Dk) * sizeof(double));
      for (int64_t i = 0; i < Sq; ++i) {
        const int64_t hi = visible_end(p, i);
        if (hi <= 0) continue; /* sees nothing: every gradient of it is 0 */
        const float lse = ((const float*)a->lse.data)[at(&a->lse, b, h, i, 0)];
        double D = 0;
        for (int64_t c = 0; c < Dv; ++c)
          D += (double)load(g->dout.data, at(&g->dout, b, h, i, c), d) * load(a->o.data, at(&a->o, b, h, i, c), d);
        for (int64_t j = 0; j < hi; ++j) {
          double dp = 0;
          for (int64_t c = 0; c < Dv; ++c)
            dp += (double)load(g->dout.data, at(&g->dout, b, h, i, c), d) * load(a->v.data, at(&a->v, b, hk, j, c), d);
          const double P = exp((double)score(p, a, b, h, hk, i, j) - lse);
          const float dS = rnd((float)(P * (dp - D)), d), Pr = rnd((float)P, d);
          s[j] = dS;
          for (int64_t c = 0; c < Dv; ++c) dv[(hk * Sk + j) * Dv + c] += Pr * load(g->dout.data, at(&g->dout, b, h, i, c), d);
          if (flaw != DK_FIRST_HEAD || h % group == 0)
            for (int64_t c = 0; c < Dk; ++c) dk[(hk * Sk + j) * Dk + c] += scale * dS * load(a->q.data, at(&a->q, b, h, i, c), d);
        }
        /* DEFAULT_MODE_DQ_NO_SCALE: right when deterministic gradients are asked for, wrong in the
         * default mode (as a kernel whose fast atomic path and deterministic path differ). */
        const int unscaled = flaw == DQ_NO_SCALE || (flaw == DEFAULT_MODE_DQ_NO_SCALE && !g->deterministic);
        const double dq_scale = unscaled ? 1.0 : scale;
        for (int64_t j = 0; j < hi; ++j)
          for (int64_t c = 0; c < Dk; ++c) dq[i * Dk + c] += dq_scale * s[j] * load(a->k.data, at(&a->k, b, hk, j, c), d);
      }
      for (int64_t i = 0; i < Sq; ++i)
        for (int64_t c = 0; c < Dk; ++c) store(g->dq.data, at(&g->dq, b, h, i, c), (float)dq[i * Dk + c], d);
    }
    for (int64_t hk = 0; hk < Hk; ++hk)
      for (int64_t j = 0; j < Sk; ++j) {
        for (int64_t c = 0; c < Dk; ++c) store(g->dk.data, at(&g->dk, b, hk, j, c), (float)dk[(hk * Sk + j) * Dk + c], d);
        /* The last key of the last KV head of the last sequence keeps its poison. */
        if (flaw == DV_ROW_UNWRITTEN && b == B - 1 && hk == Hk - 1 && j == Sk - 1) continue;
        for (int64_t c = 0; c < Dv; ++c) store(g->dv.data, at(&g->dv, b, hk, j, c), (float)dv[(hk * Sk + j) * Dv + c], d);
      }
  }
  /* The second call after a forward flips the last bit of dq's first element: the first and the
   * last call agree (the gradients judged are right), the second differs from them. */
  if (flaw == NOISY_REPEATS && g_calls == 2 && Sq > 0 && Dk > 0 && B > 0) ((uint8_t*)g->dq.data)[0] ^= 1;
  free(dq), free(dk), free(dv), free(s);
  return 0;
}

static int correct(const fc_problem2* p, const fc_forward_args* a, const fc_backward_args* g) { return backward(p, a, g, CORRECT); }
static int dq_no_scale(const fc_problem2* p, const fc_forward_args* a, const fc_backward_args* g) {
  return backward(p, a, g, DQ_NO_SCALE);
}
static int dk_first_head(const fc_problem2* p, const fc_forward_args* a, const fc_backward_args* g) {
  return backward(p, a, g, DK_FIRST_HEAD);
}
static int dv_row_unwritten(const fc_problem2* p, const fc_forward_args* a, const fc_backward_args* g) {
  return backward(p, a, g, DV_ROW_UNWRITTEN);
}
static int noisy(const fc_problem2* p, const fc_forward_args* a, const fc_backward_args* g) { return backward(p, a, g, NOISY_REPEATS); }
static int aborts(const fc_problem2* p, const fc_forward_args* a, const fc_backward_args* g) { return backward(p, a, g, ABORTS); }
static int default_mode_wrong(const fc_problem2* p, const fc_forward_args* a, const fc_backward_args* g) {
  return backward(p, a, g, DEFAULT_MODE_DQ_NO_SCALE);
}

/* Plain attention, every causal mode, GQA, any head dim; finite inputs only (the backward above
 * does not promise the oracle's NaN propagation). */
static const fc_space2 kSpace = {
    sizeof(fc_space2),
    (1u << FC_DTYPE_F32) | (1u << FC_DTYPE_F16) | (1u << FC_DTYPE_BF16),
    0u, 0, 0, (int64_t)1 << 20, NULL, 0, NULL, 0, NULL, 0,
    1u << FC_LAYOUT_BHSD, 0u, 0u, 0u, 0u, NULL, 0, FC_WINDOW_INCLUSIVE, FC_ALIBI_LSE_EXACT,
    FC_LIMIT_FINITE_INPUTS, 1,
};

#define KERNEL(name, fn, flags)                                                                                            \
  {FLASHCHECK_PLUGIN_ABI2_VERSION, sizeof(fc_kernel2), name, FC_MEMORY_HOST, FC_LSE_BASE_E, FC_EMPTY_LSE_NEG_INF, supports, \
   forward, last_error, &kSpace, fn, flags}

static const fc_kernel2 kKernels[] = {
    KERNEL("backward_correct", correct, FC_KERNEL_DETERMINISTIC_BACKWARD),
    KERNEL("backward_dq_no_scale", dq_no_scale, 0),
    KERNEL("backward_dk_first_head", dk_first_head, 0),
    KERNEL("backward_dv_row_unwritten", dv_row_unwritten, 0),
    KERNEL("backward_noisy", noisy, FC_KERNEL_DETERMINISTIC_BACKWARD),
    KERNEL("backward_aborts", aborts, 0),
    KERNEL("backward_default_mode_wrong", default_mode_wrong, FC_KERNEL_DETERMINISTIC_BACKWARD),
    KERNEL("forward_only", NULL, 0),
};

const fc_kernel2* flashcheck_get_kernel2(uint32_t index) {
  return index < sizeof kKernels / sizeof kKernels[0] ? &kKernels[index] : NULL;
}
