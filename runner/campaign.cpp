#include "runner/campaign.h"

#include "verify/untrusted_text.h"

#include <unistd.h>

#include <algorithm>
#include <numeric>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>

#include "fuzz/wide_grid.h"
#include "runner/harness.h"
#include "runner/shrink_candidates.h"
#include "verify/backward_report.h"
#include "verify/judge.h"

namespace flashcheck {

ProblemSpace space_for(const Capabilities& caps, const CampaignOptions& opt) {
  ProblemSpace s;
  s.max_seq = std::max<int64_t>(1, std::min(opt.max_seq, caps.max_seq));
  // The declared limits on lengths. A kernel whose lengths are multiples of more than the
  // campaign's longest sequence still gets its shortest one.
  s.equal_lengths = caps.equal_lengths;
  s.seq_multiple = std::max<int64_t>(1, caps.seq_multiple);
  s.max_seq = std::max(s.max_seq, std::min(s.seq_multiple, caps.max_seq));
  s.head_dims = caps.head_dims;
  s.dtypes.clear();
  for (DType d : caps.dtypes)
    if (opt.dtypes.empty() || std::find(opt.dtypes.begin(), opt.dtypes.end(), d) != opt.dtypes.end()) s.dtypes.push_back(d);
  s.causals = caps.causals;
  s.allow_dv_ne_dqk = caps.dv_ne_dqk;
  s.head_dim_pairs = caps.head_dim_pairs;
  if (!caps.gqa) s.max_group = 1;
  s.max_work = opt.max_work;
  // Problem model 2: the variants the kernel declares, less those the run leaves out (--variants),
  // narrowed to those every case must have (--require) where the space can say so; the rest of
  // --require is met by redrawing (campaign_case).
  // Load and big campaigns grow each drawn case (load_case, big_case) in ways defined for dense
  // problems (residues of Sq, Skv and Skv − Sq; bytes per batch entry): they draw no variant but
  // fp8 (a dtype, below).
  const bool grown = opt.load || opt.big;
  const VariantSelection& sel = opt.variants;
  auto on = [&](VariantName n) { return !grown && declares_variant(caps, n) && sel.allows(n); };
  // Some cases carry a NaN or Inf unless the kernel declares it does not propagate them (grown
  // cases are about load and size, drawn finite).
  s.nonfinite = caps.propagates_nonfinite && !grown;
  // A few cases of every campaign launch grids wider than a GPU's resident CTAs (grown ones are
  // large already, in lengths).
  s.wide_every = grown ? 0 : kWideGridEvery;
  s.windows = on(VariantName::window);
  s.softcap = on(VariantName::softcap);
  if (on(VariantName::alibi)) {
    s.alibi = caps.alibi;
    s.alibi_per_batch = caps.alibi_per_batch;
  }
  s.sinks = on(VariantName::sinks);
  s.seqused = on(VariantName::seqused);
  s.paged = on(VariantName::paged);
  s.page_sizes = caps.page_sizes;
  s.layouts.clear();
  for (Layout l : caps.layouts) {
    const bool allowed = l == Layout::bhsd                 ? !sel.required.count(VariantName::varlen) && !sel.required.count(VariantName::bshd)
                         : l == Layout::thd                ? on(VariantName::varlen) && !sel.required.count(VariantName::bshd)
                                                           : on(VariantName::bshd) && !sel.required.count(VariantName::varlen);
    if (allowed) s.layouts.push_back(l);
  }
  if (s.layouts.empty() && sel.required.empty()) s.layouts = {Layout::bhsd};
  // fp8 is a dtype, not a change of the problem's shape: grown campaigns keep it (its descales are
  // drawn for the grown batch), so a kernel of fp8 alone has load and big campaigns too.
  const bool fp8 = declares_variant(caps, VariantName::fp8) && sel.allows(VariantName::fp8);
  std::vector<DType> dtypes;
  for (DType d : s.dtypes)
    if (is_fp8(d) ? fp8 : !sel.required.count(VariantName::fp8)) dtypes.push_back(d);
  s.dtypes = dtypes;
  s.out_dtypes = caps.out_dtypes;
  s.descales = caps.descales;
  // The generators aim lengths at the kernel's own tile boundaries: one row per declared head dim
  // (the non-causal tiles where a kernel tiles the modes apart).
  for (int64_t d : caps.head_dims) {
    TileShape t = caps.tile_for(d, false);
    s.tiles.push_back({d, t.block_q, t.block_kv});
  }
  return s;
}

namespace {
// Growing a drawn problem keeps what made it that problem. Lengths grow by the same amount on every
// sequence (so each keeps its residues); a batch of listed lengths (varlen, paged, seqused_k) grows
// by repeating its sequences in order and shrinks by dropping the last ones, lists cut alike.
void add_length(Problem& p, int64_t add) {
  p.seq_q += add;
  p.seq_kv += add;
  for (auto list : {&Problem::seqlens_q, &Problem::seqlens_kv, &Problem::seqused_kv})
    for (int64_t& n : p.*list) n = std::max<int64_t>(0, n + add);
  normalize(p);
}

void set_batch(Problem& p, int64_t batch) {
  for (auto list : {&Problem::seqlens_q, &Problem::seqlens_kv, &Problem::seqused_kv}) {
    std::vector<int64_t>& l = p.*list;
    if (l.empty()) continue;
    const std::vector<int64_t> was = l;
    l.resize(static_cast<size_t>(batch));
    for (size_t b = was.size(); b < l.size(); ++b) l[b] = was[b % was.size()];
  }
  p.batch = batch;
  normalize(p);
}
}  // namespace

Case load_case(const Case& c, const ProblemSpace& space, const CampaignOptions& opt) {
  Case out = c;
  Problem& p = out.problem;
  const TileShape t = tile_for(space, p.head_dim_qk);
  const int64_t step = std::lcm(std::lcm(t.block_q, t.block_kv), std::max<int64_t>(1, space.seq_multiple));
  // The same multiple of `step` on both lengths keeps Sq, Skv and Skv − Sq in their residue
  // classes modulo both tiles: the boundary the generator aimed at survives the growth (and
  // lengths stay multiples of the kernel's declared one, Sq = Skv where it declares them equal).
  int64_t add = 0;
  while (std::min(p.seq_q, p.seq_kv) + add < opt.load_min_seq && std::max(p.seq_q, p.seq_kv) + add + step <= space.max_seq)
    add += step;
  add_length(p, add);
  if (p.batch * p.heads_q < opt.load_min_bh) set_batch(p, (opt.load_min_bh + p.heads_q - 1) / p.heads_q);
  auto work = [](const Problem& q) {
    return static_cast<double>(q.batch * q.heads_q) * static_cast<double>(q.seq_q) * static_cast<double>(q.seq_kv) *
           static_cast<double>(q.head_dim_qk + q.head_dim_v);
  };
  while (work(p) > opt.max_work && p.batch > 1) set_batch(p, std::max<int64_t>(1, p.batch / 2));
  while (work(p) > opt.max_work && std::min(p.seq_q, p.seq_kv) > step) add_length(p, -step);
  return out;
}

Case big_case(const Case& c, const ProblemSpace& space, const CampaignOptions& opt) {
  CampaignOptions grow = opt;
  grow.load_min_seq = opt.big_min_seq;
  grow.load_min_bh = 1;
  grow.max_work = std::numeric_limits<double>::infinity();
  Case out = load_case(c, space, grow);
  Problem& p = out.problem;
  const double per_batch = static_cast<double>(std::max({p.heads_q * p.seq_q * p.head_dim_qk, p.heads_kv * p.seq_kv * p.head_dim_qk,
                                                          p.heads_kv * p.seq_kv * p.head_dim_v, p.heads_q * p.seq_q * p.head_dim_v}));
  set_batch(p, static_cast<int64_t>(std::floor(opt.big_min_elems / per_batch)) + 1);
  return out;
}

double host_bytes_for(const Problem& p, int64_t max_rows) {
  const double in = static_cast<double>(p.q_elems() + p.k_elems() + p.v_elems()), o = static_cast<double>(p.o_elems());
  const double db = dtype_bytes(p.dtype);
  const double rows = static_cast<double>(p.batch * p.heads_q) * static_cast<double>(std::min(p.seq_q, max_rows + 256));
  // fp32 inputs; dtype copies of inputs and output in the harness (and its worker's shared
  // buffers, twice); the widened output; oracle (fp64) and baseline (fp32) rows.
  return in * (4 + 2 * db) + o * (4 + 2 * db + 4) + rows * static_cast<double>(p.head_dim_v) * 12;
}

namespace {
double available_host_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  double kb = 0;
  while (f >> key >> kb) {
    if (key == "MemAvailable:") return kb * 1024;
    f.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  return std::numeric_limits<double>::infinity();  // not Linux: no estimate to refuse on
}
}  // namespace

Case campaign_case(const ProblemSpace& space, uint64_t seed, int64_t index) {
  // SplitMix64 of (seed, index): case i is the same wherever and in whichever shard it runs.
  uint64_t z = seed * 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(index) + 0x632BE59BD9B4E019ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  z ^= z >> 31;
  if (space.wide_every > 0 && index % space.wide_every == space.wide_every - 1) {
    // A wide case is a dense batch (batch entries are what it multiplies): drawn from the space
    // without listed batches (varlen, paged caches, seqused), where the space has dense layouts.
    ProblemSpace dense = space;
    std::erase(dense.layouts, Layout::thd);
    dense.paged = dense.seqused = false;
    if (!dense.layouts.empty())
      if (std::optional<Case> wide = wide_case(gen_case(dense)(rc::Random(z), rc::kNominalSize).value(), dense)) return *wide;
  }
  return gen_case(space)(rc::Random(z), rc::kNominalSize).value();
}

Case campaign_case(const ProblemSpace& space, uint64_t seed, int64_t index, const VariantSelection& sel) {
  if (sel.required.empty()) return campaign_case(space, seed, index);
  // Wide cases are dense: where every case must be a listed batch, none is drawn wide.
  ProblemSpace s = space;
  if (sel.required.count(VariantName::varlen) || sel.required.count(VariantName::paged) || sel.required.count(VariantName::seqused))
    s.wide_every = 0;
  // Each variant is on in about half the draws: redrawing until every required one is on takes
  // 2^k draws for k of them, and drawing is cheap (no inputs yet). Attempt a of case i is a case of
  // its own seed, so case i stays the same in every shard.
  constexpr int kAttempts = 1 << 14;
  for (int a = 0; a < kAttempts; ++a) {
    Case c = campaign_case(s, seed ^ (0xA24BAED4963EE407ULL * static_cast<uint64_t>(a + 1)), index);
    if (sel.meets(c.problem)) return c;
  }
  throw CannotTest("no case with every required variant could be drawn in " + std::to_string(kAttempts) +
                   " attempts (do the kernel's declared dtypes and layouts allow them together?)");
}

std::string repro_command(const std::string& variant, const Case& c, const std::string& plugin, bool backward) {
  std::ostringstream os;
  os << "flashcheck run " << (backward ? "--backward " : "") << "--kernel " << variant;
  if (!plugin.empty()) os << " --plugin " << shell_word(plugin);  // a path with spaces still runs
  os << " --problem \"" << to_string(c.problem) << "\" --dist " << to_string(c.dist) << " --input-seed " << c.seed;
  return os.str();
}

std::vector<std::string> CaseOutcome::failed() const {
  if (!backward) return report.failed();
  std::vector<std::string> f = backward->failed();
  for (const std::string& c : report.failed()) f.push_back("forward: " + c);
  return f;
}

std::string to_text(const CaseOutcome& o, bool repro) {
  Report shown = o.report;
  if (!repro) shown.repro.clear();
  std::string t = to_text(shown);
  if (o.backward) {
    BackwardReport b = *o.backward;
    if (!repro) b.repro.clear();
    t += to_text(b);
  }
  return t;
}

CaseRunner forward_runner(const Variant& v, const CampaignOptions& opt, bool backward_inputs) {
  CaseRunner r;
  r.space = v.caps();
  r.run = [&v, max_rows = opt.max_rows, plugin = opt.plugin, oracle = opt.oracle, backward_inputs](
              const Case& c, KernelWorker* worker, const WaitingFn& waiting, bool maps) {
    return run_case(v, c, max_rows, plugin, worker, waiting, maps, oracle, backward_inputs);
  };
  return r;
}

SupportsAnswer supports_of(const Variant& v, const Problem& p, KernelWorker* worker) {
  if (worker) return worker->supports(p);
  SupportsAnswer a;
  a.refusal = v.unsupported(p);
  return a;
}

bool ended_by_supports(const SupportsAnswer& a, CaseOutcome& out, const UnjudgedFn& unjudged) {
  if (a.abnormal) {  // its supports() crashed or hung: the kernel's failure, like its forward()'s
    out.abnormal = a.abnormal;
    unjudged(a.abnormal->criterion, a.abnormal->detail);
  } else if (a.error) {
    out.error = *a.error;
    unjudged("kernel_error", *a.error);
  } else if (a.refusal) {
    out.skipped = *a.refusal;
  }
  return a.abnormal || a.error || a.refusal;
}

bool ended_by_run(const IsolatedRun& r, CaseOutcome& out, const UnjudgedFn& unjudged) {
  if (r.abnormal && !r.in_backward) {
    out.abnormal = r.abnormal;
    unjudged(r.abnormal->criterion, r.abnormal->detail);
    return true;
  }
  if (r.error) {
    out.error = *r.error;
    unjudged("kernel_error", *r.error);
    return true;
  }
  return false;
}

std::optional<HarnessResult> run_in_process(const std::function<HarnessResult()>& run, CaseOutcome& out, const UnjudgedFn& unjudged) {
  try {
    return run();
  } catch (const Declined& e) {
    out.skipped = e.what();
  } catch (const InvalidProblem&) {
    throw;  // the problem or its inputs cannot be staged: nothing was tested (125), as isolated
  } catch (const std::exception& e) {
    out.error = e.what();
    unjudged("kernel_error", e.what());
  }
  return std::nullopt;
}

CaseOutcome run_case(const Variant& v, const Case& c, int64_t max_rows, const std::string& plugin, KernelWorker* worker,
                     const WaitingFn& waiting, bool maps_on_failure, OracleChoice oracle, bool backward_inputs) {
  CaseOutcome out;
  out.c = c;
  const Problem& p = c.problem;
  // A case that produced no output to judge: one failed criterion says why, and nothing else is
  // reported (no metrics of an output that does not exist).
  auto unjudged = [&](const std::string& criterion, const std::string& detail) {
    out.report.problem = p;
    out.report.criteria.push_back({criterion, false, 1, 0, detail});
    out.report.repro = repro_command(v.name(), c, plugin);
  };
  if (ended_by_supports(supports_of(v, p, worker), out, unjudged)) return out;
  const Inputs in = make_inputs(p, c.seed, c.dist, backward_inputs);
  HarnessResult h;
  double kernel_seconds = 0;
  if (worker) {
    IsolatedRun r = worker->run(p, in, waiting);
    if (ended_by_run(r, out, unjudged)) return out;
    h = std::move(*r.result);
    kernel_seconds = r.kernel_seconds;
  } else {
    std::optional<HarnessResult> got = run_in_process([&] { return run_variant(v, p, in); }, out, unjudged);
    if (!got) return out;
    h = std::move(*got);
  }
  out.report = judge(p, in, h.output(), v.declared(p), JudgeOptions{max_rows, false, oracle});
  if (maps_on_failure && !out.report.pass())
    out.report = judge(p, in, h.output(), v.declared(p), JudgeOptions{max_rows, true, oracle});
  out.report.repro = repro_command(v.name(), c, plugin);
  out.passed = out.report.pass();
  // Only a correct output says how long the kernel needs: a wrong one may have skipped the work.
  if (worker && out.passed) worker->time_limit().passed(p, kernel_seconds);
  return out;
}

std::string to_text(const Reproduction& r) {
  return "failed " + std::to_string(r.failed) + " of " + std::to_string(r.runs) + " re-run" + (r.runs == 1 ? "" : "s") +
         (r.fresh_processes ? r.runs == 1 ? " in a fresh process" : ", each in a fresh process" : " in this process");
}

Reproduction reproduce_case(const Variant& v, const Case& c, int runs, int64_t max_rows, const std::string& plugin,
                            const IsolationOptions& isolation, const CaseTimeLimit* limit, OracleChoice oracle) {
  CampaignOptions opt;
  opt.max_rows = max_rows;
  opt.plugin = plugin;
  opt.oracle = oracle;
  return reproduce_case(v, forward_runner(v, opt), c, runs, plugin, isolation, limit);
}

Reproduction reproduce_case(const Variant& v, const CaseRunner& run, const Case& c, int runs, const std::string& plugin,
                            const IsolationOptions& isolation, const CaseTimeLimit* limit) {
  Reproduction r;
  r.fresh_processes = isolation.enabled;
  for (int i = 0; i < runs; ++i) {
    // A fresh process: nothing the kernel cached, forked or left behind in an earlier call survives.
    std::unique_ptr<KernelWorker> fresh;
    if (isolation.enabled) {
      fresh = std::make_unique<KernelWorker>(v, plugin, isolation);
      if (limit) fresh->time_limit() = *limit;
    }
    const CaseOutcome o = run.run(c, fresh.get(), {}, false);
    ++r.runs;
    r.failed += !o.passed && !o.skipped;
  }
  return r;
}

CaseOutcome shrink_failure(const Variant& v, CaseOutcome failing, int64_t max_rows, const std::string& plugin,
                           int max_steps, KernelWorker* worker, double budget_s, OracleChoice oracle, const ShrinkStepFn& on_step) {
  CampaignOptions opt;
  opt.max_rows = max_rows;
  opt.plugin = plugin;
  opt.oracle = oracle;
  return shrink_failure(forward_runner(v, opt), std::move(failing), max_steps, worker, budget_s, on_step);
}

CaseOutcome shrink_failure(const CaseRunner& r, CaseOutcome failing, int max_steps, KernelWorker* worker, double budget_s,
                           const ShrinkStepFn& on_step) {
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  auto over_budget = [&] { return budget_s > 0 && elapsed() > budget_s; };
  // Each candidate of a hang that hangs too costs its whole time limit: one that would end past
  // the budget is not started, so the budget holds.
  const bool hang = failing.abnormal && failing.abnormal->timed_out;
  int steps = 0;
  bool improved = true;
  while (improved && steps < max_steps && !over_budget()) {
    improved = false;
    std::vector<Case> cands;
    // Plain normal inputs first: most bugs show on them at any size, while on a hostile
    // distribution a bug may show only where the data happens to expose it (dropping the last key
    // matters under `large` only where that key is a row's lone max), and shrinking there spent
    // the step budget on candidates whose data hid the bug (CApi test, seed 15238225390728038508).
    // A hang affords only a few candidates: the smallest problems first, the inputs last.
    const bool try_normal = failing.c.dist != Dist::normal;
    if (try_normal && !hang) cands.push_back({failing.c.problem, Dist::normal, failing.c.seed});
    std::vector<Problem> fewer = smaller_problems(failing.c.problem, r.space);
    if (hang) std::stable_sort(fewer.begin(), fewer.end(), [](const Problem& a, const Problem& b) { return a.flops() < b.flops(); });
    for (const Problem& p : fewer) cands.push_back({p, failing.c.dist, failing.c.seed});
    if (try_normal && hang) cands.push_back({failing.c.problem, Dist::normal, failing.c.seed});
    for (const Case& c : cands) {
      if (++steps > max_steps || over_budget()) break;
      if (hang && worker && budget_s > 0 && elapsed() + worker->timeout_for(c.problem) > budget_s) {
        steps = max_steps;  // no candidate fits what is left
        break;
      }
      CaseOutcome o = r.run(c, worker, {}, false);
      if (on_step) on_step(steps, elapsed(), o);
      if (!o.passed && !o.skipped) {
        failing = std::move(o);
        improved = true;
        break;
      }
    }
  }
  return failing;
}

Coverage coverage_of(const ProblemSpace& space) {
  Coverage c;
  c.axes = {"dtype", "head_dim", "causal", "heads"};
  for (DType d : space.dtypes) c.declared["dtype"].emplace_back(to_string(d));
  for (int64_t d : space.head_dims) c.declared["head_dim"].push_back(std::to_string(d));
  for (Causal k : space.causals) c.declared["causal"].emplace_back(to_string(k));
  c.declared["heads"] = space.max_group > 1 ? std::vector<std::string>{"MHA", "GQA", "MQA"} : std::vector<std::string>{"MHA"};
  // Problem model 2: the variants a case combines, an open axis (its values are the combinations
  // drawn: the product of every declared variant would swamp the table), shown when any is drawn.
  if (space.variants()) c.axes.push_back("variants");
  return c;
}

Coverage::Point coverage_point(const Problem& p) {
  return {{"dtype", std::string(to_string(p.dtype))},
          {"head_dim", std::to_string(p.head_dim_qk)},
          {"causal", std::string(to_string(p.causal))},
          {"heads", p.heads_q == p.heads_kv ? "MHA" : p.heads_kv == 1 ? "MQA" : "GQA"},
          {"variants", variants_text(p)}};
}

namespace {

// A failing case as the campaign keeps it: shrunk within its budget (progress on stderr), with the
// HTML page's error maps, and re-run from scratch before its reproduce line is printed.
CaseOutcome keep_failure(const Variant& v, const CaseRunner& run, CaseOutcome o, int64_t index, const CampaignOptions& opt,
                         KernelWorker* worker, Progress& progress, std::ostream& log) {
  const bool hang = o.abnormal && o.abnormal->timed_out;
  double budget = opt.shrink_budget_s;
  if (budget <= 0 && worker) {
    const double limit = worker->timeout_for(o.c.problem);
    budget = hang ? std::min(60.0, 2 * limit) : std::max(20.0, 2 * limit);
  }
  CaseOutcome shrunk = o;
  if (opt.shrink) {
    if (hang) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "  shrinking the hang for at most %.0f s (a candidate that hangs costs its time limit)", budget);
      log << buf << std::endl;
    }
    const auto step = [&](int n, double elapsed, const CaseOutcome& cand) {
      char buf[400];
      std::snprintf(buf, sizeof buf, "%s shrinking case %lld: candidate %d, %.0f s of at most %.0f s: %s %s", v.name().c_str(),
                    static_cast<long long>(index), n, elapsed, budget, to_string(cand.c.problem).c_str(),
                    cand.passed ? "passes" : cand.skipped ? "skipped" : cand.abnormal ? cand.abnormal->detail.c_str() : "fails");
      progress.update(buf);
    };
    shrunk = shrink_failure(run, std::move(o), 200, worker, budget, step);
    progress.finish();
  }
  // The HTML page needs the error maps: the kept case runs once more, in the same worker
  // (isolated like every run), and is judged with them.
  if (opt.error_maps && shrunk.judged())
    if (CaseOutcome again = run.run(shrunk.c, worker, {}, true); again.report.maps) shrunk.report = std::move(again.report);
  const std::string cmd = repro_command(v.name(), shrunk.c, opt.plugin, run.backward);
  if (opt.confirm_runs <= 0) {
    log << to_text(shrunk) << "  reproduce (shrunk): " << cmd << "\n";
    return shrunk;
  }
  const bool shrunk_hang = shrunk.abnormal && shrunk.abnormal->timed_out;
  shrunk.reproduced = reproduce_case(v, run, shrunk.c, shrunk_hang ? 1 : opt.confirm_runs, opt.plugin, opt.isolation,
                                     worker ? &worker->time_limit() : nullptr);
  const Reproduction& r = *shrunk.reproduced;
  if (r.confirmed()) {
    log << to_text(shrunk) << "  reproduce (shrunk; " << to_text(r) << "): " << cmd << "\n";
  } else {
    // Not a reproduction: no plain "reproduce:" line for it anywhere in the text.
    log << to_text(shrunk, false) << "  FLAKY: " << to_text(r)
        << "; the command may pass (a kernel that caches by pointer, races, or depends on its process's history): " << cmd << "\n";
  }
  return shrunk;
}

}  // namespace

