// `flashcheck run`: fuzz campaigns of random problems against the oracle, per variant, with
// shrinking of failures to a minimal reproducing problem.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "fuzz/generators.h"
#include "runner/isolation.h"
#include "runner/registry.h"
#include "runner/variant_selection.h"
#include "verify/coverage.h"
#include "verify/expected.h"
#include "verify/backward_criteria.h"
#include "verify/report.h"

namespace flashcheck {

struct CampaignOptions {
  int64_t cases = 200;
  uint64_t seed = 1;
  int64_t shard_index = 0, shard_count = 1;  // this run takes cases c with c % count == index
  int64_t max_seq = 300;                     // longest sequence drawn
  double max_work = 3e7;                     // per-case cap on B·Hq·Sq·Skv·(Dqk+Dv)
  int64_t max_rows = kDefaultMaxRows;        // rows per (b,h) checked before sampling
  bool shrink = true;
  bool error_maps = false;
  OracleChoice oracle = OracleChoice::automatic;  // `run --oracle`: where the fp64 truth is computed                   // kept failures carry the HTML page's error maps (`run --html`)
  bool fail_fast = false;                    // stop at the first failing case
  bool progress = true;                      // on stderr: an updating line on a terminal, else a line every few seconds
  int64_t max_failures_kept = 5;             // per variant, with reports
  std::vector<DType> dtypes;                 // restrict the drawn dtypes (empty: what the variant declares)
  std::string plugin;                        // the library this variant came from: loaded by the worker, named in reproduce lines
  IsolationOptions isolation;                // run the kernel in a worker process (the CLI's default)
  int64_t max_timeouts = 3;                  // a kernel that hangs this often: its remaining cases are not run
  // Wall time for shrinking one failure; 0: max(20 s, 2 x the case's time limit), and for a hang
  // min(60 s, 2 x its limit) (each candidate that hangs costs the whole limit).
  double shrink_budget_s = 0;
  // Re-runs of each kept failure before its reproduce line is printed, each in a fresh worker
  // process when isolated (fresh buffers always): a failure that does not fail every re-run is
  // flaky, never a clean reproduction. A hang is re-run once (each costs its time limit). 0: none
  // (the library's default; the CLI asks for 3).
  int confirm_runs = 0;
  // Production load (`run --load`): each drawn case is grown, keeping its tile-boundary residues,
  // to B·Hq >= load_min_bh and sequences >= load_min_seq, so a launch has hundreds of CTAs and
  // races that need a loaded GPU can bite. Use with a large max_seq and max_work.
  bool load = false;
  int64_t load_min_bh = 32, load_min_seq = 1000;
  // Big tensors (`run --big`): each drawn case is grown, keeping its residues, to sequences >=
  // big_min_seq (within max_seq), then its batch until its largest tensor (q, k, v or o) holds more than
  // big_min_elems elements: past 2^31, where 32-bit index arithmetic in a kernel wraps.
  bool big = false;
  int64_t big_min_seq = 512;
  double big_min_elems = 2147483648.0 * 1.05;
  // Host memory a case may plan to use (bytes; 0: what /proc/meminfo calls available, less a
  // quarter). A case past it is refused as cannot-test with both figures, never OOM-killed.
  double host_memory_budget = 0;
  // `run --variants` / `--require`: the declared variants drawn, and those every case has.
  VariantSelection variants;
};

// How a kept failure did when re-run from scratch (CampaignOptions::confirm_runs).
struct Reproduction {
  int runs = 0, failed = 0;
  bool fresh_processes = false;  // each re-run in a new worker process; else in this process (--no-isolation)
  bool confirmed() const { return runs > 0 && failed == runs; }
};
// "failed 3 of 3 re-runs, each in a fresh process", for reports.
std::string to_text(const Reproduction& r);

struct CaseOutcome {
  Case c;
  bool passed = false;
  std::optional<std::string> skipped;   // why, if skipped
  std::optional<std::string> error;     // the variant threw or returned an error: counts as failed
  std::optional<AbnormalEnd> abnormal;  // the kernel crashed, exited or hung (isolated runs): counts as failed
  Report report;                        // the forward's
  // A backward case's (`run --backward`): the gradients' verdict, apart from the forward's; its
  // checks say when the backward itself errored, crashed, hung, overran or was not deterministic.
  std::optional<BackwardReport> backward;
  std::optional<Reproduction> reproduced;  // a kept failure, re-run before its reproduce line
  bool judged() const { return !skipped && !error && !abnormal; }
  // The failed criteria: the forward's, or in a backward case the backward's ("dk: cosine",
  // "determinism") and the forward's as "forward: <name>" (the C API's fc_check_backward names).
  std::vector<std::string> failed() const;
};
// The case's reports as text (the forward's, then the backward's); without the reproduce lines
// when `repro` is false (a flaky failure's).
std::string to_text(const CaseOutcome& o, bool repro = true);

// How close a judged case came to failing: the criterion nearest its limit. ratio is value/limit
// for "at most" criteria and (1 - value)/(1 - limit) for cosine; 1 is the limit, a failure >= 1.
struct Tightness {
  std::string criterion;
  double value = 0, limit = 0, ratio = 0;
  int64_t case_index = -1;
  Criterion::Bound bound = Criterion::Bound::at_most;
};
// Over the criteria of one report that carry a limit the case is held to (judged ones, and any
// that failed); empty when none applies. Printed as the report prints it: "rel_l2 0.002 ≤ 0.018 (11%)".
std::optional<Tightness> tightest_criterion(const Report& r);
std::string to_text(const Tightness& t);

// One case's verdict as a campaign counts it: what count_case() needs, so that a summary is the
// same whether it is counted as the cases run or from their verdicts read back from shards' JSON
// (`flashcheck merge`, `run --gpus`).
struct CaseVerdict {
  int64_t index = 0;  // the case number in the campaign
  enum class Kind { passed, failed, skipped } kind = Kind::passed;
  std::string skipped;                 // why (skipped)
  std::vector<std::string> failed_by;  // the criteria that failed (failed)
  bool judged = false;                 // the output was judged (not skipped, errored or crashed)
  bool error = false;                  // the kernel reported an error
  std::optional<AbnormalEnd> abnormal;  // it crashed, exited or hung
  uint64_t ulp_max = 0;                // judged cases: the report's metrics
  std::optional<double> cosine;        // judged cases that compared an element (a cosine over none reads 1)
  std::optional<Tightness> tightest;
  Coverage::Point point;               // where the problem falls in the drawn space (coverage_point)
  // A case lost with its `run --gpus` worker: failed, but there is nothing to shrink or re-run.
  bool lost = false;
};
CaseVerdict verdict_of(int64_t index, const Case& c, const CaseOutcome& o);

struct VariantSummary {
  std::string name;
  std::optional<std::string> unavailable;
  int64_t cases = 0, passed = 0, failed = 0, skipped = 0;
  int64_t judged = 0;                      // cases whose output was judged (not skipped, errored or crashed)
  int64_t errors = 0, crashed = 0, timed_out = 0;
  int64_t not_run = 0;                     // left after max_timeouts
  std::map<std::string, int64_t> failed_by;  // criterion -> failing cases
  std::map<std::string, int64_t> skipped_by;  // reason -> skipped cases: a skip is never silent
  std::optional<std::string> first_abnormal;  // e.g. "crashed (SIGSEGV)", the first such case's
  std::optional<Tightness> tightest;        // over the judged cases
  // Over the judged cases only; with none judged (or none with an element to compare), worst_cos
  // is NaN (never a perfect-looking 1).
  uint64_t worst_ulp = 0;
  double worst_cos = 1.0;
  bool cosine_seen = false;  // some judged case compared an element (count_case; else worst_cos ends NaN)
  std::vector<CaseOutcome> failures;  // shrunk, at most max_failures_kept
  std::vector<std::string> repro;     // one command per kept failure
  std::vector<int64_t> failure_cases;  // the campaign case each kept failure was drawn as
  Coverage coverage;                  // cases per point of the drawn space (the --html overview)
  // The plugin's destructors or exit handlers crashed, exited or hung when its worker unloaded it
  // at the end: the kernel failed, though no case did.
  std::optional<std::string> unload_failure;
  std::vector<CaseVerdict> verdicts;  // every case run, in case order
};

// Adds one case to a summary (its counts, coverage, worst metrics, first abnormal end, tightest
// criterion, and verdicts): the one place a campaign's numbers are counted.
void count_case(VariantSummary& s, const CaseVerdict& v);
// After the last count_case: with no judged case that compared an element, worst_cos is NaN (never
// a perfect-looking 1).
void finish_counts(VariantSummary& s);
// Whether a failing case is kept (shrunk, re-run, reported): the first max_kept failures, but at
// most one hang per kernel (shrinking and re-running another costs minutes); `kept_hang` says
// whether one was kept already. A case lost with its worker is never kept: there is no case to shrink.
enum class Keep { yes, hang_kept_already, enough_kept, lost };
Keep keep_failure_rule(const CaseVerdict& v, int64_t kept, bool kept_hang, int64_t max_kept);

// The coverage record of a campaign over `space`: its axes and the values it declares (dtype,
// head_dim, causal, heads), and the point a problem falls on. An axis added to the space (an
// attention variant) is one more key in both; the overview page needs no change.
Coverage coverage_of(const ProblemSpace& space);
Coverage::Point coverage_point(const Problem& p);

// Progress on stderr for long work: an updating line on a terminal; without one (logs, CI), a
// line whenever `every_s` seconds passed since the last, so a silent log means a dead process.
class Progress {
 public:
  explicit Progress(bool enabled, double every_s = 5);
  ~Progress();
  void update(const std::string& line);
  void finish();  // ends the terminal's line

