/* flashcheck plugin ABI: validate anyone's attention kernel without rebuilding flashcheck.
 *
 * Two generations live in this header. ABI 1 (`flashcheck_get_kernel`, fc_kernel) describes plain
 * attention on contiguous BHSD tensors; its plugins load unchanged and are given plain problems
 * only. ABI 2 (`flashcheck_get_kernel2`, fc_kernel2, below the ABI 1 part) describes problem model 2:
 * sliding windows, softcap, ALiBi, sinks, variable-length batches, paged KV caches, strided
 * layouts and fp8 inputs, with room for a backward pass. A library may export both entries (one
 * for older flashcheck builds); a flashcheck that knows ABI 2 then uses ABI 2.
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
 * The declared space (optional, 1.1): without it a campaign draws any head dim up to 256 (the
 * multiples of 8 and values off them), every dtype and
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

/* E4M3 and E5M2 (OCP fp8, e4m3 "fn": no infinities) appear only in ABI 2 problems, as input dtypes. */
typedef enum { FC_DTYPE_F32 = 0, FC_DTYPE_F16 = 1, FC_DTYPE_BF16 = 2, FC_DTYPE_E4M3 = 3, FC_DTYPE_E5M2 = 4 } fc_dtype;
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
  const int64_t* head_dims; /* the head dims (Dqk, and Dv ≤ Dqk) computed, ascending; none: any */
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


/* ==== ABI 2: problem model 2 ================================================================== */

#define FLASHCHECK_PLUGIN_ABI2_VERSION 2u
#define FLASHCHECK_PLUGIN_ENTRY2 "flashcheck_get_kernel2"

/* Where a kernel's q, k, v, o live. bhsd [B,H,S,D]; bshd [B,S,H,D] (FlashAttention's native);
 * thd: sequences packed one after another, [total, H, D], addressed through cu_seqlens. */
typedef enum { FC_LAYOUT_BHSD = 0, FC_LAYOUT_BSHD = 1, FC_LAYOUT_THD = 2 } fc_layout;
/* The ALiBi bias added after masking: symmetric −slope·|i + d − j| (FlashAttention), signed
 * slope·(j − i) (FlashInfer, cuDNN); d = Skv − Sq unless the causal mode is top-left (then 0). */
typedef enum { FC_ALIBI_NONE = 0, FC_ALIBI_SYMMETRIC = 1, FC_ALIBI_SIGNED = 2 } fc_alibi;
/* fp8 descale factors: none (1), one per tensor [1], one per (batch, KV head) [B, Hkv]. */
typedef enum { FC_DESCALE_NONE = 0, FC_DESCALE_TENSOR = 1, FC_DESCALE_HEAD = 2 } fc_descale;
/* How the kernel counts a window's left bound. flashcheck's (FlashAttention's): key j is visible to
 * query i iff i + d − left <= j <= i + d + right. LEFT_EXCLUSIVE (cuDNN's left_bound, xformers'
 * LocalAttentionMask): the kernel is handed left + 1 and sees j > i + d − left_given. */
typedef enum { FC_WINDOW_INCLUSIVE = 0, FC_WINDOW_LEFT_EXCLUSIVE = 1 } fc_window_convention;
/* How the kernel's LSE relates to ALiBi. EXACT: the LSE of the biased scores. KEY_OFFSET
 * (FlashAttention 2's causal kernels add slope·j): LSE + slope·(i + d) under a causal mode, the
 * same O. Declared, so flashcheck converts it; O is always judged strictly. */
typedef enum { FC_ALIBI_LSE_EXACT = 0, FC_ALIBI_LSE_KEY_OFFSET = 1 } fc_alibi_lse;

/* The problem, as one struct every kernel reads (its lengths, variants and layout). Per sequence b
 * the kernel finds its lengths in the arguments: cu_seqlens / seqused / cache_seqlens. */
