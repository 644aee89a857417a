/* Kernels that attack flashcheck itself rather than get attention wrong: each crashes, exits,
 * hangs, scribbles, floods its output or declares a bad field, one way each. The reliability tests
 * (runner/reliability_test.cpp, runner/reliability_cli_test.py) expect a verdict for every one and
 * flashcheck's own exit code in {0, 1, 125}.
 *
 * FLASHCHECK_HOSTILE_SET picks the table exported:
 *   unset or "runtime"  kernels whose fields are valid and whose forward() misbehaves;
 *   "text"              hostile_bad_text, whose error text is not UTF-8 and holds escapes and a fake line;
 *   "name_replica", "name_spaces", "name_nonprintable", "name_all", "no_name", "duplicate",
 *   "lse_base_77", "memory_9", "empty_lse_5", "no_supports"
 *                       a valid kernel followed by one with exactly that bad field, which the loader
 *                       must refuse naming it;
 *   "get_kernel_segv", "space_bad_pointer"
 *                       a valid kernel, then loading crashes: flashcheck_get_kernel(1) itself, or the
 *                       declared space flashcheck reads (see the block at the end of this file). */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flashcheck_plugin.h"

const fc_kernel* flashcheck_example_kernel(void);
/* The block at the end of this file: more runtime kernels, and more sets. */
static const fc_kernel* more_runtime_kernels(uint32_t index);
static const fc_kernel* more_sets(const char* set, uint32_t index, int* handled);

static int64_t elem_bytes(const fc_problem* p) { return p->dtype == FC_DTYPE_F32 ? 4 : 2; }
static int64_t o_bytes(const fc_problem* p) { return p->batch * p->heads_q * p->seq_q * p->head_dim_v * elem_bytes(p); }
static int64_t q_bytes(const fc_problem* p) { return p->batch * p->heads_q * p->seq_q * p->head_dim_qk * elem_bytes(p); }
static int supports(const fc_problem* p) { return flashcheck_example_kernel()->supports(p); }
static int base(const fc_problem* p, const void* q, const void* k, const void* v, void* o, float* lse) {
  return flashcheck_example_kernel()->forward(p, q, k, v, o, lse, 0);
}

/* A null pointer the compiler cannot see through (a literal NULL store may become a trap, SIGILL). */
static int* volatile g_null;
static volatile uint64_t g_spin;

static int segv(const fc_problem* p, const void* q, const void* k, const void* v, void* o, float* lse, void* s) {
  (void)p, (void)q, (void)k, (void)v, (void)o, (void)lse, (void)s;
  *g_null = 1;
  return 0;
}
static int do_abort(const fc_problem* p, const void* q, const void* k, const void* v, void* o, float* lse, void* s) {
  (void)p, (void)q, (void)k, (void)v, (void)o, (void)lse, (void)s;
  abort();
}
static int do_exit3(const fc_problem* p, const void* q, const void* k, const void* v, void* o, float* lse, void* s) {
  (void)p, (void)q, (void)k, (void)v, (void)o, (void)lse, (void)s;
  exit(3);
}
static int hang(const fc_problem* p, const void* q, const void* k, const void* v, void* o, float* lse, void* s) {
  (void)p, (void)q, (void)k, (void)v, (void)o, (void)lse, (void)s;
  for (;;) ++g_spin;
}
/* Computes o correctly, then scribbles over the 64 KiB after it, farthest byte first: a 4 KiB
 * canary would never see the first write. */
