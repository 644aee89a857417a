/* flashcheck C API: judge an attention forward's output, or fuzz a kernel handed over as a callback,
 * from any language that can call C. Python's `flashcheck` package (python/) uses it through ctypes.
 *
 * Everything goes through flashcheck's one judge (verify/judge.h): the same oracle, row sampling,
 * declared-convention handling and criteria as `flashcheck check`, and fc_fuzz draws its problems
 * with the same generators and case numbering as `flashcheck run`, so a seed names the same
 * problems in both.
 *
 * API 1-2 entries (fc_attention, fc_check, fc_fuzz): tensors are contiguous BHSD host memory in the
 * problem's dtype, as raw bits (bf16 and f16 as 16-bit patterns, f32 as IEEE single):
 * q [B,Hq,Sq,Dqk], k [B,Hkv,Skv,Dqk], v [B,Hkv,Skv,Dv], o [B,Hq,Sq,Dv]; lse [B,Hq,Sq] is always
 * f32. Query head h reads KV head h / (Hq / Hkv). The entries whose names end in 2 (API 3) take
 * problem model 2 — windows, softcap, ALiBi, sinks, varlen, paged caches, any strided layout, fp8 —
 * with every tensor described by an fc_tensor_view (see "Problem model 2" below). API 5 adds the
 * backward pass over the same problem and views ("The backward pass" below).
 *
 * Conventions: functions return an fc_status; on anything but FC_OK, fc_last_error() says what was
 * wrong (per thread). Handles are opaque and freed by their own fc_*_free. Strings returned by an
 * accessor belong to the handle and stay valid until it is freed or changed.
 *
 * Versioning: FLASHCHECK_API_VERSION is the version this header describes; fc_api_version() is the
 * library's. Option structs start with struct_size (set by their *_init function), so a later
 * version can append fields and still read an older caller's struct. A struct's *_init function
 * writes the fields of the API version it was introduced in and never more (a binary built against
 * an older header passes a smaller struct); fields appended later have their own *_init2 that
 * writes the whole struct. A library reads only the fields struct_size covers and takes defaults for
 * the rest, so a caller of API 2 keeps working, unchanged, with this library.
 */
#ifndef FLASHCHECK_H
#define FLASHCHECK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 2: FC_CALLBACK_DECLINE. 3: problem model 2 (fc_attention2, fc_tensor_view, fc_check2,
 * fc_reference, fc_make_inputs2, fc_fuzz2 over fc_kernel_callback2) and the options' API 3 fields;
 * every API 2 entry keeps its behaviour and its structs' API 2 layout. 4: fc_fuzz_options' declared
 * limits (equal_lengths, seq_multiple, nonfinite; fc_fuzz_options_init3), FC_DIST_NONFINITE, and
 * head_dims NULL meaning any head dim. 5: the backward pass (fc_gradients, fc_reference_backward,
 * fc_check_backward and its report); no struct of an earlier version changes. 6: backward fuzzing
 * (fc_fuzz_options.backward with fc_fuzz_options_init4, fc_callback_d_out, fc_make_backward_inputs,
 * fc_inputs_d_out) and the backward report's page (fc_backward_report_html, _set_repro); API 4-5
 * callers' fc_fuzz_options keep their layout and meaning. */
#define FLASHCHECK_API_VERSION 6u
uint32_t fc_api_version(void);

/* Status codes. */
typedef int32_t fc_status;
#define FC_OK 0
#define FC_ERR_INVALID 1     /* a bad argument: null pointer, unknown constant, inconsistent problem */
#define FC_ERR_CANNOT_TEST 2 /* well-formed but untestable: NaN/Inf inputs not allowed, nothing drawn */
#define FC_ERR_ABORTED 3     /* the kernel callback returned FC_CALLBACK_ABORT */
#define FC_ERR_INTERNAL 4    /* anything else (out of memory, ...) */
/* The message of this thread's last failed call ("" if none). */
const char* fc_last_error(void);

/* Element types (the same values as the plugin ABI's fc_dtype). fp8 (OCP e4m3 "fn" and e5m2) are
 * input types of problem model 2 only; FC_I32/FC_I64 are the integer side tensors' (cu_seqlens,
 * block tables) and FC_F64 the type fc_reference writes. */