typedef struct {
  uint32_t struct_size;    /* sizeof(fc_problem2) as flashcheck was compiled */
  int64_t batch, heads_q, heads_kv, head_dim_qk, head_dim_v;
  int64_t max_seqlen_q;    /* dense: every sequence's Sq; varlen: the longest */
  int64_t max_seqlen_kv;   /* dense: the keys stored per sequence (Skv); varlen/paged: the longest */
  int64_t total_q, total_kv; /* thd: cu_seqlens_q[B], cu_seqlens_kv[B] (rows past them are padding) */
  fc_dtype dtype;          /* q, k, v */
  fc_dtype out_dtype;      /* o: dtype, or bf16/f16 for fp8 inputs */
  fc_causal causal;
  double scale;            /* resolved: 1/sqrt(Dqk) unless the problem sets one */
  int64_t window_left, window_right; /* -1: unbounded; in the kernel's declared convention */
  double softcap;          /* c > 0: s -> c·tanh(s/c) after the scale, before masks; 0: none */
  fc_alibi alibi;
  int32_t alibi_per_batch; /* slopes [B, Hq] instead of [Hq] */
  int32_t has_sinks;       /* one logit per query head joins every row's softmax denominator */
  fc_layout layout;        /* of q and o (and of k, v unless paged) */
  int32_t varlen;          /* thd: cu_seqlens_q (and cu_seqlens_kv unless paged) */
  int32_t has_seqused_kv;  /* seqused_kv: keys used per sequence, below those stored */
  int64_t page_size;       /* > 0: k, v are a paged cache [num_pages, page_size, Hkv, D] */
  int64_t num_pages, max_pages_per_seq; /* supports() is asked before the cache exists: num_pages 0 */
  fc_descale descale;
} fc_problem2;

/* One tensor: its first element and the element strides of its rows; the last dimension (D) is
 * contiguous. Rows are addressed (outer, seq, head):
 *   q, o, k, v dense:   outer = sequence b, seq = position      (bhsd, bshd)
 *   q, o, k, v packed:  outer unused (0), seq = token cu_seqlens[b] + i   (thd)
 *   k, v paged:         outer = page, seq = slot in the page: key j of sequence b is slot j % P of
 *                       page block_table[b][j / P]
 *   lse: [B, Hq, Sq] dense (outer = b, head = h, seq = i), [Hq, total_q] packed (head, seq = token).
 * numel is the number of elements the buffer spans (padding and unused pages included); flashcheck
 * fences it with canaries and fills what no row maps to with NaN (inputs) or poison (outputs). */
typedef struct {
  void* data;
  int64_t stride_outer, stride_seq, stride_head;
  int64_t numel;
} fc_tensor;

/* Everything one forward call reads and writes. Pointers the problem does not use are NULL.
 * Integer side tensors are int32 (as FlashAttention's), float ones fp32; all in the kernel's
 * declared memory, like the tensors. */
typedef struct {
  uint32_t struct_size;
  fc_tensor q, k, v, o, lse;      /* lse.data NULL when the kernel declares no LSE */
  const int32_t* cu_seqlens_q;    /* [B + 1] from 0 (varlen) */
  const int32_t* cu_seqlens_kv;   /* [B + 1] from 0 (varlen, not paged) */
  const int32_t* seqused_kv;      /* [B] (has_seqused_kv) */
  const int32_t* block_table;     /* [B, max_pages_per_seq] (paged) */
  const int32_t* cache_seqlens;   /* [B] keys per sequence (paged) */
  const float* alibi_slopes;      /* [Hq] or [B, Hq] */
  const float* sinks;             /* [Hq] */
  const float* descale_q;         /* [1] or [B, Hkv] (fp8) */
  const float* descale_k;
  const float* descale_v;
  void* stream;                   /* cudaStream_t for device kernels */
} fc_forward_args;

/* The backward pass (`flashcheck run --backward`): gradients of the forward above for a given dO.
 * It is called after the kernel's own forward on the same problem, with that forward's arguments
 * (q, k, v, o and lse as the forward read and wrote them, side tensors included; all read-only).
 * dout has o's layout and dtype; dq, dk, dv have the layouts of q, k, v and the inputs' dtype (fp8
 * inputs: o's); they arrive poisoned and fenced like o: every element must be written (dK and dV of
 * a KV head summed over its query group), nothing outside. dsinks [Hq] fp32 when has_sinks. With
 * `deterministic` set, a kernel that declares FC_KERNEL_DETERMINISTIC_BACKWARD must give the same
 * bits on every call. A kernel without one leaves fc_kernel2::backward NULL; the layout of this
 * struct may still grow at its end (struct_size says how much of it flashcheck filled). */
typedef struct {
  uint32_t struct_size;
  fc_tensor dout, dq, dk, dv;     /* the layouts of o, q, k, v */
  float* dsinks;                  /* [Hq] when has_sinks, else NULL */
  int32_t deterministic;          /* nonzero: bitwise equal gradients over repeats asked for */
} fc_backward_args;

/* Variants a kernel computes (fc_space2::variant_mask). */
#define FC_VARIANT_WINDOW (1u << 0)
#define FC_VARIANT_SOFTCAP (1u << 1)
#define FC_VARIANT_ALIBI_PER_BATCH (1u << 2) /* slopes [B, Hq] (the forms: alibi_mask) */
#define FC_VARIANT_SINKS (1u << 3)
#define FC_VARIANT_SEQUSED (1u << 4)
#define FC_VARIANT_PAGED (1u << 5)

