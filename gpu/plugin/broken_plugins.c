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

const fc_kernel* flashcheck_get_kernel(uint32_t index) { return index < 3 ? &kBroken[index] : NULL; }
