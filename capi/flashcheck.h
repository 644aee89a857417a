/* flashcheck C API: judge an attention forward's output, or fuzz a kernel handed over as a callback,
 * from any language that can call C. Python's `flashcheck` package (python/) uses it through ctypes.
 *
 * Everything goes through flashcheck's one judge (verify/judge.h): the same oracle, row sampling,
 * declared-convention handling and criteria as `flashcheck check`, and fc_fuzz draws its problems
 * with the same generators and case numbering as `flashcheck run`, so a seed names the same
 * problems in both.
 *
 * Tensors are contiguous BHSD host memory in the problem's dtype, as raw bits (bf16 and f16 as
 * 16-bit patterns, f32 as IEEE single): q [B,Hq,Sq,Dqk], k [B,Hkv,Skv,Dqk], v [B,Hkv,Skv,Dv],
 * o [B,Hq,Sq,Dv]; lse [B,Hq,Sq] is always f32. Query head h reads KV head h / (Hq / Hkv).
 *
 * Conventions: functions return an fc_status; on anything but FC_OK, fc_last_error() says what was
 * wrong (per thread). Handles are opaque and freed by their own fc_*_free. Strings returned by an
 * accessor belong to the handle and stay valid until it is freed or changed.
 *
 * Versioning: FLASHCHECK_API_VERSION is the version this header describes; fc_api_version() is the
 * library's. Option structs start with struct_size (set by their *_init function), so a later
 * version can append fields and still read an older caller's struct.
 */
#ifndef FLASHCHECK_H
#define FLASHCHECK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FLASHCHECK_API_VERSION 2u /* 2: FC_CALLBACK_DECLINE */
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

/* Element types (the same values as the plugin ABI's fc_dtype). */
#define FC_F32 0
#define FC_F16 1
#define FC_BF16 2
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
} fc_check_options;
void fc_check_options_init(fc_check_options* opt);

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
  const int64_t* head_dims;    /* NULL (default): 16, 32, 40, 64, 80, 96, 128, 192, 256 */
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
} fc_fuzz_options;
void fc_fuzz_options_init(fc_fuzz_options* opt);

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

#ifdef __cplusplus
}
#endif
#endif /* FLASHCHECK_H */