#define FC_F32 0
#define FC_F16 1
#define FC_BF16 2
#define FC_E4M3 3 /* since API 3 */
#define FC_E5M2 4 /* since API 3 */
#define FC_I32 5  /* since API 3 */
#define FC_I64 6  /* since API 3 */
#define FC_F64 7  /* since API 3 */
/* Causal masks. top_left: key j visible to query i iff j <= i; bottom_right: iff j <= i + Skv - Sq. */
#define FC_MASK_NONE 0
#define FC_MASK_TOP_LEFT 1
#define FC_MASK_BOTTOM_RIGHT 2
/* The log base of a kernel's LSE. A base-2 LSE is converted because it is declared, never guessed. */
#define FC_LSE_LOG_E 0
#define FC_LSE_LOG_2 1
#define FC_LSE_ABSENT 2 /* the kernel writes none (fuzz only; fc_check takes lse = NULL) */
/* What a kernel writes as the LSE of a row that sees no key (its O must be 0 either way). */
#define FC_EMPTY_NEG_INF 0
#define FC_EMPTY_POS_INF 1
/* Input distributions of fuzzed cases. */
#define FC_DIST_NORMAL 0
#define FC_DIST_UNIFORM 1
#define FC_DIST_LARGE 2
#define FC_DIST_OUTLIER_KEYS 3
#define FC_DIST_CONSTANT_ROWS 4
#define FC_DIST_EQUAL_SCORES 5
/* N(0,1) with one NaN or Inf in q, k or v, where the oracle's propagation is every correct kernel's
 * (since API 4): a campaign draws it for a kernel that does not declare nonfinite = 0. */
#define FC_DIST_NONFINITE 6
/* Problem model 2 (API 3). The names differ from the plugin ABI's enumerators (FC_LAYOUT_BHSD, ...)
 * so that both headers can be included in one file; the values are the same. */
/* Where q, k, v, o live: [B,H,S,D], [B,S,H,D] (FlashAttention's native), packed [T,H,D]. */
#define FC_BHSD 0
#define FC_BSHD 1
#define FC_THD 2
/* ALiBi: symmetric -slope*|i + d - j| (FlashAttention; d = Skv - Sq unless top_left), signed
 * slope*(j - i) (FlashInfer, cuDNN). */
#define FC_BIAS_NONE 0
#define FC_BIAS_ALIBI_SYMMETRIC 1
#define FC_BIAS_ALIBI_SIGNED 2
/* How a kernel's LSE relates to ALiBi: exact, or FlashAttention 2's causal slope*j (LSE + slope*(i + d)). */
#define FC_LSE_ALIBI_EXACT 0
#define FC_LSE_ALIBI_KEY_OFFSET 1
/* fp8 descale factors: none, one per tensor [1], one per (batch, KV head) [B, Hkv]. */
#define FC_NO_DESCALE 0
#define FC_DESCALE_PER_TENSOR 1
#define FC_DESCALE_PER_HEAD 2
/* How fc_make_inputs2 draws a paged cache's block table: pages in order, shuffled, or shuffled with
 * later sequences sharing sequence 0's full leading pages (prefix caching). */
#define FC_PAGES_IN_ORDER 0
#define FC_PAGES_SHUFFLED 1
#define FC_PAGES_SHARED 2

/* One attention problem. */
typedef struct {
  int64_t batch, heads_q, heads_kv, seq_q, seq_kv, head_dim_qk, head_dim_v;
  int32_t dtype;  /* FC_F32 | FC_F16 | FC_BF16 */
  int32_t causal; /* FC_MASK_* */
  double scale;   /* softmax scale; NaN: the default 1/sqrt(head_dim_qk). A fuzz callback always gets it resolved. */
} fc_attention;

/* The problem as the one line the CLI prints and accepts back (`--problem "..."`), e.g.
 * "b=1 hq=8 hkv=2 sq=97 skv=113 dqk=128 dv=128 causal=bottom_right dtype=bf16". Writes at most cap
 * bytes (NUL included) and returns the full length, so a short buffer can be retried. */
size_t fc_attention_to_string(const fc_attention* p, char* buf, size_t cap);
fc_status fc_attention_parse(const char* line, fc_attention* out);

/* The inputs flashcheck draws for (problem, distribution, seed), as raw bits in the problem's dtype,
 * into buffers of q/k/v's element counts: what fc_fuzz handed the kernel for that case. */
fc_status fc_make_inputs(const fc_attention* p, int32_t dist, uint64_t seed, void* q, void* k, void* v);
const char* fc_dist_name(int32_t dist); /* "normal", ...; NULL for an unknown value */

/* ---- Judging one output ---- */

typedef struct fc_report fc_report;

typedef struct {
  uint32_t struct_size;           /* sizeof(fc_check_options), set by fc_check_options_init */
  int32_t lse_base;               /* FC_LSE_LOG_E (default) | FC_LSE_LOG_2; read only when lse is given */
  int32_t empty_row_lse;          /* FC_EMPTY_NEG_INF (default) | FC_EMPTY_POS_INF (FlashAttention-2's) */
  int32_t allow_nonfinite_inputs; /* 0 (default): NaN/Inf in q, k or v is FC_ERR_CANNOT_TEST */
  int64_t max_rows;               /* rows per (b, h) checked before sampling (default 4096) */
  int64_t tile_q, tile_kv;        /* the kernel's tiles, to name the worst element's (default 128) */
  int32_t error_maps;             /* nonzero: keep the per-element error maps the HTML page draws */
  /* API 3 (read only when struct_size covers them; fc_check_options_init2 sets them). */
  int32_t reserved_api2_padding;  /* was the struct's tail padding in API 2: never read */
  int32_t alibi_lse;              /* FC_LSE_ALIBI_EXACT (default) | FC_LSE_ALIBI_KEY_OFFSET */
} fc_check_options;
/* API 2's fields only, struct_size = their size: what a binary built against API 2 calls. */
void fc_check_options_init(fc_check_options* opt);
/* Every field of this header's fc_check_options (since API 3). */
void fc_check_options_init2(fc_check_options* opt);