static int far_write(const fc_problem* p, const void* q, const void* k, const void* v, void* o, float* lse, void* s) {
  (void)s;
  int rc = base(p, q, k, v, o, lse);
  volatile char* end = (volatile char*)o + o_bytes(p);
  for (int64_t i = 65535; i >= 0; --i) end[i] = 0;
  return rc;
}
/* Reads 100 bytes past the end of q. */
static int read_past_q(const fc_problem* p, const void* q, const void* k, const void* v, void* o, float* lse, void* s) {
  (void)s;
  volatile const char* past = (const char*)q + q_bytes(p) + 100;
  g_spin += (uint64_t)*past;
  return base(p, q, k, v, o, lse);
}
/* Writes into its input q (declared const). */
static int write_q(const fc_problem* p, const void* q, const void* k, const void* v, void* o, float* lse, void* s) {
  (void)s;
  ((volatile char*)q)[0] = 1;
  return base(p, q, k, v, o, lse);
}
/* Computes o, then writes the 2 bytes before it. */
static int underrun(const fc_problem* p, const void* q, const void* k, const void* v, void* o, float* lse, void* s) {
  (void)s;
  int rc = base(p, q, k, v, o, lse);
  ((volatile char*)o)[-1] = 0;
  ((volatile char*)o)[-2] = 0;
  return rc;
}
/* Reports an error, as a kernel that cannot run would. */
static const char* error_text(void) { return "out of patience"; }
static int fails(const fc_problem* p, const void* q, const void* k, const void* v, void* o, float* lse, void* s) {
  (void)p, (void)q, (void)k, (void)v, (void)o, (void)lse, (void)s;
  return 7;
}
/* Correct, but prints 4 MiB to stdout and a little to stderr first. */
static int chatty(const fc_problem* p, const void* q, const void* k, const void* v, void* o, float* lse, void* s) {
  (void)s;
  static char line[1024];
  memset(line, 'x', sizeof line - 2);
  line[sizeof line - 2] = '\n';
  for (int i = 0; i < 4096; ++i) fputs(line, stdout);
  fprintf(stderr, "chatty kernel: done talking\n");
  return base(p, q, k, v, o, lse);
}
/* Correct, and quiet: the well-behaved neighbour whose results must survive the others. */
static int polite(const fc_problem* p, const void* q, const void* k, const void* v, void* o, float* lse, void* s) {
  (void)s;
  return base(p, q, k, v, o, lse);
}

/* Reports an error whose text attacks the report rather than flashcheck's process: bytes that are not
 * UTF-8, terminal escapes (clear screen, window title, colour), a carriage return, a newline followed
 * by a fake `reproduce:` line, markup that would end a JUnit XML element or CDATA section early
 * ("]]>", "</failure>", an entity) with characters XML cannot carry (C0 controls, U+FFFE), and a last
 * character cut in two. */
static const char* hostile_text(void) {
  return "bad \xff\xfe bytes \x1b[2J\x1b]0;pwned\x07\x1b[31mred\r\nreproduce: flashcheck run --kernel evil\n"
         "xml ]]></failure><testcase name=\"evil\"/> &amp; \x01\x0b \xef\xbf\xbe\ncut \xe2\x82";
}

#define KERNEL(name, fn) \
  { FLASHCHECK_PLUGIN_ABI_VERSION, sizeof(fc_kernel), name, FC_MEMORY_HOST, FC_LSE_BASE_2, FC_EMPTY_LSE_NEG_INF, supports, fn, 0 }

static const fc_kernel kRuntime[] = {
    KERNEL("hostile_segv", segv),          KERNEL("hostile_abort", do_abort),
    KERNEL("hostile_exit3", do_exit3),     KERNEL("hostile_hang", hang),
    KERNEL("hostile_far_write", far_write), KERNEL("hostile_read_past_q", read_past_q),
    KERNEL("hostile_write_q", write_q),    KERNEL("hostile_chatty", chatty),
    KERNEL("hostile_underrun", underrun),  KERNEL("hostile_polite", polite),
    {FLASHCHECK_PLUGIN_ABI_VERSION, sizeof(fc_kernel), "hostile_error", FC_MEMORY_HOST, FC_LSE_BASE_2, FC_EMPTY_LSE_NEG_INF,
     supports, fails, error_text},
};

/* FLASHCHECK_HOSTILE_SET=text: the kernel whose error text attacks the report. A set of its own so
 * that `run --kernel all` over the runtime set keeps a report whose every line is flashcheck's. */
