/* flashcheck plugin ABI: validate anyone's attention kernel without rebuilding flashcheck.
 *
 * A shared library exports `flashcheck_get_kernel`, returning its kernels one index at a time
 * (NULL past the last). flashcheck loads it with `flashcheck run --plugin LIB.so`, asks each kernel
 * which problems it supports, runs them on fuzzed problems and judges the output.
 *
 * Tensors are contiguous BHSD in the problem's dtype: q [B,Hq,Sq,Dqk], k [B,Hkv,Skv,Dqk],
 * v [B,Hkv,Skv,Dv], o [B,Hq,Sq,Dv]; lse [B,Hq,Sq] is fp32 (NULL when the kernel declares no LSE).
 * Query head h reads KV head h / (Hq / Hkv). Pointers are host memory for FC_MEMORY_HOST kernels
 * (these run on machines without a GPU) and device memory for FC_MEMORY_DEVICE kernels, which also
 * receive the cudaStream_t to launch on as `stream`. Outputs arrive poisoned (quiet NaNs) and fenced
 * by canaries: every element must be written, nothing outside may be.
 *
 * Versioning: a kernel sets abi_version = FLASHCHECK_PLUGIN_ABI_VERSION and struct_size =
 * sizeof(fc_kernel). flashcheck refuses other major versions and reads only fields it knows.
 */
#ifndef FLASHCHECK_PLUGIN_H
#define FLASHCHECK_PLUGIN_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FLASHCHECK_PLUGIN_ABI_VERSION 1u

typedef enum { FC_DTYPE_F32 = 0, FC_DTYPE_F16 = 1, FC_DTYPE_BF16 = 2 } fc_dtype;
typedef enum { FC_CAUSAL_NONE = 0, FC_CAUSAL_TOP_LEFT = 1, FC_CAUSAL_BOTTOM_RIGHT = 2 } fc_causal;
typedef enum { FC_MEMORY_HOST = 0, FC_MEMORY_DEVICE = 1 } fc_memory;
/* The log base of the LSE the kernel writes; FC_LSE_NONE: it writes none (lse is NULL). */
typedef enum { FC_LSE_BASE_E = 0, FC_LSE_BASE_2 = 1, FC_LSE_NONE = 2 } fc_lse_base;
/* What the kernel writes as LSE of a row that sees no key (its O must be 0 either way). */
typedef enum { FC_EMPTY_LSE_NEG_INF = 0, FC_EMPTY_LSE_POS_INF = 1 } fc_empty_lse;

typedef struct {
  int64_t batch, heads_q, heads_kv, seq_q, seq_kv, head_dim_qk, head_dim_v;
  fc_causal causal;
  double scale; /* softmax scale, already resolved (1/sqrt(Dqk) unless the problem sets one) */
  fc_dtype dtype;
} fc_problem;

typedef struct {
  uint32_t abi_version; /* FLASHCHECK_PLUGIN_ABI_VERSION */
  uint32_t struct_size; /* sizeof(fc_kernel) as the plugin was compiled */
  const char* name;
  fc_memory memory;
  fc_lse_base lse_base;
  fc_empty_lse empty_lse;
  /* Nonzero if the kernel computes this problem. Unsupported problems are skipped, not failed. */
  int (*supports)(const fc_problem* p);
  /* 0 on success; any other value is an error (reported with last_error's text, if given). */
  int (*forward)(const fc_problem* p, const void* q, const void* k, const void* v, void* o, float* lse,
                 void* stream);
  const char* (*last_error)(void); /* may be NULL */
} fc_kernel;

/* The one symbol a plugin exports. */
typedef const fc_kernel* (*fc_get_kernel_fn)(uint32_t index);
#define FLASHCHECK_PLUGIN_ENTRY "flashcheck_get_kernel"

#ifdef __cplusplus
}
#endif
#endif /* FLASHCHECK_PLUGIN_H */