/* Judges o (and lse, or NULL) for problem p against the fp64 oracle. opt NULL: defaults. On FC_OK
 * *out is a new report (pass or fail); free it with fc_report_free. */
fc_status fc_check(const fc_attention* p, const void* q, const void* k, const void* v, const void* o, const float* lse,
                   const fc_check_options* opt, fc_report** out);

/* Where the worst element is (b, h, row, col), its q-tile and the KV tile of its row's last visible
 * key, and its value beside the oracle's. */
typedef struct {
  int64_t b, h, row, col, q_tile, kv_tile;
  double kernel, oracle;
} fc_location;

int32_t fc_report_pass(const fc_report* r);                           /* 1 every criterion passes, else 0 */
int32_t fc_report_failed_count(const fc_report* r);
const char* fc_report_failed_name(const fc_report* r, int32_t i);     /* NULL past the last */
int32_t fc_report_worst(const fc_report* r, fc_location* out);       /* 1 and *out filled, or 0: none */
fc_status fc_report_problem(const fc_report* r, fc_attention* out);
const char* fc_report_text(const fc_report* r);                       /* as `flashcheck check` prints it */
const char* fc_report_json(const fc_report* r);                       /* as `flashcheck check --json` writes it */
const char* fc_report_html(const fc_report* r);                       /* one self-contained page */
/* Sets the command the text, JSON and HTML name as the reproduction. */
fc_status fc_report_set_repro(fc_report* r, const char* command);
void fc_report_free(fc_report* r);

/* ---- Problem model 2 (API 3) ---- */

/* One problem of model 2: plain attention plus the variants kernels ship. Per query row i and key j
 * of sequence b (Sq its queries, Skv its used keys; d = Skv - Sq, or 0 for top_left):
 *   s = scale * q.k (fp8: q, k, v each times its descale first) -> softcap c*tanh(s/c) -> mask
 *   (window: visible iff i + d - left <= j <= i + d + right, inclusive, -1 unbounded; a causal mode
 *   makes right min(right, 0)) -> + ALiBi bias -> softmax with each sink logit in the denominator
 *   (no value). A row that sees no key: O = 0, LSE = -inf.
 * Per-sequence lengths are FlashAttention's int32 arrays, read for batch (+ 1) entries, NULL when
 * the problem has none of that kind:
 *   layout FC_THD: cu_seqlens_q [B+1] (from 0, non-decreasing) and, unless paged, cu_seqlens_k [B+1];
 *   paged (page_size > 0): cache_seqlens [B], the keys each sequence holds in its pages;
 *   seqused_k [B]: the keys each sequence uses, at most those stored (not with a paged cache).
 * seq_q and seq_kv are the dense lengths (Sq of every sequence; Skv stored); where a list gives the
 * lengths they are ignored on input and set to the longest on output. */
typedef struct {
  uint32_t struct_size; /* sizeof(fc_attention2), set by fc_attention2_init */
  int64_t batch, heads_q, heads_kv, seq_q, seq_kv, head_dim_qk, head_dim_v;
  int32_t dtype;           /* of q, k, v: FC_F32 | FC_F16 | FC_BF16 | FC_E4M3 | FC_E5M2 */
  int32_t out_dtype;       /* of o: -1 the default (the dtype; bf16 for fp8 inputs), or FC_F16 for fp8 */
  int32_t causal;          /* FC_MASK_* */
  int32_t layout;          /* FC_BHSD | FC_BSHD | FC_THD: of q and o (and of k, v unless paged) */
  double scale;            /* NaN: 1/sqrt(head_dim_qk). A callback always gets it resolved. */
  int64_t window_left, window_right; /* -1: unbounded; (-1, -1): no window */
  double softcap;          /* c > 0: s -> c*tanh(s/c); 0: none */
  int32_t alibi;           /* FC_BIAS_* */
  int32_t alibi_per_batch; /* slopes [B, Hq] instead of [Hq] */
  int32_t sinks;           /* one logit per query head (fc_tensors.sinks) */
  int32_t descale;         /* FC_NO_DESCALE | FC_DESCALE_PER_TENSOR | FC_DESCALE_PER_HEAD (fp8 only) */
  int64_t page_size;       /* > 0: k, v are a paged cache [num_pages, page_size, Hkv, D] */
  int32_t page_order;      /* FC_PAGES_*: how fc_make_inputs2 draws the block table */
  int32_t reserved;        /* 0 */
  const int32_t* cu_seqlens_q;
  const int32_t* cu_seqlens_k;
  const int32_t* seqused_k;
  const int32_t* cache_seqlens;
} fc_attention2;
/* Plain attention: b=1 hq=hkv=1 sq=skv=1 dqk=dv=64 bf16 bhsd, no variant, default scale. */
void fc_attention2_init(fc_attention2* p);