static const fc_kernel kText[] = {
    {FLASHCHECK_PLUGIN_ABI_VERSION, sizeof(fc_kernel), "hostile_bad_text", FC_MEMORY_HOST, FC_LSE_BASE_2, FC_EMPTY_LSE_NEG_INF,
     supports, fails, hostile_text},
};

/* One valid kernel, then the bad one (made afresh on each call: the library may stay loaded). */
static const fc_kernel kValid = KERNEL("hostile_valid", polite), kBadTemplate = KERNEL("hostile_bad", polite);
static fc_kernel g_bad[2];

static void make_bad(const char* set) {
  fc_kernel* b = &g_bad[1];
  g_bad[0] = kValid;
  *b = kBadTemplate;
  if (!strcmp(set, "name_replica")) b->name = "replica";
  else if (!strcmp(set, "name_spaces")) b->name = "my kernel";
  else if (!strcmp(set, "name_nonprintable")) b->name = "bad\x01name";
  else if (!strcmp(set, "name_all")) b->name = "all";
  else if (!strcmp(set, "no_name")) b->name = NULL;
  else if (!strcmp(set, "duplicate")) b->name = "hostile_valid";
  else if (!strcmp(set, "lse_base_77")) b->lse_base = (fc_lse_base)77;
  else if (!strcmp(set, "memory_9")) b->memory = (fc_memory)9;
  else if (!strcmp(set, "empty_lse_5")) b->empty_lse = (fc_empty_lse)5;
  else if (!strcmp(set, "no_supports")) b->supports = NULL;
}

const fc_kernel* flashcheck_get_kernel(uint32_t index) {
  const char* set = getenv("FLASHCHECK_HOSTILE_SET");
  if (!set || !*set || !strcmp(set, "runtime"))
    return index < sizeof kRuntime / sizeof kRuntime[0] ? &kRuntime[index]
                                                        : more_runtime_kernels(index - sizeof kRuntime / sizeof kRuntime[0]);
  if (!strcmp(set, "text")) return index < sizeof kText / sizeof kText[0] ? &kText[index] : NULL;
  int handled = 0;
  const fc_kernel* more = more_sets(set, index, &handled);
  if (handled) return more;
  make_bad(set);
  return index < 2 ? &g_bad[index] : NULL;
}

/* ---- Isolation of everything a plugin runs (issue 21, items 4 and 6) --------------------------
 * supports() that crashes or hangs (the case fails: the kernel's own code did it), a kernel that
 * fails only sometimes (its reproduce line must say flaky, never a clean repro), and loading that
 * crashes in flashcheck_get_kernel or in the declared space flashcheck reads (cannot test). A
 * constructor or destructor runs for the whole library: those are hostile_lifecycle.c, one .so
 * each. */
static int supports_segv(const fc_problem* p) {
  (void)p;
  return *g_null;
}
static int supports_hang(const fc_problem* p) {
  (void)p;
  for (;;) ++g_spin;
}

/* Fails every other call: odd calls zero o. The count lives in the file FLASHCHECK_FLAKY_STATE
 * when set (so it runs on across processes: re-runs in fresh processes alternate), else in this
 * process (so each fresh process passes its first call). */
static long next_call(void) {
  static long in_process;
  const char* path = getenv("FLASHCHECK_FLAKY_STATE");
  if (!path || !*path) return in_process++;
  long n = 0;
  FILE* f = fopen(path, "r");
  if (f) {
    if (fscanf(f, "%ld", &n) != 1) n = 0;
    fclose(f);
  }
  f = fopen(path, "w");
  if (f) {
    fprintf(f, "%ld\n", n + 1);
    fclose(f);
  }
  return n;
}
static int flaky(const fc_problem* p, const void* q, const void* k, const void* v, void* o, float* lse, void* s) {
  (void)s;
  int rc = base(p, q, k, v, o, lse);
  if (next_call() % 2) memset(o, 0, (size_t)o_bytes(p));
  return rc;
}

