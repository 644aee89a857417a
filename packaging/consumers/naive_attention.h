/* Plain attention in C for the out-of-tree consumers (packaging/install_test.py): what a user's
 * first kernel looks like, so the installed flashcheck has something real to judge. Contiguous f32
 * BHSD tensors, sums in double; the mask as flashcheck states it (0 none, 1 top-left: key j visible
 * to query i iff j <= i, 2 bottom-right: iff j <= i + Skv - Sq); a row that sees no key gets O = 0
 * and LSE = -inf. Query head h reads KV head h / (Hq / Hkv). */
#ifndef NAIVE_ATTENTION_H
#define NAIVE_ATTENTION_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

/* 0, or -1 when the scratch row cannot be allocated. lse may be NULL. */
static int naive_attention(int64_t B, int64_t Hq, int64_t Hkv, int64_t Sq, int64_t Skv, int64_t Dqk, int64_t Dv,
                           int causal, double scale, const float* q, const float* k, const float* v, float* o,
                           float* lse) {
  double* w = malloc(sizeof(double) * (size_t)(Skv > 0 ? Skv : 1));
  if (!w) return -1;
  const int64_t group = Hq / Hkv;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < Sq; ++i) {
        const float* qi = q + ((b * Hq + h) * Sq + i) * Dqk;
        const float* kb = k + (b * Hkv + h / group) * Skv * Dqk;
        const float* vb = v + (b * Hkv + h / group) * Skv * Dv;
        float* oi = o + ((b * Hq + h) * Sq + i) * Dv;
        const int64_t last = causal == 1 ? i : causal == 2 ? i + Skv - Sq : Skv - 1; /* last visible key */
        const int64_t n = last + 1 < Skv ? (last + 1 > 0 ? last + 1 : 0) : Skv;
        double m = -INFINITY, sum = 0;
        for (int64_t j = 0; j < n; ++j) {
          double s = 0;
          for (int64_t d = 0; d < Dqk; ++d) s += (double)qi[d] * kb[j * Dqk + d];
          w[j] = s * scale;
          if (w[j] > m) m = w[j];
        }
        for (int64_t j = 0; j < n; ++j) sum += w[j] = exp(w[j] - m);
        for (int64_t d = 0; d < Dv; ++d) {
          double acc = 0;
          for (int64_t j = 0; j < n; ++j) acc += w[j] * vb[j * Dv + d];
          oi[d] = n ? (float)(acc / sum) : 0.0f;
        }
        if (lse) lse[(b * Hq + h) * Sq + i] = n ? (float)(m + log(sum)) : -INFINITY;
      }
  free(w);
  return 0;
}

#endif