/* The problem as the one line the CLI prints and accepts back (`--problem "..."`), variants
 * included, e.g. "... layout=thd sq=3,0,17 skv=5,9,20 window=128,0 softcap=30 alibi=symmetric".
 * Writes at most cap bytes (NUL included) and returns the full length; 0 (fc_last_error says why)
 * when p cannot be read. */
size_t fc_attention2_to_string(const fc_attention2* p, char* buf, size_t cap);
/* Parses a line into *out (its struct_size set by the caller). The per-sequence lengths are written
 * to lengths[0..cap) and out's length pointers point there; *needed (unless NULL) is set to the
 * entries the line needs (at most 4*batch + 2): with a smaller cap the call fails, saying so, and
 * can be retried with a larger buffer. */
fc_status fc_attention2_parse(const char* line, fc_attention2* out, int32_t* lengths, size_t cap, size_t* needed);

/* One tensor in host memory: its first element, dtype, shape and strides in elements. Any strided
 * view whose last dimension is contiguous; strides must be non-negative and must not make two
 * elements of it overlap. Shapes, per layout (dims no problem field fixes are free):
 *   q  FC_BHSD [B,Hq,Sq,Dqk]  FC_BSHD [B,Sq,Hq,Dqk]  FC_THD [Tq,Hq,Dqk] (Tq >= cu_seqlens_q[B]: the
 *      rows past it are padding, never read)
 *   k  as q with Hkv and the keys stored (FC_THD: Tk >= cu_seqlens_k[B]); paged:
 *      [num_pages, page_size, Hkv, Dqk], key j of sequence b being slot j % page_size of page
 *      block_table[b][j / page_size]
 *   v  as k with Dv;   o  as q with Dv, in the output dtype;   lse  [B,Hq,Sq], or [Hq,Tq] (FC_THD), FC_F32
 *   alibi_slopes [Hq] or [B,Hq]; sinks [Hq]; descale_q/k/v [1] or [B,Hkv]: FC_F32
 *   block_table [B, max_pages]: FC_I32 or FC_I64 (entries past a sequence's last page are not read) */
typedef struct {
  void* data;         /* inputs are only read. A view with data NULL and ndim 0 is absent; one of
                       * zero elements may have data NULL. */
  int32_t dtype;      /* FC_* element type */
  int32_t ndim;       /* 1..4 */
  int64_t shape[4];
  int64_t strides[4]; /* in elements */
} fc_tensor_view;

/* Every tensor of one problem. */
typedef struct {
  uint32_t struct_size; /* sizeof(fc_tensors), set by fc_tensors_init */
  fc_tensor_view q, k, v, o, lse;
  fc_tensor_view alibi_slopes, sinks, descale_q, descale_k, descale_v, block_table;
} fc_tensors;
void fc_tensors_init(fc_tensors* t); /* every view absent (zeroed) */

/* Judges t->o (and t->lse when present) for problem p against the fp64 oracle, as fc_check does for
 * plain problems: the views are gathered into the logical layout through the storage layer that
 * stages kernels' buffers (reference/storage.h), then the one judge. fp8 inputs are dequantized
 * exactly (x * descale). opt NULL: defaults. Bad input is FC_ERR_INVALID with fc_last_error naming
 * the field: a window bound below -1, a negative or NaN softcap, cu_seqlens_* not starting at 0,
 * decreasing or ending past the tensor's rows, block_table entries negative or past the pages,
 * page_size 0 with a block table, a descale of 0, NaN or Inf, slopes of the wrong length,
 * overlapping or negative strides, a shape or dtype that does not fit. */
fc_status fc_check2(const fc_attention2* p, const fc_tensors* t, const fc_check_options* opt, fc_report** out);

/* The fp64 oracle (every variant, in fp64 with BLAS) for the inputs t->q, t->k, t->v and the side
 * tensors (t->o and t->lse are not read): O into o (FC_F64, o's shape in the problem's layout) and
 * LSE into lse (FC_F64, lse's shape; NULL or data NULL: not wanted), natural log. A row that sees no
 * key has O = 0 and LSE = -inf; NaN/Inf inputs reach exactly the rows that see them. Elements no
 * query row maps to (FC_THD padding rows past cu_seqlens_q[B]) are set to NaN: they are no row's
 * output, and a kernel must not write them. */
fc_status fc_reference(const fc_attention2* p, const fc_tensors* t, const fc_tensor_view* o, const fc_tensor_view* lse);

/* The inputs flashcheck draws for (problem, distribution, seed) in the problem's own storage: q, k,
 * v contiguous in its layout (a paged cache's slots no sequence uses hold NaN) and every side tensor
 * the problem needs, drawn from the seed (block table, slopes, sinks, descales): what fc_fuzz2 hands
 * the kernel for that case. */
