/* Calls the installed C API (flashcheck.h) on real work: fuzzes a correct and a broken C kernel
 * through fc_fuzz, and judges one output on random inputs with fc_check, before and after corrupting
 * it. Exit 0 when flashcheck passes the correct kernel and fails both broken ones, 1 otherwise.
 *   capi_consumer SEED */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include <flashcheck.h>

#include "naive_attention.h"

static int32_t forward(const fc_attention* p, const void* q, const void* k, const void* v, void* o, float* lse,
                       double scale) {
  return naive_attention(p->batch, p->heads_q, p->heads_kv, p->seq_q, p->seq_kv, p->head_dim_qk, p->head_dim_v,
                         p->causal, scale, q, k, v, o, lse);
}

static int32_t naive(void* user, const fc_attention* p, const void* q, const void* k, const void* v, void* o,
                     float* lse) {
  (void)user;
  return forward(p, q, k, v, o, lse, p->scale);
}

static int32_t unscaled(void* user, const fc_attention* p, const void* q, const void* k, const void* v, void* o,
                        float* lse) {
  (void)user;
  return forward(p, q, k, v, o, lse, 1.0);
}

/* Fuzzes one kernel over f32 problems; returns the number of failing cases, or -1 on an API error. */
static int64_t fuzz(fc_kernel_callback kernel, const char* name, uint64_t seed) {
  fc_fuzz_options opt;
  fc_fuzz_options_init2(&opt);
  opt.name = name;
  opt.cases = 30;
  opt.seed = seed;
  opt.dtypes = 1u << FC_F32;
  opt.max_failures = 1;
  fc_campaign* c = NULL;
  if (fc_fuzz(kernel, NULL, &opt, &c) != FC_OK) {
    fprintf(stderr, "fc_fuzz(%s): %s\n", name, fc_last_error());
    return -1;
  }
  fc_campaign_summary s;
  fc_campaign_get_summary(c, &s);
  printf("fc_fuzz %s: %" PRId64 " cases, %" PRId64 " passed, %" PRId64 " failed, %" PRId64 " skipped\n", name,
         s.cases, s.passed, s.failed, s.skipped);
  if (s.failed) {
    fc_case shrunk;
    fc_report* r = NULL;
    if (fc_campaign_failure(c, 0, &shrunk, &r) == FC_OK) printf("%s", fc_report_text(r));
  }
  int64_t failed = s.passed + s.failed == s.cases ? s.failed : -1; /* nothing may be skipped */
  fc_campaign_free(c);
  return failed;
}

/* Judges the naive kernel's output for one problem on flashcheck's random inputs: 1 pass, 0 fail, -1 error. */
static int check_once(uint64_t seed, int corrupt) {
  fc_attention p;
  if (fc_attention_parse("b=2 hq=4 hkv=2 sq=37 skv=53 dqk=32 dv=16 causal=bottom_right dtype=f32", &p) != FC_OK)
    return fprintf(stderr, "parse: %s\n", fc_last_error()), -1;
  p.scale = 0.125;
  size_t nq = p.batch * p.heads_q * p.seq_q, nk = p.batch * p.heads_kv * p.seq_kv;
  float *q = malloc(4 * nq * p.head_dim_qk), *k = malloc(4 * nk * p.head_dim_qk), *v = malloc(4 * nk * p.head_dim_v);
  float *o = malloc(4 * nq * p.head_dim_v), *lse = malloc(4 * nq);
  int verdict = -1;
  fc_report* r = NULL;
  if (q && k && v && o && lse && fc_make_inputs(&p, FC_DIST_NORMAL, seed, q, k, v) == FC_OK &&
      forward(&p, q, k, v, o, lse, p.scale) == 0) {
    if (corrupt) o[nq * p.head_dim_v / 2] += 0.5f; /* one element of one middle row */
    if (fc_check(&p, q, k, v, o, lse, NULL, &r) == FC_OK) {
      verdict = fc_report_pass(r);
      printf("fc_check %s output: %s (%d criteria failed)\n", corrupt ? "corrupted" : "naive",
             verdict ? "PASS" : "FAIL", fc_report_failed_count(r));
      fc_report_free(r);
    } else {
      fprintf(stderr, "fc_check: %s\n", fc_last_error());
    }
  }
  free(q), free(k), free(v), free(o), free(lse);
  return verdict;
}

int main(int argc, char** argv) {
  uint64_t seed = argc > 1 ? strtoull(argv[1], NULL, 0) : 1;
  printf("libflashcheck C API version %u (header %u), seed %" PRIu64 "\n", fc_api_version(), FLASHCHECK_API_VERSION,
         seed);
  if (fc_api_version() != FLASHCHECK_API_VERSION) return 1;
  int ok = fuzz(naive, "naive", seed) == 0;
  ok &= fuzz(unscaled, "unscaled", seed) > 0;
  ok &= check_once(seed, 0) == 1;
  ok &= check_once(seed, 1) == 0;
  printf("%s\n", ok ? "as expected: the correct kernel passes, the broken ones fail" : "UNEXPECTED verdicts");
  return ok ? 0 : 1;
}