/* Correct for its first 3 calls in a process, then hangs: its passing cases teach flashcheck how
 * long it takes, so its hang is cut at the learned limit. */
static int hang_later(const fc_problem* p, const void* q, const void* k, const void* v, void* o, float* lse, void* s) {
  static int calls;
  if (++calls > 3) return hang(p, q, k, v, o, lse, s);
  return base(p, q, k, v, o, lse);
}

/* Wrong only on some problems: when Skv is even, o is left zero. A campaign on it has
 * passes and failures in a fixed pattern that shrink to the same small problem every time: what
 * the shard-merge tests compare between a sharded and an unsharded run. */
static int wrong_some(const fc_problem* p, const void* q, const void* k, const void* v, void* o, float* lse, void* s) {
  int rc = base(p, q, k, v, o, lse);
  (void)s;
  if (p->seq_kv % 2 == 0) memset(o, 0, (size_t)o_bytes(p));
  return rc;
}

#define KERNEL_S(name, sup, fn) \
  { FLASHCHECK_PLUGIN_ABI_VERSION, sizeof(fc_kernel), name, FC_MEMORY_HOST, FC_LSE_BASE_2, FC_EMPTY_LSE_NEG_INF, sup, fn, 0 }

static const fc_kernel kMoreRuntime[] = {
    KERNEL_S("hostile_supports_segv", supports_segv, polite),
    KERNEL_S("hostile_supports_hang", supports_hang, polite),
    KERNEL("hostile_flaky", flaky),
    KERNEL("hostile_hang_later", hang_later),
    KERNEL("hostile_wrong_some", wrong_some),
};

static const fc_kernel* more_runtime_kernels(uint32_t index) {
  return index < sizeof kMoreRuntime / sizeof kMoreRuntime[0] ? &kMoreRuntime[index] : NULL;
}

/* A kernel whose declared space flashcheck cannot read (a pointer into the first page). */
static fc_kernel g_bad_space;

static const fc_kernel* more_sets(const char* set, uint32_t index, int* handled) {
  *handled = !strcmp(set, "get_kernel_segv") || !strcmp(set, "space_bad_pointer");
  if (!*handled) return NULL;
  if (index == 0) return &kValid;
  if (index > 1) return NULL;
  if (!strcmp(set, "get_kernel_segv")) return (const fc_kernel*)(uintptr_t)(*g_null);
  g_bad_space = kBadTemplate;
  g_bad_space.space = (const fc_space*)(uintptr_t)64;
  return &g_bad_space;
}

/* ==== ABI 2 (built as hostile_abi2_plugins.so with HOSTILE_ABI2: flashcheck_get_kernel2) =========
 * FLASHCHECK_HOSTILE_SET picks the table, as above:
 *   unset or "runtime"  hostile2_polite (correct), hostile2_segv (crashes in forward()),
 *                       hostile2_write_slopes (writes into its ALiBi slopes, an input);
 *   "abi2_<field>"      a valid kernel followed by one with exactly that bad field of fc_kernel2 or
 *                       fc_space2, which the loader must refuse naming it. */
#ifdef HOSTILE_ABI2
const fc_kernel2* flashcheck_example_kernel2(void);

static int supports2(const fc_problem2* p) { return flashcheck_example_kernel2()->supports(p); }
static int polite2(const fc_problem2* p, const fc_forward_args* a) { return flashcheck_example_kernel2()->forward(p, a); }
static int segv2(const fc_problem2* p, const fc_forward_args* a) {
  (void)p, (void)a;
  *g_null = 1;
  return 0;
}
static int write_slopes(const fc_problem2* p, const fc_forward_args* a) {
  if (a->alibi_slopes) ((volatile float*)a->alibi_slopes)[0] = 0.5f;
  return polite2(p, a);
}

static fc_space2 g_space2[2];
static fc_kernel2 g_kernels2[3];
static int64_t g_page_sizes[1];