typedef struct fc_inputs fc_inputs;
fc_status fc_make_inputs2(const fc_attention2* p, int32_t dist, uint64_t seed, fc_inputs** out);
/* Views of the handle's buffers, valid until fc_inputs_free: *problem (its lengths point into the
 * handle) and *t (o and lse absent), each set only when not NULL (struct_size set by the caller). */
fc_status fc_inputs_get(const fc_inputs* in, fc_attention2* problem, fc_tensors* t);
void fc_inputs_free(fc_inputs* in);

/* The report's problem, variants included (its lengths owned by the report). fc_report_problem
 * refuses a problem with variants, which fc_attention cannot hold. */
fc_status fc_report_problem2(const fc_report* r, fc_attention2* out);

/* ---- Fuzzing a kernel given as a callback ---- */

/* Computes o (and lse, unless the campaign declares FC_LSE_ABSENT, in which case lse is NULL) from
 * q, k, v in host memory, for problem p (scale resolved). The outputs arrive poisoned (quiet NaNs)
 * and fenced: every element must be written, nothing outside them. Returns 0 on success;
 * FC_CALLBACK_DECLINE when the kernel does not support p (the case is skipped, as `flashcheck run`
 * skips a problem a plugin's supports() refuses: never failed, never a step of shrinking;
 * fc_set_callback_error's message is the reason); FC_CALLBACK_ABORT stops the campaign and fc_fuzz
 * returns FC_ERR_ABORTED; any other value is a kernel error (the case fails, with
 * fc_set_callback_error's message if one was set). A decline must depend on the problem alone, not on
 * the input values: a failure is shrunk by re-running smaller problems on fresh inputs. */
typedef int32_t (*fc_kernel_callback)(void* user, const fc_attention* p, const void* q, const void* k, const void* v,
                                      void* o, float* lse);
#define FC_CALLBACK_ABORT (-1)
#define FC_CALLBACK_DECLINE (-2) /* since API version 2 */
/* From inside a callback, before returning nonzero: why it failed. */
void fc_set_callback_error(const char* message);