 private:
  bool enabled_, tty_;
  double every_s_;
  std::chrono::steady_clock::time_point last_;
  bool open_line_ = false;
};

// Called about once a second while an isolated kernel runs, with the seconds elapsed.
using WaitingFn = std::function<void(double)>;

// How a campaign runs one case: the forward's run_case, or the backward's (runner/backward_campaign.h).
// Shrinking, re-running and the campaign loop go through it, so a failing gradient shrinks like a
// failing output.
struct CaseRunner {
  std::function<CaseOutcome(const Case& c, KernelWorker* worker, const WaitingFn& waiting, bool maps_on_failure)> run;
  Capabilities space;     // what the cases are drawn from and shrink candidates stay inside
  bool backward = false;  // reproduce lines carry --backward
};
// The forward's: run_case with the campaign's options, over the kernel's capabilities.
// backward_inputs: Dist::nonfinite's value is planted where a backward agrees too (make_inputs'
// `backward`): for a caller that judges a backward on the forward's cases (the C API's backward fuzz).
CaseRunner forward_runner(const Variant& v, const CampaignOptions& opt, bool backward_inputs = false);

// Whether the variant takes p: asked of `worker` when given (a plugin's supports() runs only
// there, where a crash or hang is a verdict), else of the variant in this process.
SupportsAnswer supports_of(const Variant& v, const Problem& p, KernelWorker* worker);

// How a case ends before its output is judged, one rule for the forward's run_case and the
// backward's (runner/backward_campaign.h). `unjudged(criterion, detail)` records the one failed
// criterion of a case with no output. A crash, hang or error of supports() fails the case, a
// refusal skips it (true: the case is over).
using UnjudgedFn = std::function<void(const std::string& criterion, const std::string& detail)>;
bool ended_by_supports(const SupportsAnswer& a, CaseOutcome& out, const UnjudgedFn& unjudged);
// An isolated run that crashed, hung (before any backward) or reported an error (true: over).
bool ended_by_run(const IsolatedRun& r, CaseOutcome& out, const UnjudgedFn& unjudged);
// The kernel run in this process: a Declined skips the case, any other throw fails it (empty
// then), InvalidProblem propagates (cannot test).
std::optional<HarnessResult> run_in_process(const std::function<HarnessResult()>& run, CaseOutcome& out, const UnjudgedFn& unjudged);

// Runs one case: the kernel's supports(), inputs from (problem, dist, seed), the variant through
// the harness (in `worker`'s process when given), verdict. A passing case teaches the worker's
// time limit how long the kernel takes.
// maps_on_failure: a failing case's report also carries the error maps of the HTML page, judged
// from the same output (the kernel does not run again). backward_inputs: as forward_runner's.
CaseOutcome run_case(const Variant& v, const Case& c, int64_t max_rows, const std::string& plugin = "",
                     KernelWorker* worker = nullptr, const WaitingFn& waiting = {}, bool maps_on_failure = false,
                     OracleChoice oracle = OracleChoice::automatic, bool backward_inputs = false);
// The problem space a variant declares, within the campaign's limits.
ProblemSpace space_for(const Capabilities& caps, const CampaignOptions& opt);
// Case number `index` of the campaign (the same on every machine for the same seed). Every
// space.wide_every-th (index % wide_every == wide_every - 1) is made wide (fuzz/wide_grid.h).
Case campaign_case(const ProblemSpace& space, uint64_t seed, int64_t index);
// How often a default campaign makes a case wide: cases 24, 49, 74 and 99 of 100.
inline constexpr int64_t kWideGridEvery = 25;
// The same, redrawn until the case has every variant `sel` requires (throws CannotTest if none
// comes in many attempts).
Case campaign_case(const ProblemSpace& space, uint64_t seed, int64_t index, const VariantSelection& sel);
// A drawn case grown to production load (CampaignOptions::load): sequence lengths gain multiples
// of lcm(block_q, block_kv) of the head dim's tiles, so Sq, Skv and Skv − Sq keep their residues
// modulo both tiles; the batch grows until B·Hq ≥ load_min_bh; the work stays within max_work.
Case load_case(const Case& c, const ProblemSpace& space, const CampaignOptions& opt);
// A drawn case grown past 2^31 elements in its largest tensor (CampaignOptions::big).
Case big_case(const Case& c, const ProblemSpace& space, const CampaignOptions& opt);
// Host bytes a campaign case needs at its peak: fp32 inputs and output, the dtype copies the
// harness stages, and the oracle's fp64 rows (an estimate, on the high side).
double host_bytes_for(const Problem& p, int64_t max_rows);
// Greedily reduces a failing case (batch, heads, sequence lengths, head dims, distribution) while
// it still fails; returns the smallest failing case found.
// Stops after max_steps candidates or budget_s seconds (0: no limit): a kernel that hangs costs its
// time limit per candidate.
// Shrinking a hang takes only candidates whose time limit fits what is left of budget_s.
// on_step(step, seconds so far, candidate's outcome) after each candidate run: progress.
using ShrinkStepFn = std::function<void(int, double, const CaseOutcome&)>;
CaseOutcome shrink_failure(const Variant& v, CaseOutcome failing, int64_t max_rows, const std::string& plugin = "",
                           int max_steps = 200, KernelWorker* worker = nullptr, double budget_s = 0,
                           OracleChoice oracle = OracleChoice::automatic, const ShrinkStepFn& on_step = {});
CaseOutcome shrink_failure(const CaseRunner& r, CaseOutcome failing, int max_steps, KernelWorker* worker, double budget_s,
                           const ShrinkStepFn& on_step = {});
// Re-runs case c `runs` times from scratch: fresh inputs each time and, with `isolation` enabled,
// a fresh worker process each time (whose time limit starts from `limit` when given). Counts the
// runs that failed (a skip on a re-run counts as not failing).
Reproduction reproduce_case(const Variant& v, const Case& c, int runs, int64_t max_rows, const std::string& plugin,
                            const IsolationOptions& isolation, const CaseTimeLimit* limit = nullptr,
                            OracleChoice oracle = OracleChoice::automatic);
Reproduction reproduce_case(const Variant& v, const CaseRunner& r, const Case& c, int runs, const std::string& plugin,
                            const IsolationOptions& isolation, const CaseTimeLimit* limit = nullptr);

VariantSummary run_campaign(const Variant& v, const CampaignOptions& opt, std::ostream& log);
// The same loop over the cases `r` runs (a backward campaign's).
VariantSummary run_campaign(const Variant& v, const CaseRunner& r, const CampaignOptions& opt, std::ostream& log);

std::string repro_command(const std::string& variant, const Case& c, const std::string& plugin = "", bool backward = false);

}  // namespace flashcheck