VariantSummary run_campaign(const Variant& v, const CampaignOptions& opt, std::ostream& log) {
  return run_campaign(v, forward_runner(v, opt), opt, log);
}

VariantSummary run_campaign(const Variant& v, const CaseRunner& run, const CampaignOptions& opt, std::ostream& log) {
  VariantSummary s;
  s.name = v.name();
  if (auto why = v.unavailable()) {
    s.unavailable = *why;
    return s;
  }
  if (auto why = opt.variants.refusal(run.space)) {
    s.unavailable = *why;
    return s;
  }
  if ((opt.load || opt.big) && !opt.variants.required.empty()) {
    s.unavailable = "--require with --load or --big: grown campaigns draw plain problems only";
    return s;
  }
  const ProblemSpace space = space_for(run.space, opt);
  if (space.dtypes.empty()) {
    s.unavailable = "declares none of the requested dtypes";
    return s;
  }
  s.coverage = coverage_of(space);
  std::unique_ptr<KernelWorker> worker;
  if (opt.isolation.enabled) worker = std::make_unique<KernelWorker>(v, opt.plugin, opt.isolation);
  bool kept_hang = false;
  Progress progress(opt.progress);
  const auto t0 = std::chrono::steady_clock::now();
  auto line = [&](int64_t i) {
    char buf[200];
    std::snprintf(buf, sizeof buf, "%s case %lld/%lld  pass %lld  fail %lld  skip %lld  (%.0f s)", s.name.c_str(),
                  static_cast<long long>(i + 1), static_cast<long long>(opt.cases), static_cast<long long>(s.passed),
                  static_cast<long long>(s.failed), static_cast<long long>(s.skipped),
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    return std::string(buf);
  };
  for (int64_t i = 0; i < opt.cases; ++i) {
    if (i % opt.shard_count != opt.shard_index) continue;
    if (s.timed_out >= opt.max_timeouts) {
      ++s.not_run;
      continue;
    }
    const Case drawn = campaign_case(space, opt.seed, i, opt.variants);
    const Case c = opt.big ? big_case(drawn, space, opt) : opt.load ? load_case(drawn, space, opt) : drawn;
    if (opt.big) {
      const double need = host_bytes_for(c.problem, opt.max_rows);
      const double have = opt.host_memory_budget > 0 ? opt.host_memory_budget : 0.75 * available_host_bytes();
      if (need > have) {
        CaseOutcome skip;
        skip.skipped = "needs more host memory than is usable";
        count_case(s, verdict_of(i, c, skip));
        progress.finish();
        char buf[160];
        std::snprintf(buf, sizeof buf, " needs ~%.1f GB of host memory, %.1f GB usable: not run (cannot test)\n", need / 1e9, have / 1e9);
        log << s.name << " case " << i << " " << to_string(c.problem) << buf;
        continue;
      }
      // Say what each big case is: a pass means something only with the size it passed at.
      progress.finish();
      const Problem& bp = c.problem;
      log << s.name << " case " << i << ": " << to_string(bp) << " dist=" << to_string(c.dist) << ", largest tensor "
          << std::max({bp.q_elems(), bp.k_elems(), bp.v_elems(), bp.o_elems()}) << " elements\n";
    }
    const WaitingFn waiting = [&](double el) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "  [this case running %.0f s]", el);
      progress.update(line(i) + buf);
    };
    CaseOutcome o = run.run(c, worker.get(), waiting, false);
    const CaseVerdict verdict = verdict_of(i, c, o);
    count_case(s, verdict);
    if (verdict.kind == CaseVerdict::Kind::failed) {
      progress.finish();
      log << "\n" << s.name << " case " << i << " FAILED: " << to_string(c.problem) << " dist=" << to_string(c.dist);
      if (o.abnormal) log << ": " << o.abnormal->detail;
      log << "\n";
      const Keep keep = keep_failure_rule(verdict, static_cast<int64_t>(s.failures.size()), kept_hang, opt.max_failures_kept);
      if (keep == Keep::hang_kept_already) {
        log << "  not kept: a hang of this kernel is kept already (shrinking and re-running another costs minutes)\n";
      } else if (keep == Keep::yes) {
        kept_hang |= o.abnormal && o.abnormal->timed_out;
        s.failures.push_back(keep_failure(v, run, std::move(o), i, opt, worker.get(), progress, log));
        s.repro.push_back(repro_command(s.name, s.failures.back().c, opt.plugin, run.backward));
        s.failure_cases.push_back(i);
      }
      log.flush();
      if (opt.fail_fast) break;
    }
    progress.update(line(i));
  }
  progress.finish();
  if (worker)
    if (auto bad = worker->unload()) {
      s.unload_failure = bad->detail;
      log << "\n" << s.name << " FAILED at the end: its plugin " << bad->detail << "\n";
    }
  finish_counts(s);
  return s;
}

}  // namespace flashcheck