typedef struct {
  uint32_t struct_size;        /* sizeof(fc_fuzz_options), set by fc_fuzz_options_init */
  const char* name;            /* the kernel's name in reports (default "kernel") */
  int64_t cases;               /* default 200 */
  uint64_t seed;               /* default 1, as `flashcheck run` */
  int64_t max_seq;             /* longest sequence drawn (default 300) */
  double max_work;             /* per-case cap on B*Hq*Sq*Skv*(Dqk+Dv) (default 3e7) */
  int64_t max_rows;            /* rows per (b, h) checked before sampling (default 4096) */
  /* What the kernel declares; problems are drawn from it. */
  uint32_t dtypes;             /* bit mask of 1u << FC_F32 | 1u << FC_F16 | 1u << FC_BF16 (default all) */
  uint32_t causals;            /* bit mask of 1u << FC_MASK_* (default all) */
  const int64_t* head_dims;    /* NULL (default): any; drawn up to 256, the usual grid and values off
                                * the multiples of 8 (since API 4; API 3 drew 16, 32, 40, ..., 256) */
  int64_t num_head_dims;
  int32_t dv_ne_dqk;           /* Dv may differ from Dqk (Dv <= Dqk); default 1 */
  int32_t gqa;                 /* Hq may be a multiple of Hkv; default 1 */
  int32_t lse_base;            /* FC_LSE_LOG_E (default) | FC_LSE_LOG_2 | FC_LSE_ABSENT */
  int32_t empty_row_lse;       /* FC_EMPTY_NEG_INF (default) | FC_EMPTY_POS_INF */
  int64_t tile_q, tile_kv;     /* the kernel's tiles, to name the worst element's (default 128) */
  /* The campaign. */
  int32_t shrink;              /* shrink failures to a minimal failing case (default 1) */
  int32_t fail_fast;           /* stop at the first failing case (default 0) */
  int64_t max_failures;        /* failures kept (and shrunk) with reports (default 5) */
  int32_t progress;            /* one updating line on stderr when it is a terminal (default 0) */
  /* API 3: the problem model 2 variants the kernel computes, for fc_fuzz2 (fc_fuzz refuses them:
   * its callback cannot be handed them). Each defaults to none; problems are drawn within them, as
   * `flashcheck run` draws a kernel's declared variants, with fp8 inputs declared in dtypes
   * (1u << FC_E4M3, 1u << FC_E5M2). Read only when struct_size covers them. */
  int32_t reserved_api2_padding; /* was the struct's tail padding in API 2: never read */
  int32_t windows;             /* sliding windows */
  int32_t softcap;
  uint32_t alibi;              /* 1u << FC_BIAS_ALIBI_SYMMETRIC | 1u << FC_BIAS_ALIBI_SIGNED; 0: none */
  int32_t alibi_per_batch;     /* slopes [B, Hq] as well as [Hq] */
  int32_t sinks;
  uint32_t layouts;            /* 1u << FC_BHSD | FC_BSHD | FC_THD (THD: variable-length batches); 0: bhsd */
  int32_t seqused;             /* seqused_k below the keys stored */
  int32_t paged;               /* K/V in a paged cache */
  const int64_t* page_sizes;   /* with paged: the page sizes taken; NULL: any >= 1 */
  int64_t num_page_sizes;
  uint32_t out_dtypes;         /* fp8 inputs: 1u << FC_BF16 | 1u << FC_F16; 0: bf16 */
  uint32_t descales;           /* 1u << FC_DESCALE_PER_TENSOR | 1u << FC_DESCALE_PER_HEAD; 0: none */
  int32_t alibi_lse;           /* FC_LSE_ALIBI_EXACT (default) | FC_LSE_ALIBI_KEY_OFFSET */
  /* API 4: limits the kernel declares; problems are drawn within them, so a kernel that takes only
   * some shapes declines none (read only when struct_size covers them; fc_fuzz_options_init3). */
  int32_t reserved_api3_padding; /* was the struct's tail padding in API 3: never read */
  int32_t equal_lengths;       /* every sequence has Sq == Skv (keys used); default 0 */
  int32_t nonfinite;           /* 1 (default): the kernel propagates NaN/Inf in q, k, v as the oracle
                                * does (a NaN a row sees makes it NaN), and about one case in ten
                                * carries one (FC_DIST_NONFINITE); 0: finite inputs only */
  int64_t seq_multiple;        /* every sequence length a multiple of this; default 1 */
  /* API 6 (read only when struct_size covers it; fc_fuzz_options_init4). */
  int32_t backward;            /* 1: the callback judges a backward pass on each case (fc_fuzz2 only; default 0).
                                * The problems and case numbering stay the forward's; FC_DIST_NONFINITE's
                                * value goes only where no masked pair meets it, as `flashcheck run
                                * --backward` plants it (in q at a row that sees every key of its
                                * sequence, in k or v only when every row sees every key, else nowhere:
                                * a tile GEMM multiplies masked pairs, 0*Inf, where kernels may differ),
                                * and the callback reads the case's dO with fc_callback_d_out. */
  int32_t reserved_api6_padding; /* the struct's tail padding, named: never read */
} fc_fuzz_options;
/* API 2's fields only, struct_size = their size: what a binary built against API 2 calls. */
void fc_fuzz_options_init(fc_fuzz_options* opt);
/* API 3's fields (struct_size = their size): what a binary built against API 3 calls. */
void fc_fuzz_options_init2(fc_fuzz_options* opt);
/* API 4's fields (struct_size = their size): what a binary built against API 4 or 5 calls. */
void fc_fuzz_options_init3(fc_fuzz_options* opt);
/* Every field of this header's fc_fuzz_options (since API 6). */
void fc_fuzz_options_init4(fc_fuzz_options* opt);

/* A drawn case: the problem (scale NaN when it is the default), the input distribution and seed
 * (fc_make_inputs rebuilds the inputs). */
typedef struct {
  fc_attention problem;
  int32_t dist;
  uint64_t input_seed;
} fc_case;

/* Case `index` of the campaign opt describes: the very case `flashcheck run --seed S` draws for a
 * kernel declaring the same capabilities (same dtypes, head dims, masks, GQA, Dv != Dqk, max_seq). */
fc_status fc_draw_case(const fc_fuzz_options* opt, int64_t index, fc_case* out);

typedef struct fc_campaign fc_campaign;

/* skipped: cases the kernel declined (FC_CALLBACK_DECLINE). With passed + failed == 0 nothing was
 * tested: `flashcheck run` exits kCannotTest (125) for that, never 0. */
typedef struct {
  int64_t cases, passed, failed, skipped;
  double worst_cosine; /* over judged cases; NaN when none was judged */
} fc_campaign_summary;

/* Runs the campaign: each case's inputs drawn, the callback run on fenced, poisoned buffers, the
 * output judged; failures shrunk (batch, heads, sequence lengths, head dims, distribution). On FC_OK
 * *out is a new campaign, whether or not cases failed; free it with fc_campaign_free. */
fc_status fc_fuzz(fc_kernel_callback kernel, void* user, const fc_fuzz_options* opt, fc_campaign** out);
void fc_campaign_get_summary(const fc_campaign* c, fc_campaign_summary* out);
int64_t fc_campaign_failure_count(const fc_campaign* c); /* failures kept, shrunk */
/* Failure i: its (shrunk) case and report; the report belongs to the campaign. */
fc_status fc_campaign_failure(fc_campaign* c, int64_t i, fc_case* out_case, fc_report** out_report);
const char* fc_campaign_json(const fc_campaign* c); /* summary and every kept failure's report */
/* What `flashcheck run` prints for the failures: every failing case as drawn, and each kept one
 * shrunk. Its "reproduce" lines name the CLI, which cannot run a callback: replay a failure from its
 * fc_case (fc_make_inputs) instead. */
