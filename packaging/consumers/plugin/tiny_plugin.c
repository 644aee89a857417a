/* Two f32 kernels through the plugin ABI (flashcheck_plugin.h, ABI 1): tiny_naive computes plain
 * attention; tiny_unscaled forgets the softmax scale, a bug flashcheck must catch. Built out of tree
 * against the installed headers by packaging/install_test.py. */
#include <stddef.h>
#include <stdint.h>

#include "flashcheck_plugin.h"
#include "naive_attention.h"

static int f32_only(const fc_problem* p) { return p->dtype == FC_DTYPE_F32; }

static int forward(const fc_problem* p, const void* q, const void* k, const void* v, void* o, float* lse,
                   double scale) {
  return naive_attention(p->batch, p->heads_q, p->heads_kv, p->seq_q, p->seq_kv, p->head_dim_qk, p->head_dim_v,
                         (int)p->causal, scale, q, k, v, o, lse);
}

static int naive(const fc_problem* p, const void* q, const void* k, const void* v, void* o, float* lse, void* stream) {
  (void)stream;
  return forward(p, q, k, v, o, lse, p->scale);
}

static int unscaled(const fc_problem* p, const void* q, const void* k, const void* v, void* o, float* lse,
                    void* stream) {
  (void)stream;
  return forward(p, q, k, v, o, lse, 1.0);
}

/* Declaring f32 makes the campaign draw only problems these kernels run. */
static const fc_space space = {.struct_size = sizeof(fc_space), .dtype_mask = 1u << FC_DTYPE_F32};

static const fc_kernel kernels[] = {
    {FLASHCHECK_PLUGIN_ABI_VERSION, sizeof(fc_kernel), "tiny_naive", FC_MEMORY_HOST, FC_LSE_BASE_E,
     FC_EMPTY_LSE_NEG_INF, f32_only, naive, NULL, &space},
    {FLASHCHECK_PLUGIN_ABI_VERSION, sizeof(fc_kernel), "tiny_unscaled", FC_MEMORY_HOST, FC_LSE_BASE_E,
     FC_EMPTY_LSE_NEG_INF, f32_only, unscaled, NULL, &space},
};

const fc_kernel* flashcheck_get_kernel(uint32_t i) {
  return i < sizeof kernels / sizeof kernels[0] ? &kernels[i] : NULL;
}