/* What the kernel computes, for the campaign's generators and for refusing what it does not:
 * every field zero / NULL declares nothing beyond plain attention in bhsd (then only plain
 * problems are drawn, and supports() still decides). */
typedef struct {
  uint32_t struct_size;      /* sizeof(fc_space2) as the plugin was compiled */
  /* As fc_space (1.1). */
  uint32_t dtype_mask;       /* 1u << FC_DTYPE_* of the inputs; 0: f32, f16, bf16 */
  uint32_t causal_mask;
  int32_t no_gqa;
  int32_t dv_eq_dqk;
  int64_t max_seq;
  const int64_t* head_dims;
  uint32_t n_head_dims;
  const int64_t* head_dim_pairs;
  uint32_t n_head_dim_pairs;
  const fc_tile* tiles;
  uint32_t n_tiles;
  /* Problem model 2. */
  uint32_t layout_mask;      /* 1u << FC_LAYOUT_*; 0: bhsd only. THD means variable-length batches. */
  uint32_t variant_mask;     /* FC_VARIANT_* */
  uint32_t alibi_mask;       /* 1u << FC_ALIBI_SYMMETRIC | 1u << FC_ALIBI_SIGNED; 0: no ALiBi */
  uint32_t out_dtype_mask;   /* fp8 inputs: 1u << FC_DTYPE_BF16 | FC_DTYPE_F16; 0: bf16 */
  uint32_t descale_mask;     /* 1u << FC_DESCALE_*; 0: none */
  const int64_t* page_sizes; /* with FC_VARIANT_PAGED: the page sizes taken; NULL: any >= 1 */
  uint32_t n_page_sizes;
  fc_window_convention window_convention;
  fc_alibi_lse alibi_lse;
  /* 2.1: limits (read only when struct_size covers them; zero declares none). */
  uint32_t limit_mask;       /* FC_LIMIT_* */
  int64_t seq_multiple;      /* every sequence length (queries, keys stored and used) a multiple of this; 0, 1: any */
} fc_space2;

/* Limits a kernel declares (fc_space2::limit_mask, ABI 2.1): campaigns draw within them. */
#define FC_LIMIT_EQUAL_LENGTHS (1u << 0) /* every sequence has as many keys (used) as queries */
/* NaN or Inf in q, k or v is not propagated as flashcheck's oracle does (a NaN a row sees makes
 * that row NaN; a key a row does not see never reaches it): campaigns draw finite inputs only.
 * Without it, some cases carry one NaN or Inf. */
#define FC_LIMIT_FINITE_INPUTS (1u << 1)

/* Kernel flags (fc_kernel2::flags). */
#define FC_KERNEL_DETERMINISTIC_BACKWARD (1u << 0) /* backward is bitwise reproducible when asked */

typedef struct {
  uint32_t abi_version;    /* FLASHCHECK_PLUGIN_ABI2_VERSION */
  uint32_t struct_size;    /* sizeof(fc_kernel2) as the plugin was compiled */
  const char* name;
  fc_memory memory;
  fc_lse_base lse_base;
  fc_empty_lse empty_lse;
  /* Nonzero if the kernel computes this problem. Unsupported problems are skipped, not failed. */
  int (*supports)(const fc_problem2* p);
  /* 0 on success; any other value is an error (reported with last_error's text, if given). */
  int (*forward)(const fc_problem2* p, const fc_forward_args* a);
  const char* (*last_error)(void); /* may be NULL */
  const fc_space2* space;          /* may be NULL: plain attention in bhsd only */
  /* The backward pass, or NULL: dq, dk, dv (and dsinks) from dout, q, k, v, o, lse (fc_backward_args).
   * Its problems are those of the forward's declared space; supports() still decides. */
  int (*backward)(const fc_problem2* p, const fc_forward_args* a, const fc_backward_args* g);
  uint32_t flags;                  /* FC_KERNEL_* */
} fc_kernel2;

/* struct_size of a plugin built against ABI 2.0: the least flashcheck accepts. A later 2.x adds
 * fields at the end of these structs; flashcheck reads a field only when struct_size covers it. */
#define FC_KERNEL2_SIZE_2_0 (offsetof(fc_kernel2, flags) + sizeof(uint32_t))
#define FC_SPACE2_SIZE_2_0 (offsetof(fc_space2, alibi_lse) + sizeof(fc_alibi_lse))

/* The ABI 2 entry: kernels one index at a time, NULL past the last. */
typedef const fc_kernel2* (*fc_get_kernel2_fn)(uint32_t index);

#ifdef __cplusplus
}
#endif
#endif /* FLASHCHECK_PLUGIN_H */