const char* fc_campaign_log(const fc_campaign* c);
void fc_campaign_free(fc_campaign* c);

/* ---- Fuzzing a problem model 2 kernel (API 3) ---- */

/* Computes o (and lse unless the campaign declares FC_LSE_ABSENT) for problem p (scale resolved, its
 * lengths valid during the call) from the tensors t describes: q, k, v and o in the layout p names
 * (a paged cache as pages), lse, and the side tensors p uses (the others absent). o and lse arrive
 * poisoned (quiet NaNs); q, k, v and the side tensors are read-only. Return values as
 * fc_kernel_callback's (0, FC_CALLBACK_DECLINE, FC_CALLBACK_ABORT, any other: a kernel error). */
typedef int32_t (*fc_kernel_callback2)(void* user, const fc_attention2* p, const fc_tensors* t);

/* A drawn case of problem model 2 (the problem last: it may grow; set its struct_size). */
typedef struct {
  int32_t dist;
  uint64_t input_seed;
  fc_attention2 problem;
} fc_case2;

/* Case `index` of the campaign opt describes, its lengths written to lengths[0..cap) as
 * fc_attention2_parse writes them (*needed: the entries needed). */
fc_status fc_draw_case2(const fc_fuzz_options* opt, int64_t index, fc_case2* out, int32_t* lengths, size_t cap,
                        size_t* needed);

/* fc_fuzz for a callback of problem model 2: the problems are drawn within the variants opt allows
 * (its API 3 fields) and the case, its report and shrinking are as fc_fuzz's. A variant the options
 * allow that this build's campaign does not draw is FC_ERR_CANNOT_TEST naming it, never a campaign
 * that silently leaves it out. */
fc_status fc_fuzz2(fc_kernel_callback2 kernel, void* user, const fc_fuzz_options* opt, fc_campaign** out);
/* Failure i as a problem model 2 case (its lengths owned by the campaign) and its report. */
fc_status fc_campaign_failure2(fc_campaign* c, int64_t i, fc_case2* out_case, fc_report** out_report);

/* ---- The backward pass (API 5) ---- */

/* The gradients of one problem of model 2, beside its fc_tensors (which hold q, k, v, o, lse and the
 * side tensors, as for fc_check2). Every view is placed as its forward tensor is, in the problem's
 * layout (flashcheck.h's shapes above): d_out (dO, the gradient of the loss with respect to o) as o,
 * in o's dtype; dq as q, dk as k, dv as v (a paged cache's [num_pages, page_size, Hkv, D] with k's
 * pages); dsinks [Hq]. dQ, dK, dV are with respect to the values the forward computes with (fp8:
 * x * descale); GQA sums dK and dV over each KV head's query group. */
typedef struct {
  uint32_t struct_size; /* sizeof(fc_gradients), set by fc_gradients_init */
  fc_tensor_view d_out;
  fc_tensor_view dq, dk, dv, dsinks;
} fc_gradients;
void fc_gradients_init(fc_gradients* g); /* every view absent (zeroed) */

/* The fp64 backward oracle (reference/naive_backward.h: every variant of the forward oracle, fp64
 * BLAS) for the inputs t->q, t->k, t->v, the side tensors and g->d_out (t->o and t->lse are not
 * read): dQ, dK, dV into g->dq, g->dk, g->dv, and the sinks' gradient into g->dsinks, each FC_F64
 * (absent: not wanted; dsinks only for a problem with sinks). Rows of the problem's storage that no
 * sequence reads (FC_THD padding past cu_seqlens_*[B], a paged cache's unused pages and slots) get
 * gradient 0; a cache slot that several sequences read gets the sum of their gradients. A row that
 * sees no key contributes nothing (its dQ is 0); NaN/Inf inputs or dO reach exactly the gradients
 * of the pairs that see them. Bad input is FC_ERR_INVALID naming the view, as fc_reference's: a
 * d_out of the wrong shape or dtype, an output view of the wrong shape or not FC_F64, an output view
 * sharing memory with an input or another output. */
fc_status fc_reference_backward(const fc_attention2* p, const fc_tensors* t, const fc_gradients* g);

typedef struct fc_backward_report fc_backward_report;

/* Judges a backward kernel's g->dq, g->dk, g->dv (in the gradient dtype: the input dtype, or o's
 * for fp8 inputs) and g->dsinks (FC_F32 [Hq]; absent: the kernel computes none, not judged) for the
 * inputs t->q, t->k, t->v, the side tensors and dO g->d_out, against the fp64 backward oracle with
 * verify/backward_criteria.h's criteria per gradient (unwritten, NaN/Inf positions, exact zeros of
 * rows without keys and keys no row sees, cosine, rel_l2, the share of significant elements past
 * 1 ULP, baseline-relative error against same-dtype FlashAttention-2 backward replicas, whole and
 * per row). t->o (and t->lse), the forward output the kernel's backward
 * was given, is judged as fc_check2 judges it, reported apart; absent: no forward verdict. opt: as
 * fc_check2's (NULL: defaults); allow_nonfinite_inputs covers dO too, error_maps and the tiles
 * serve the gradients as well (since API 6). Bad input is FC_ERR_INVALID
 * naming the view: dO or a gradient of the wrong shape or dtype, a gradient sharing memory with q,
 * k, v, o, lse, dO, a side tensor or another gradient (packed dqkv views that interleave without
 * sharing an element are fine); FC_ERR_CANNOT_TEST for NaN/Inf in q, k, v or dO unless allowed, and
 * for a paged cache whose sequences share a slot (its gradient is their sum, which the per-sequence
 * criteria cannot judge yet). On FC_OK *out is a new report (pass or fail). */
