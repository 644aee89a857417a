#include "runner/backward_campaign.h"

#include <utility>

#include "runner/backward_harness.h"
#include "verify/backward_expected.h"
#include "verify/judge.h"

namespace flashcheck {

namespace {

// A check of the backward call as a whole (BackwardReport::checks): held to 0.
Criterion check(const std::string& name, double value, const std::string& detail) {
  Criterion c;
  c.name = name;
  c.value = value;
  c.limit = 0;
  c.pass = value <= 0;
  c.detail = detail;
  return c;
}

}  // namespace

namespace {
bool seed_picks_deterministic(uint64_t seed) { return ((seed * 0x9E3779B97F4A7C15ull) >> 63) != 0; }
}  // namespace

bool deterministic_mode(const Case& c, const BackwardCaps& caps) { return caps.deterministic && seed_picks_deterministic(c.seed); }

uint64_t seed_in_mode(uint64_t from, bool deterministic) {
  while (seed_picks_deterministic(from) != deterministic) ++from;
  return from;
}

CaseOutcome run_backward_case(const Variant& v, const Case& c, int64_t max_rows, const std::string& plugin, KernelWorker* worker,
                              const WaitingFn& waiting, OracleChoice oracle, bool error_maps) {
  CaseOutcome out;
  out.c = c;
  const Problem& p = c.problem;
  const std::string repro = repro_command(v.name(), c, plugin, true);
  BackwardReport& back = out.backward.emplace();
  back.problem = p;
  back.repro = repro;
  // A case whose forward produced nothing to judge: one failed criterion says why; the backward,
  // never called, has a note and nothing else.
  auto unjudged = [&](const std::string& criterion, const std::string& detail) {
    out.report.problem = p;
    out.report.criteria.push_back({criterion, false, 1, 0, detail});
    out.report.repro = repro;
    back.notes.push_back("not run: the forward did not return outputs");
  };
  if (auto why = v.backward_refusal(p)) {
    out.skipped = *why;
    return out;
  }
  if (ended_by_supports(supports_of(v, p, worker), out, unjudged)) return out;
  const Inputs in = make_inputs(p, c.seed, c.dist, /*backward=*/true);  // non-finite values where every backward agrees
  const std::vector<float> d_out = make_d_out(p, c.seed);
  const bool deterministic = deterministic_mode(c, *v.backward_caps());
  const int calls = deterministic ? kDeterminismCalls : 1;
  HarnessResult h;
  double kernel_seconds = 0;
  if (worker) {
    IsolatedRun r = worker->run_backward(p, in, d_out, calls, deterministic, waiting);
    if (ended_by_run(r, out, unjudged)) return out;
    h = std::move(*r.result);
    kernel_seconds = r.kernel_seconds;
    if (r.abnormal) {  // the backward crashed or hung: a verdict of the backward, the forward judged
      out.abnormal = r.abnormal;
      out.abnormal->detail += " in its backward";
      back.checks.push_back(check(r.abnormal->criterion, 1, out.abnormal->detail));
    }
  } else {
    std::optional<HarnessResult> got =
        run_in_process([&] { return run_variant_backward(v, p, in, d_out, calls, deterministic); }, out, unjudged);
    if (!got) return out;
    h = std::move(*got);
  }
  out.report = judge(p, in, h.output(), v.declared(p), JudgeOptions{max_rows, error_maps, oracle});
  out.report.repro = repro;
  const BackwardOutputs& g = *h.backward;
  if (g.error) {
    out.error = "its backward: " + *g.error;
    back.checks.push_back(check("kernel_error", 1, *g.error));
  } else if (!out.abnormal) {
    BackwardOptions bo;
    bo.error_maps = error_maps;
    back = verify_backward(p, make_backward_expected(p, in, d_out, oracle), g.gradients, bo);
    back.repro = repro;
    back.checks.push_back(check("out_of_bounds", static_cast<double>(g.oob_writes),
                                "canary bytes around the buffers that changed during the backward"));
    if (calls > 1)
      back.checks.push_back(check("determinism", g.nondeterministic ? 1 : 0,
                                  g.nondeterministic ? *g.nondeterministic
                                                     : std::to_string(calls) + " calls gave the same bits (deterministic=true)"));
    else if (v.backward_caps()->deterministic)
      back.notes.push_back("the default mode (deterministic=false), called once; this seed does not run the deterministic one");
  }
  out.passed = out.report.pass() && back.pass();
  // Only a correct case says how long the kernel needs: a wrong one may have skipped the work.
  if (worker && out.passed) worker->time_limit().passed(p, kernel_seconds);
  return out;
}

CaseRunner backward_runner(const Variant& v, const CampaignOptions& opt) {
  const BackwardCaps* b = v.backward_caps();
  if (!b) throw CannotTest("kernel " + v.name() + " has no backward pass");
  CaseRunner r;
  r.space = backward_space(v.caps(), *b);
  r.backward = true;
  r.run = [&v, max_rows = opt.max_rows, plugin = opt.plugin, oracle = opt.oracle](const Case& c, KernelWorker* worker,
                                                                                    const WaitingFn& waiting, bool maps) {
    return run_backward_case(v, c, max_rows, plugin, worker, waiting, oracle, maps);
  };
  return r;
}

std::optional<std::string> backward_campaign_refusal(const CampaignOptions& opt) {
  // The backward's expected gradients evaluate every row (no row sampling yet), and its baselines
  // run on the CPU wherever the GPU replicas do not cover a problem (or the oracle is the CPU's):
  // grown cases would take them hours.
  if (opt.load) return "--backward with --load: the backward's expected gradients evaluate every row (no row sampling yet)";
  if (opt.big) return "--backward with --big: the backward's expected gradients evaluate every row (no row sampling yet)";
  return std::nullopt;
}

}  // namespace flashcheck