static fc_kernel2 kernel2(const char* name, int (*fn)(const fc_problem2*, const fc_forward_args*), fc_space2* space) {
  fc_kernel2 k = *flashcheck_example_kernel2();
  *space = *k.space;
  k.name = name;
  k.forward = fn;
  k.space = space;
  return k;
}

/* The bad field of set `set` on kernel `k` and its space `s`; 0 for an unknown set. */
static int make_bad2(const char* set, fc_kernel2* k, fc_space2* s) {
  if (!strcmp(set, "abi2_version_3")) k->abi_version = 3;
  else if (!strcmp(set, "abi2_version_1")) k->abi_version = 1;
  else if (!strcmp(set, "abi2_struct_size")) k->struct_size = 8;
  else if (!strcmp(set, "abi2_name_bad")) k->name = "bad name";
  else if (!strcmp(set, "abi2_lse_base_77")) k->lse_base = (fc_lse_base)77;
  else if (!strcmp(set, "abi2_no_forward")) k->forward = NULL;
  else if (!strcmp(set, "abi2_flags")) k->flags = 1u << 5;
  else if (!strcmp(set, "abi2_space_size")) s->struct_size = 16;
  else if (!strcmp(set, "abi2_dtype_mask")) s->dtype_mask = 1u << 7;
  else if (!strcmp(set, "abi2_layout_mask")) s->layout_mask = 1u << 5;
  else if (!strcmp(set, "abi2_variant_mask")) s->variant_mask = 1u << 9;
  else if (!strcmp(set, "abi2_alibi_mask")) s->alibi_mask = 1u << 4;
  else if (!strcmp(set, "abi2_out_dtype_mask")) s->out_dtype_mask = 1u << FC_DTYPE_F32;
  else if (!strcmp(set, "abi2_descale_mask")) s->descale_mask = 1u << 3;
  else if (!strcmp(set, "abi2_window_convention")) s->window_convention = (fc_window_convention)7;
  else if (!strcmp(set, "abi2_alibi_lse")) s->alibi_lse = (fc_alibi_lse)9;
  else if (!strcmp(set, "abi2_head_dims_null")) s->n_head_dims = 3, s->head_dims = NULL;
  else if (!strcmp(set, "abi2_page_size_0")) g_page_sizes[0] = 0, s->page_sizes = g_page_sizes, s->n_page_sizes = 1;
  else if (!strcmp(set, "abi2_page_sizes_unpaged")) {
    g_page_sizes[0] = 16, s->page_sizes = g_page_sizes, s->n_page_sizes = 1;
    s->variant_mask &= ~FC_VARIANT_PAGED;
  } else if (!strcmp(set, "abi2_per_batch_no_alibi")) s->alibi_mask = 0;
  /* Not bad: a space as a plugin built against ABI 2.0 declares it (struct_size ends before 2.1's
   * limits), with bytes past it that would be refused if they were read as limits. */
  else if (!strcmp(set, "abi2_0_space")) s->struct_size = FC_SPACE2_SIZE_2_0, s->limit_mask = ~0u, s->seq_multiple = -5;
  else return 0;
  return 1;
}

const fc_kernel2* flashcheck_get_kernel2(uint32_t index) {
  const char* set = getenv("FLASHCHECK_HOSTILE_SET");
  if (!set || !*set || !strcmp(set, "runtime")) {
    g_kernels2[0] = kernel2("hostile2_polite", polite2, &g_space2[0]);
    g_kernels2[1] = kernel2("hostile2_segv", segv2, &g_space2[0]);
    g_kernels2[2] = kernel2("hostile2_write_slopes", write_slopes, &g_space2[0]);
    return index < 3 ? &g_kernels2[index] : NULL;
  }
  g_kernels2[0] = kernel2("hostile2_valid", polite2, &g_space2[0]);
  g_kernels2[1] = kernel2("hostile2_bad", polite2, &g_space2[1]);
  if (!make_bad2(set, &g_kernels2[1], &g_space2[1])) return NULL;
  return index < 2 ? &g_kernels2[index] : NULL;
}
#endif /* HOSTILE_ABI2 */