fc_status fc_check_backward(const fc_attention2* p, const fc_tensors* t, const fc_gradients* g, const fc_check_options* opt,
                            fc_backward_report** out);

/* 1 when every gradient's criteria pass and the forward (when judged) passes, else 0. */
int32_t fc_backward_report_pass(const fc_backward_report* r);
/* Failed criteria as "dk: baseline_relative", gradients in order, then the forward's as
 * "forward: cosine". NULL past the last. */
int32_t fc_backward_report_failed_count(const fc_backward_report* r);
const char* fc_backward_report_failed_name(const fc_backward_report* r, int32_t i);
/* The gradients judged, in order "dq", "dk", "dv" (and "dsinks" when given). */
int32_t fc_backward_report_gradient_count(const fc_backward_report* r);
const char* fc_backward_report_gradient_name(const fc_backward_report* r, int32_t i); /* NULL past the last */
int32_t fc_backward_report_gradient_pass(const fc_backward_report* r, int32_t i);
/* Gradient i's worst element: dq (b, query head, row, col), dk/dv (b, KV head, key, col), dsinks
 * (0, query head, 0, 0); b is the sequence. q_tile and kv_tile are -1. 1 and *out filled, or 0. */
int32_t fc_backward_report_gradient_worst(const fc_backward_report* r, int32_t i, fc_location* out);
/* The forward's report (owned by r, valid until it is freed), or NULL when o was absent. */
const fc_report* fc_backward_report_forward(const fc_backward_report* r);
const char* fc_backward_report_text(const fc_backward_report* r); /* the backward verdict as text */
const char* fc_backward_report_json(const fc_backward_report* r); /* {"pass", "backward", "forward" (or null)} */
fc_status fc_backward_report_problem2(const fc_backward_report* r, fc_attention2* out);
void fc_backward_report_free(fc_backward_report* r);

/* ---- Fuzzing a backward pass (API 6) ---- */

/* A campaign of fc_fuzz2 with fc_fuzz_options.backward = 1: the callback runs its kernel's backward
 * on the case's inputs and dO, judges the gradients itself (fc_check_backward) and returns nonzero
 * when they fail, so the case fails and shrinks as a wrong output does; the o (and lse) it writes
 * are judged as in any fc_fuzz2 case. fc_fuzz refuses the option (its callback has no dO to read).
 *
 * From inside such a callback: the case's dO in *out, a read-only view valid until the callback
 * returns: o's shape in the problem's layout, contiguous, in o's dtype. It is drawn from the case's
 * input seed by the one generator `flashcheck run --backward` and the goldens' golden_do use
 * (reference/inputs.h: make_d_out, N(0,1) rounded to o's dtype), so a case has one dO wherever it
 * is drawn. Rows no query maps to (FC_THD padding) hold NaN. FC_ERR_INVALID outside the callback of
 * a backward campaign. */
fc_status fc_callback_d_out(fc_tensor_view* out);
/* fc_make_inputs2 for a backward campaign's case: the inputs fc_fuzz2 hands its callback for
 * (problem, dist, seed), FC_DIST_NONFINITE's value placed as fc_fuzz_options.backward says, and
 * the case's dO (fc_inputs_d_out). */
fc_status fc_make_backward_inputs(const fc_attention2* p, int32_t dist, uint64_t seed, fc_inputs** out);
/* The dO of a handle made by fc_make_backward_inputs, as fc_callback_d_out gives it (valid until
 * fc_inputs_free); FC_ERR_INVALID for a handle of fc_make_inputs2, which draws none. */
fc_status fc_inputs_d_out(const fc_inputs* in, fc_tensor_view* out);

/* One self-contained HTML page of a backward report, as `flashcheck check --html` draws a file with
 * gradients: the forward's sections when o was judged (else a line saying it was not), then each
 * gradient's criteria, worst element with its tiles and, when fc_check_options.error_maps was set,
 * a heatmap of its worst head. */
const char* fc_backward_report_html(const fc_backward_report* r);
/* Sets the command the page, the text and the forward's report name as the reproduction. */
fc_status fc_backward_report_set_repro(fc_backward_report* r, const char* command);

#ifdef __cplusplus
}
#endif
#endif /* FLASHCHECK_H */
