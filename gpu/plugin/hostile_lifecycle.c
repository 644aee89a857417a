/* A plugin library that misbehaves while it is loaded or unloaded. A constructor or destructor
 * runs for the whole library, so each behaviour is its own .so (gpu/CMakeLists.txt builds one per
 * HOSTILE_* definition), named lifecycle_<behaviour>:
 *   HOSTILE_CTOR_SEGV    a constructor segfaults          flashcheck: cannot test (125), named
 *   HOSTILE_CTOR_HANG    a constructor never returns      cannot test after the load timeout
 *   HOSTILE_CTOR_EXIT    a constructor calls exit(0)      cannot test
 *   HOSTILE_CTOR_PRINTF  a constructor prints to stdout   loads; the text goes to stderr, marked
 *   HOSTILE_DTOR_EXIT0   a destructor calls _exit(0)      its kernels fail (exit 1), never exit 0
 *   HOSTILE_DTOR_SEGV    a destructor segfaults           its kernels fail (exit 1)
 * Each library exports HOSTILE_NAME (a correct kernel) and HOSTILE_NAME "_wrong" (all zeros). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "flashcheck_plugin.h"

const fc_kernel* flashcheck_example_kernel(void);

static int* volatile g_null;
static volatile uint64_t g_spin;

__attribute__((constructor)) static void on_load(void) {
#if defined(HOSTILE_CTOR_SEGV)
  *g_null = 1;
#elif defined(HOSTILE_CTOR_HANG)
  for (;;) ++g_spin;
#elif defined(HOSTILE_CTOR_EXIT)
  exit(0);
#elif defined(HOSTILE_CTOR_PRINTF)
  printf("hello from %s's constructor\n", HOSTILE_NAME);
  fflush(stdout);
#endif
}

__attribute__((destructor)) static void on_unload(void) {
#if defined(HOSTILE_DTOR_EXIT0)
  _exit(0);
#elif defined(HOSTILE_DTOR_SEGV)
  *g_null = 1;
#endif
}

static int supports(const fc_problem* p) { return flashcheck_example_kernel()->supports(p); }
static int correct(const fc_problem* p, const void* q, const void* k, const void* v, void* o, float* lse, void* s) {
  return flashcheck_example_kernel()->forward(p, q, k, v, o, lse, s);
}
static int wrong(const fc_problem* p, const void* q, const void* k, const void* v, void* o, float* lse, void* s) {
  int rc = correct(p, q, k, v, o, lse, s);
  memset(o, 0, (size_t)(p->batch * p->heads_q * p->seq_q * p->head_dim_v * (p->dtype == FC_DTYPE_F32 ? 4 : 2)));
  return rc;
}

static const fc_kernel kKernels[] = {
    {FLASHCHECK_PLUGIN_ABI_VERSION, sizeof(fc_kernel), HOSTILE_NAME, FC_MEMORY_HOST, FC_LSE_BASE_2, FC_EMPTY_LSE_NEG_INF,
     supports, correct, 0, 0},
    {FLASHCHECK_PLUGIN_ABI_VERSION, sizeof(fc_kernel), HOSTILE_NAME "_wrong", FC_MEMORY_HOST, FC_LSE_BASE_2,
     FC_EMPTY_LSE_NEG_INF, supports, wrong, 0, 0},
};

const fc_kernel* flashcheck_get_kernel(uint32_t index) { return index < 2 ? &kKernels[index] : NULL; }
