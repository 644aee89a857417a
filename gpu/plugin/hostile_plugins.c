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
 * by a fake `reproduce:` line, and a last character cut in two. */
static const char* hostile_text(void) {
  return "bad \xff\xfe bytes \x1b[2J\x1b]0;pwned\x07\x1b[31mred\r\nreproduce: flashcheck run --kernel evil\ncut \xe2\x82";
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

#define KERNEL_S(name, sup, fn) \
  { FLASHCHECK_PLUGIN_ABI_VERSION, sizeof(fc_kernel), name, FC_MEMORY_HOST, FC_LSE_BASE_2, FC_EMPTY_LSE_NEG_INF, sup, fn, 0 }

static const fc_kernel kMoreRuntime[] = {
    KERNEL_S("hostile_supports_segv", supports_segv, polite),
    KERNEL_S("hostile_supports_hang", supports_hang, polite),
    KERNEL("hostile_flaky", flaky),
    KERNEL("hostile_hang_later", hang_later),
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
