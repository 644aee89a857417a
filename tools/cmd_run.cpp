// `flashcheck run` (campaigns), `flashcheck bench` (speed) and `flashcheck determinism`.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <thread>

#include "runner/backward_campaign.h"
#include "runner/campaign.h"
#include "runner/campaign_json.h"
#include "runner/bench.h"
#include "runner/device.h"
#include "runner/harness.h"
#include "runner/isolation.h"
#include "runner/variant_selection.h"
#include "tools/campaign_end.h"
#include "tools/commands.h"
#include "tools/gpus.h"
#include "tools/selected_kernels.h"
#include "tools/strict_options.h"
#include "tools/output.h"
#include "reference/gpu_oracle.h"
#include "verify/check_file.h"
#include "verify/backward_report.h"
#include "verify/report_junit.h"

namespace flashcheck::cli {

namespace {

// `run --backward` with options it cannot honour: refused before anything runs (125).
void refuse_for_backward(const CampaignOptions& c) {
  if (auto why = backward_campaign_refusal(c)) throw CannotTest(*why);
}

// A backward campaign's kernels: a named one must have a backward pass; `all` keeps those that do.
void keep_backward_kernels(std::vector<Selected>& variants, const std::string& which) {
  std::vector<Selected> kept;
  std::string without;
  for (Selected& s : variants) {
    if (s.v->backward_caps()) kept.push_back(std::move(s));
    else without += (without.empty() ? "" : ", ") + s.v->name();
  }
  if (kept.empty())
    throw CannotTest(which == "all" ? "--backward: no kernel has a backward pass (" + without + " have none)"
                                    : "kernel " + which + " has no backward pass");
  variants = std::move(kept);
}

// For work that prints nothing for long stretches (one benchmark measurement): a line on stderr
// every few seconds, from a thread, until it is destroyed.
class Heartbeat {
 public:
  explicit Heartbeat(std::string what, double every_s = 5) : what_(std::move(what)) {
    thread_ = std::thread([this, every_s] {
      const auto t0 = std::chrono::steady_clock::now();
      std::unique_lock<std::mutex> lock(m_);
      while (!cv_.wait_for(lock, std::chrono::duration<double>(every_s), [this] { return done_; }))
        std::fprintf(stderr, "%s: still running (%.0f s)\n", what_.c_str(),
                     std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    });
  }
  ~Heartbeat() {
    {
      std::lock_guard<std::mutex> lock(m_);
      done_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }

 private:
  std::string what_;
  std::mutex m_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

}  // namespace

void add_run(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("run", "fuzz campaign: random problems against the oracle, per kernel, failures shrunk");
  struct Opts {
    std::string kernel = "all", shard = "0/1", json, problem, dist = "normal", oracle_name = "auto";
    std::vector<std::string> plugins, dtypes;
    std::string variants_allowed, variants_required;
    CampaignOptions c;
    uint64_t input_seed = 1;
    double timeout = 0, load_timeout = 0;
    bool no_shrink = false, no_isolation = false, backward = false;
    std::string html, gpus, junit;
    double worker_timeout = 0;
  };
  auto o = std::make_shared<Opts>();
  constexpr uint64_t kMaxU64 = ~uint64_t{0};
  cmd->add_option("--kernel", o->kernel, "kernel name, or all (default)");
  cmd->add_option("--plugin", o->plugins,
                  "shared library exporting kernels through gpu/plugin/flashcheck_plugin.h (a path, relative to the "
                  "working directory)")->check(printable_path());
  cmd->add_option("--cases", o->c.cases, "problems per kernel (default 200)")->check(whole_number(1, 1000000000));
  cmd->add_option("--seed", o->c.seed, "campaign seed: same seed and shard, same problems everywhere")
      ->check(whole_number(0, kMaxU64));
  cmd->add_option("--shard", o->shard, "i/N: take cases c with c % N == i")->check(shard_spec());
  cmd->add_option("--dtype", o->dtypes, "only these dtypes (f32, f16, bf16); default: all a kernel declares");
  cmd->add_option("--variants", o->variants_allowed,
                  "only these of the variants a kernel declares (comma-separated: window, softcap, alibi, sinks, varlen, "
                  "paged, seqused, bshd, fp8; all or none); default: all it declares");
  cmd->add_option("--require", o->variants_required,
                  "every case has each of these variants (same names); a kernel that does not declare one is reported "
                  "unavailable");
  cmd->add_option("--max-seq", o->c.max_seq, "longest sequence drawn (default 300)")->check(whole_number(1, int64_t{1} << 31));
  cmd->add_option("--max-work", o->c.max_work, "per-case cap on B*Hq*Sq*Skv*(Dqk+Dv) (default 3e7)")
      ->check(positive_number(1e18));
  cmd->add_option("--json", o->json, "write the summary as JSON to PATH, or - for stdout (the text then goes to stderr)");
  cmd->add_option("--html", o->html, "write an HTML report (error heatmaps) per kept failure into directory DIR");
  cmd->add_option("--junit", o->junit,
                  "write a JUnit XML report to PATH for CI dashboards: a testsuite per kernel, a testcase per group of "
                  "cases and per failure (with its reproduce line)");
  cmd->add_option("--problem", o->problem, "run this one problem instead of a campaign (as printed by a failure)");
  cmd->add_option("--dist", o->dist, "input distribution for --problem");
  cmd->add_option("--input-seed", o->input_seed, "input seed for --problem")->check(whole_number(0, kMaxU64));
  cmd->add_option("--timeout", o->timeout,
                  "seconds one case may run before it is failed as a hang (default: learned per kernel, 10x its slowest "
                  "passing case and at least 5 s; 15 s plus time for the problem's work before any case passed)")
      ->check(positive_number(1e6));
  cmd->add_option("--load-timeout", o->load_timeout, "seconds a plugin may take to load (default 60)")->check(positive_number(1e6));
  cmd->add_flag("--no-shrink", o->no_shrink, "report failures as drawn");
  cmd->add_flag("--backward", o->backward,
                "campaign of each kernel's backward pass: its forward feeds its backward, dO from the case's seed, dQ, dK, "
                "dV (and the sinks' gradient) judged against the fp64 backward oracle apart from the forward's output; a "
                "kernel that declares a deterministic backward is called 3 times and must give the same bits");
  cmd->add_flag("--load", o->c.load,
                "production load: cases grown (keeping their tile-boundary residues) to B*Hq >= 32 and sequences >= 1000; "
                "defaults become --max-seq 4096 --max-work 1e10 --max-rows 512 (sampled rows keep every q-tile's edges)");
  cmd->add_option("--oracle", o->oracle_name,
                  "fp64 truth and baseline on: auto (the GPU for large problems when one is usable), cpu, gpu")
      ->check(CLI::IsMember({"auto", "cpu", "gpu"}));
  cmd->add_flag("--big", o->c.big,
                "big tensors: cases grown (keeping their residues) to sequences >= 512 and then in batch until the largest of "
                "q, k, v, o exceeds 2^31 elements; 16 sampled rows per (b,h) plus every q-tile's edges, GPU oracle when present; "
                "a case that would not fit host memory is not run");
  cmd->add_flag("--fail-fast", o->c.fail_fast, "stop a kernel's campaign at its first failing case (mutation testing)");
  cmd->add_flag("--no-isolation", o->no_isolation,
                "run kernels inside flashcheck's own process (debugging: a crash or hang then takes flashcheck down)");
  cmd->add_option("--gpus", o->gpus,
                  "all, N or a LIST such as 0,1: one worker process per GPU, each pinned with CUDA_VISIBLE_DEVICES and "
                  "running shard k/N of the campaign; results merged (same seed, same cases and verdicts as one GPU)");
  cmd->add_option("--worker-timeout", o->worker_timeout, "seconds a --gpus worker may run before it is killed and its cases fail")
      ->check(positive_number(1e7));
  cmd->callback([o, cmd, &action] {
    action = [o, cmd] {
      CommandOutputs outputs("run", o->json, {}, o->junit);
      return outputs.run([&] {  // all of the command runs under the exit-code contract (tools/output.h)
      // Report paths first: a campaign whose reports cannot be written is refused before it runs.
      outputs.require_writable();
      if (!o->html.empty()) require_writable_dir("--html", o->html);
      if (o->backward) refuse_for_backward(o->c);
      if (!o->gpus.empty() || o->worker_timeout > 0)  // a worker per GPU, each a `run --shard k/N` (tools/gpus.h)
        return run_on_gpus({o->gpus, o->worker_timeout, o->html, cmd->count("--shard") > 0, !o->problem.empty()}, outputs);
      if (!parse_shard_text(o->shard, o->c.shard_index, o->c.shard_count))  // checked at parse time too
        throw CannotTest("--shard expects i/N with 0 <= i < N, got " + quote_value(o->shard));
      o->c.shrink = !o->no_shrink;
      o->c.error_maps = !o->html.empty();
      o->c.oracle = o->oracle_name == "cpu" ? OracleChoice::cpu : o->oracle_name == "gpu" ? OracleChoice::gpu : OracleChoice::automatic;
      if (o->c.oracle == OracleChoice::gpu)
        if (auto why = gpu_oracle_unavailable()) throw CannotTest("--oracle gpu: " + *why);
      if (o->c.load) {  // defaults that fit production load, unless given
        if (cmd->count("--max-seq") == 0) o->c.max_seq = 4096;
        if (cmd->count("--max-work") == 0) o->c.max_work = 1e10;
        o->c.max_rows = 512;
      }
      if (o->c.big) {
        if (o->c.load) throw CannotTest("--big and --load are two different campaigns: give one");
        o->c.max_rows = 16;
        if (cmd->count("--max-seq") == 0) o->c.max_seq = 2048;
        if (cmd->count("--max-work") == 0) o->c.max_work = 1e13;  // the draw's cap; the batch grows after it
      }
      o->c.dtypes.clear();
      for (const auto& d : o->dtypes) o->c.dtypes.push_back(parse_dtype(d));
      try {
        if (cmd->count("--variants")) o->c.variants.allowed = parse_variant_list(o->variants_allowed);
        if (cmd->count("--require")) o->c.variants.required = parse_variant_list(o->variants_required);
      } catch (const std::invalid_argument& e) {
        throw CannotTest(std::string("--variants/--require: ") + e.what());
      }
      o->c.isolation = isolation_from(o->no_isolation, o->timeout, o->load_timeout, "run");
      o->c.confirm_runs = 3;  // no reproduce line without its re-runs
      auto variants = select(o->kernel, o->plugins, true, o->no_isolation ? nullptr : &o->c.isolation);
      if (o->backward) keep_backward_kernels(variants, o->kernel);
      if (!o->problem.empty()) {  // one case: the reproduction of a failure
        Case c{parse_problem(o->problem), parse_dist(o->dist), o->input_seed};
        int rc = kCannotTest;
        std::optional<std::string> page_error;
        nlohmann::json j{{"problem", to_string(c.problem)}, {"dist", std::string(to_string(c.dist))}, {"input_seed", c.seed}};
        j["variants"] = nlohmann::json::array();
        std::vector<JunitSuite> suites;  // --junit: a suite per kernel, its one case named by the problem
        for (auto& [v, plugin] : variants) {
          JunitSuite& suite = suites.emplace_back();
          suite.name = v->name();
          const std::string classname = "flashcheck." + v->name(), case_name = to_string(c.problem);
          if (auto why = v->unavailable()) {
            std::cout << v->name() << ": unavailable (" << printable_line(*why) << ")\n";
            j["variants"].push_back({{"name", v->name()}, {"unavailable", *why}});
            suite.cases.push_back({classname, case_name, JunitCase::Outcome::skipped, "unavailable: " + printable_line(*why)});
            continue;
          }
          std::unique_ptr<KernelWorker> worker;
          if (o->c.isolation.enabled) worker = std::make_unique<KernelWorker>(*v, plugin, o->c.isolation);
          CampaignOptions one = o->c;
          one.plugin = plugin;
          one.max_rows = kDefaultMaxRows;
          const CaseRunner runner = o->backward ? backward_runner(*v, one) : forward_runner(*v, one);
          CaseOutcome out = runner.run(c, worker.get(), {}, !o->html.empty());
          const std::optional<AbnormalEnd> unloaded = worker ? worker->unload() : std::nullopt;
          if (out.skipped && !unloaded) {
            std::cout << v->name() << ": skipped (" << printable_line(*out.skipped) << ")\n";
            j["variants"].push_back({{"name", v->name()}, {"skipped", *out.skipped}});
            suite.cases.push_back({classname, case_name, JunitCase::Outcome::skipped, printable_line(*out.skipped)});
            continue;
          }
          nlohmann::json entry{{"name", v->name()}};
          bool passed = !unloaded;
          if (!out.skipped) {
            passed &= out.passed;
            // A failure is run again from scratch before it is called reproduced (a hang once).
            if (!out.passed)
              out.reproduced = reproduce_case(*v, runner, c, out.abnormal && out.abnormal->timed_out ? 1 : o->c.confirm_runs, plugin,
                                              o->c.isolation);
            Report shown = out.report;
            if (out.reproduced && !out.reproduced->confirmed()) shown.repro.clear();
            std::cout << v->name() << ": " << to_text(printable_report(shown));
            if (out.backward) {  // the gradients' verdict, apart from the forward's
              BackwardReport b = *out.backward;
              if (out.reproduced && !out.reproduced->confirmed()) b.repro.clear();
              std::cout << v->name() << ": " << to_text(b);
            }
            if (out.reproduced)
              std::cout << (out.reproduced->confirmed() ? "  reproduced: " : "  FLAKY: ") << to_text(*out.reproduced)
                        << (out.reproduced->confirmed() ? "\n" : "; the command may pass\n");
            entry["report"] = to_json(out.report);
            if (out.backward) entry["backward"] = to_json(*out.backward);
            if (out.reproduced) entry["reproduced"] = to_json(*out.reproduced);
            const bool flaky = out.reproduced && !out.reproduced->confirmed();
            const std::string note = flaky ? "flaky (" + to_text(*out.reproduced) + ")" : "";
            suite.cases.push_back(out.backward ? report_case(out.report, *out.backward, classname, case_name, out.report.repro, note)
                                               : report_case(out.report, classname, case_name, out.report.repro, note));
            if (!o->html.empty() && !out.passed) {
              try {  // a page that cannot be written does not cost the JSON
                write_case_html(out, std::filesystem::path(o->html) / (v->name() + ".html"));
              } catch (const std::exception& e) {
                if (!page_error) page_error = e.what();
              }
            }
          } else {
            entry["skipped"] = *out.skipped;
            suite.cases.push_back({classname, case_name, JunitCase::Outcome::skipped, printable_line(*out.skipped)});
          }
          if (unloaded) {
            std::cout << v->name() << ": FAILED: its plugin " << printable_line(unloaded->detail) << "\n";
            entry["unload_failure"] = unloaded->detail;
            suite.cases.push_back({classname, "unload", JunitCase::Outcome::failed, "its plugin " + printable_line(unloaded->detail),
                                   "unload_failure", "its plugin " + unloaded->detail + "\n"});
          }
          j["variants"].push_back(entry);
          rc = (rc == kMismatch || !passed) ? int{kMismatch} : int{kPass};
        }
        std::cout.flush();
        if (outputs.junit_wanted()) {
          if (page_error) suites.push_back(cannot_test_suite("run", *page_error));
          try {  // before the JSON, which then says that it could not be written
            outputs.write_junit(junit_xml("flashcheck run --problem", suites));
          } catch (const std::exception& e) {
            if (!page_error) page_error = e.what();
          }
        }
        if (page_error) j.update(error_json(*page_error));
        if (outputs.json_wanted()) outputs.write_json(j);
        if (page_error) throw CannotTest(*page_error);
        return rc;
      }
      std::vector<VariantSummary> all;
      // A failure of flashcheck itself (not of a kernel: those are verdicts) still leaves the
      // summary of the kernels done so far and the JSON, then exits 125.
      std::optional<std::string> error;
      try {
        // The log quotes kernels' error texts: printed without their escape sequences.
        FilteredOutput filtered(std::cout.rdbuf());
        std::ostream log(&filtered);
        for (auto& [v, plugin] : variants) {
          o->c.plugin = plugin;  // per variant: its worker loads it, its reproduce lines name it
          all.push_back(o->backward ? run_campaign(*v, backward_runner(*v, o->c), o->c, log) : run_campaign(*v, o->c, log));
        }
      } catch (const std::exception& e) {
        error = e.what();
      }
      CampaignReport report;
      report.campaign = campaign_identity(o->c, o->kernel, o->plugins);
      if (o->backward) report.campaign["backward"] = true;  // a forward campaign's identity is as it was
      report.shard_index = o->c.shard_index;
      report.shard_count = o->c.shard_count;
      report.finished = !error;
      report.error = error;
      report.variants = std::move(all);
      std::function<void()> pages;
      if (!o->html.empty()) {
        report.pages = failure_page_paths(report.variants, o->html);
        pages = [&] { write_failure_pages(report.variants, o->html, campaign_title(report)); };
      }
      return end_campaign("run", outputs, report, error, pages);
      });
    };
  });
}

void add_bench(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("bench", "TFLOPS per kernel on given shapes (CUDA events, warm-up, median)");
  struct Opts {
    std::string kernel = "all";
    std::vector<std::string> plugins, shapes{"b=4 h=16 s=4096 d=64 causal=none dtype=f32"};
    int warmup = 5, iters = 30;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--kernel", o->kernel, "kernel name, or all");
  cmd->add_option("--plugin", o->plugins, "plugin libraries")->check(printable_path());
  cmd->add_option("--shape", o->shapes, "problem(s), e.g. \"b=4 h=16 s=4096 d=64 causal=none dtype=f32\"");
  cmd->add_option("--warmup", o->warmup, "untimed runs first")->check(whole_number(0, 1000000));
  cmd->add_option("--iters", o->iters, "timed runs; the median is reported")->check(whole_number(1, 1000000));
  cmd->callback([o, &action] {
    action = [o] {
      // Timed in this process (isolation would time the worker round trip too): the plugin is loaded
      // here, its constructors included. Run a kernel through `flashcheck run` first.
      auto variants = select(o->kernel, o->plugins, false, nullptr);
      std::printf("device: %s\n%-16s %-62s %10s %10s %9s\n", device::unavailable() ? "none" : device::name().c_str(),
                  "kernel", "shape", "median_ms", "min_ms", "TFLOPS");
      std::fflush(stdout);
      int measured = 0;
      for (const auto& shape : o->shapes) {
        const Problem p = parse_problem(shape);
        for (auto& [v, plugin] : variants) {
          if (v->unavailable() || v->unsupported(p) || (o->kernel == "all" && v->caps().memory == Memory::host)) continue;
          BenchResult r;
          {
            // Timed in flashcheck's own process (isolation would time the worker round trip too):
            // run a kernel through `flashcheck run` first.
            Heartbeat alive("bench " + v->name() + " on " + to_string(p));
            r = bench_variant(*v, p, o->warmup, o->iters);
          }
          std::printf("%-16s %-62s %10.3f %10.3f %9.2f\n", v->name().c_str(), to_string(p).c_str(), r.median_ms, r.min_ms,
                      r.tflops);
          std::fflush(stdout);
          ++measured;
        }
      }
      return measured ? int{kPass} : int{kCannotTest};
    };
  });
}

void add_determinism(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("determinism", "run one kernel N times on the same inputs; O and LSE must be bitwise equal");
  struct Opts {
    std::string kernel, problem = "b=2 h=8 sq=1000 skv=1100 d=128 causal=bottom_right";
    std::vector<std::string> plugins;
    int runs = 100;
    double timeout = 0;
    bool no_isolation = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--kernel", o->kernel, "kernel name")->required();
  cmd->add_option("--plugin", o->plugins, "plugin libraries")->check(printable_path());
  cmd->add_option("--problem", o->problem, "problem (without dtype=: the kernel's first declared dtype)");
  cmd->add_option("--runs", o->runs, "runs (default 100)")->check(whole_number(1, 1000000));
  cmd->add_option("--timeout", o->timeout, "seconds one run may take (default: 15 s plus time for the problem's work, then 10x the first run, at least 5 s)")
      ->check(positive_number(1e6));
  cmd->add_flag("--no-isolation", o->no_isolation, "run the kernel inside flashcheck's own process (debugging)");
  cmd->callback([o, &action] {
    action = [o] {
      const IsolationOptions iso = isolation_from(o->no_isolation, o->timeout, 0, "determinism");
      auto [v, plugin] = select(o->kernel, o->plugins, false, o->no_isolation ? nullptr : &iso).front();
      Problem p = parse_problem(o->problem);
      if (o->problem.find("dtype=") == std::string::npos) p.dtype = v->caps().dtypes.front();
      if (auto why = v->unavailable()) throw CannotTest(v->name() + " unavailable: " + *why);
      std::unique_ptr<KernelWorker> worker;
      if (!o->no_isolation) worker = std::make_unique<KernelWorker>(*v, plugin, iso);
      // Its supports() runs where its crash is the kernel's failure (exit 1), as in `run`.
      const SupportsAnswer supported = supports_of(*v, p, worker.get());
      if (supported.abnormal || supported.error) {
        std::printf("%s: %s: %s\n", v->name().c_str(), supported.abnormal ? supported.abnormal->criterion.c_str() : "kernel_error",
                    supported.abnormal ? supported.abnormal->detail.c_str() : supported.error->c_str());
        return int{kMismatch};
      }
      if (supported.refusal) throw CannotTest(v->name() + " does not support it: " + *supported.refusal);
      const Inputs in = make_inputs(p, 777);
      // One run; a crash, hang or kernel error is a failure of the kernel (exit 1), as in `run`.
      auto once = [&](int r) -> std::optional<HarnessResult> {
        if (!worker) return run_variant(*v, p, in);
        IsolatedRun got = worker->run(p, in);
        if (got.result) {
          worker->time_limit().passed(p, got.kernel_seconds);  // it returned: later runs are held to its pace
          return std::move(got.result);
        }
        std::printf("%s: run %d: %s: %s\n", v->name().c_str(), r, got.abnormal ? got.abnormal->criterion.c_str() : "kernel_error",
                    got.abnormal ? got.abnormal->detail.c_str() : got.error->c_str());
        return std::nullopt;
      };
      Progress progress(true);
      const auto t0 = std::chrono::steady_clock::now();
      const std::optional<HarnessResult> first = once(0);
      if (!first) return int{kMismatch};
      for (int r = 1; r < o->runs; ++r) {
        const std::optional<HarnessResult> again = once(r);
        if (!again) return int{kMismatch};
        const bool same_o = std::memcmp(first->o.data(), again->o.data(), first->o.size() * 4) == 0;
        const bool same_l = !first->lse ||
                            std::memcmp(first->lse->data(), again->lse->data(), first->lse->size() * 4) == 0;
        if (!same_o || !same_l) {
          progress.finish();
          std::printf("%s: run %d differs from run 0 (%s): NOT deterministic\n", v->name().c_str(), r, same_o ? "lse" : "o");
          return int{kMismatch};
        }
        char line[160];
        std::snprintf(line, sizeof line, "determinism %s: run %d/%d identical so far (%.0f s)", v->name().c_str(), r + 1,
                      o->runs, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        progress.update(line);
      }
      progress.finish();
      std::printf("%s: %d runs bitwise identical (O and LSE) on %s\n", v->name().c_str(), o->runs, to_string(p).c_str());
      if (worker)
        if (auto bad = worker->unload()) {
          std::printf("%s: FAILED: its plugin %s\n", v->name().c_str(), bad->detail.c_str());
          return int{kMismatch};
        }
      return int{kPass};
    };
  });
}

}  // namespace flashcheck::cli
