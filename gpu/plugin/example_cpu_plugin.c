/* An out-of-tree kernel as a plugin: plain C, host memory, so it runs on machines without a GPU.
 * It computes attention one query row at a time with a two-pass softmax in float, and writes its
 * LSE in base 2 (declared, so flashcheck converts it). f32 and bf16 only: f16 is declined through
 * supports(), which the campaign counts as skipped. Build: cc -shared -fPIC -O2 -lm. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "flashcheck_plugin.h"

static float load(const void* base, int64_t i, fc_dtype d) {
  if (d == FC_DTYPE_F32) return ((const float*)base)[i];
  uint32_t u = (uint32_t)((const uint16_t*)base)[i] << 16; /* bf16 is the top half of an f32 */
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static void store(void* base, int64_t i, float x, fc_dtype d) {
  if (d == FC_DTYPE_F32) {
    ((float*)base)[i] = x;
    return;
  }
  uint32_t u;
  memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    ((uint16_t*)base)[i] = (uint16_t)((u >> 16) | 0x40u);
    return;
  }
  u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
  ((uint16_t*)base)[i] = (uint16_t)(u >> 16);
}

static int supports(const fc_problem* p) {
  return (p->dtype == FC_DTYPE_F32 || p->dtype == FC_DTYPE_BF16) && p->head_dim_v <= 1024 && p->seq_kv <= (1 << 20);
}

static const char* g_error = "";

static int forward(const fc_problem* p, const void* q, const void* k, const void* v, void* o, float* lse,
                   void* stream) {
  (void)stream;
  float* s = (float*)malloc(sizeof(float) * (size_t)p->seq_kv);
  float* acc = (float*)malloc(sizeof(float) * (size_t)p->head_dim_v);
  if (!s || !acc) {
    free(s);
    free(acc);
    g_error = "out of memory";
    return 1;
  }
  const int64_t group = p->heads_q / p->heads_kv;
  for (int64_t b = 0; b < p->batch; ++b)
    for (int64_t h = 0; h < p->heads_q; ++h)
      for (int64_t i = 0; i < p->seq_q; ++i) {
        const int64_t kvh = b * p->heads_kv + h / group, row = (b * p->heads_q + h) * p->seq_q + i;
        int64_t n = p->seq_kv; /* visible keys form a prefix [0, n) */
        if (p->causal == FC_CAUSAL_TOP_LEFT) n = i + 1 < n ? i + 1 : n;
        if (p->causal == FC_CAUSAL_BOTTOM_RIGHT) {
          int64_t e = i + 1 + p->seq_kv - p->seq_q;
          n = e < 0 ? 0 : (e < n ? e : n);
        }
        float m = -INFINITY, l = 0.0f;
        for (int64_t j = 0; j < n; ++j) {
          float dot = 0.0f;
          for (int64_t d = 0; d < p->head_dim_qk; ++d)
            dot += load(q, row * p->head_dim_qk + d, p->dtype) * load(k, (kvh * p->seq_kv + j) * p->head_dim_qk + d, p->dtype);
          s[j] = dot * (float)p->scale;
          if (s[j] > m) m = s[j];
        }
        for (int64_t d = 0; d < p->head_dim_v; ++d) acc[d] = 0.0f;
        for (int64_t j = 0; j < n; ++j) {
          float w = expf(s[j] - m);
          l += w;
          for (int64_t d = 0; d < p->head_dim_v; ++d) acc[d] += w * load(v, (kvh * p->seq_kv + j) * p->head_dim_v + d, p->dtype);
        }
        for (int64_t d = 0; d < p->head_dim_v; ++d) store(o, row * p->head_dim_v + d, n ? acc[d] / l : 0.0f, p->dtype);
        if (lse) lse[row] = n ? (m + logf(l)) * 1.4426950408889634f : -INFINITY; /* base 2, as declared */
      }
  free(s);
  free(acc);
  return 0;
}

static const char* last_error(void) { return g_error; }

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
#endif
