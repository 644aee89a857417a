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
 * sizeof(fc_kernel). flashcheck refuses other major versions and reads only fields it knows: a
 * field added later (`space`, 1.1) is read only when struct_size covers it, so a plugin built
 * against 1.0 loads unchanged and one built against 1.1 loads in a 1.0 flashcheck.
 *
 * The declared space (optional, 1.1): without it a campaign draws head dims 8..256, every dtype and
 * mode, and relies on supports() to skip what the kernel lacks (wasted cases), and it aims lengths
 * at 128×128 tiles. A kernel that declares its dtypes, head dims and tiles gets the same campaign a
 * built-in kernel gets: problems it can run, lengths on its own tile boundaries (partial last
 * blocks, fully masked causal blocks). supports() still decides; the space only steers generation.
 */
#ifndef FLASHCHECK_PLUGIN_H
#define FLASHCHECK_PLUGIN_H

#include <stddef.h>
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

/* One row of the tile table: the (block_q, block_kv) tile the kernel uses up to head_dim (a head
 * dim without a row uses the row of the next larger one, or the last). causal: -1 any mode, 0 the
 * non-causal tile, 1 the causal tile (for kernels that tile the modes apart). Rows ascending. */
typedef struct {
  int64_t head_dim;
  int32_t causal;
  int32_t block_q, block_kv;
} fc_tile;

/* What the kernel computes, for the campaign's generators (ABI 1.1). Zero / NULL means "not
 * declared" in every field, so a zero-initialised struct declares nothing. */
typedef struct {
  uint32_t struct_size;     /* sizeof(fc_space) as the plugin was compiled */
  uint32_t dtype_mask;      /* bit (1u << FC_DTYPE_*) per dtype computed; 0: every dtype */
  uint32_t causal_mask;     /* bit (1u << FC_CAUSAL_*) per mode computed; 0: every mode */
  int32_t no_gqa;           /* nonzero: only heads_q == heads_kv */
  int32_t dv_eq_dqk;        /* nonzero: only head_dim_v == head_dim_qk */
  int64_t max_seq;          /* longest seq_q / seq_kv; 0: no limit */
  const int64_t* head_dims; /* the head dims (Dqk, and Dv ≤ Dqk) computed, ascending */
  uint32_t n_head_dims;
  const int64_t* head_dim_pairs; /* n_head_dim_pairs (Dqk, Dv) pairs, 2 values each: the only ones compiled */
  uint32_t n_head_dim_pairs;
  const fc_tile* tiles;
  uint32_t n_tiles;
} fc_space;

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
  /* 1.1: the space the kernel computes, or NULL (see "The declared space" above). */
  const fc_space* space;
} fc_kernel;

/* struct_size of a plugin built against ABI 1.0 (no `space`): the least flashcheck accepts. */
#define FC_KERNEL_SIZE_1_0 (offsetof(fc_kernel, last_error) + sizeof(const char* (*)(void)))

/* The one symbol a plugin exports. */
typedef const fc_kernel* (*fc_get_kernel_fn)(uint32_t index);
#define FLASHCHECK_PLUGIN_ENTRY "flashcheck_get_kernel"

#ifdef __cplusplus
}
#endif
#endif /* FLASHCHECK_PLUGIN_H */
