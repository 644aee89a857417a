// `flashcheck run` (campaigns), `flashcheck bench` (speed) and `flashcheck determinism`.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "runner/campaign.h"
#include "runner/bench.h"
#include "runner/device.h"
#include "runner/harness.h"
#include "tools/commands.h"
#include "tools/output.h"
#include "verify/check_file.h"

namespace flashcheck::cli {

namespace {

std::filesystem::path self_dir() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::filesystem::path(".") : p.parent_path();
}

// The variants a command works on: built-ins plus plugins; `which` is a name or "all".
std::vector<std::shared_ptr<Variant>> select(const std::string& which, const std::vector<std::string>& plugins,
                                             bool default_plugin) {
  std::vector<std::shared_ptr<Variant>> pool = Registry::builtin().all();
  if (which != "all" && plugins.empty())
    if (auto v = Registry::builtin().find(which)) return {v};  // built in: no plugin to load
  std::vector<std::string> libs = plugins;
  // With no --plugin, the example CPU plugin built beside the binary joins the pool, so a machine
  // without a GPU still validates an out-of-tree kernel by default.
  if (libs.empty() && default_plugin && std::filesystem::exists(self_dir() / "example_cpu_plugin.so"))
    libs.push_back((self_dir() / "example_cpu_plugin.so").string());
  for (const auto& lib : libs)
    for (auto& v : load_plugin(lib)) pool.push_back(v);
  if (which == "all") return pool;
  for (auto& v : pool)
    if (v->name() == which) return {v};
  std::string names;
  for (auto& v : pool) names += " " + v->name();
  throw CannotTest("no kernel named '" + which + "' (known:" + names + ")");
}

std::pair<int64_t, int64_t> parse_shard(const std::string& s) {
  auto slash = s.find('/');
  try {
    if (slash == std::string::npos) throw std::invalid_argument("");
    int64_t i = std::stoll(s.substr(0, slash)), n = std::stoll(s.substr(slash + 1));
    if (n < 1 || i < 0 || i >= n) throw std::invalid_argument("");
    return {i, n};
  } catch (const std::exception&) {
    throw CannotTest("--shard wants i/N with 0 <= i < N, got '" + s + "'");
  }
}

}  // namespace

void add_run(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("run", "fuzz campaign: random problems against the oracle, per kernel, failures shrunk");
  struct Opts {
    std::string kernel = "all", shard = "0/1", json, problem, dist = "normal";
    std::vector<std::string> plugins, dtypes;
    CampaignOptions c;
    uint64_t input_seed = 1;
    bool no_shrink = false;
    std::string html;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--kernel", o->kernel, "kernel name, or all (default)");
  cmd->add_option("--plugin", o->plugins, "shared library exporting kernels through gpu/plugin/flashcheck_plugin.h");
  cmd->add_option("--cases", o->c.cases, "problems per kernel (default 200)")->check(CLI::PositiveNumber);
  cmd->add_option("--seed", o->c.seed, "campaign seed: same seed and shard, same problems everywhere");
  cmd->add_option("--shard", o->shard, "i/N: take cases c with c % N == i");
  cmd->add_option("--dtype", o->dtypes, "only these dtypes (f32, f16, bf16); default: all a kernel declares");
  cmd->add_option("--max-seq", o->c.max_seq, "longest sequence drawn (default 300)")->check(CLI::PositiveNumber);
  cmd->add_option("--max-work", o->c.max_work, "per-case cap on B*Hq*Sq*Skv*(Dqk+Dv) (default 3e7)");
  cmd->add_option("--json", o->json, "write the summary as JSON to PATH, or - for stdout (the text then goes to stderr)");
  cmd->add_option("--html", o->html, "write an HTML report (error heatmaps) per kept failure into directory DIR");
  cmd->add_option("--problem", o->problem, "run this one problem instead of a campaign (as printed by a failure)");
  cmd->add_option("--dist", o->dist, "input distribution for --problem");
  cmd->add_option("--input-seed", o->input_seed, "input seed for --problem");
  cmd->add_flag("--no-shrink", o->no_shrink, "report failures as drawn");
  cmd->add_flag("--fail-fast", o->c.fail_fast, "stop a kernel's campaign at its first failing case (mutation testing)");
  cmd->callback([o, &action] {
    action = [o] {
      JsonStdout json_out(o->json == "-");
      std::tie(o->c.shard_index, o->c.shard_count) = parse_shard(o->shard);
      o->c.shrink = !o->no_shrink;
      o->c.dtypes.clear();
      for (const auto& d : o->dtypes) o->c.dtypes.push_back(parse_dtype(d));
      auto variants = select(o->kernel, o->plugins, true);
      const std::string plugin_arg = o->plugins.empty() ? "" : o->plugins.front();
      if (!o->problem.empty()) {  // one case: the reproduction of a failure
        Case c{parse_problem(o->problem), parse_dist(o->dist), o->input_seed};
        int rc = kCannotTest;
        for (auto& v : variants) {
          if (auto why = v->unavailable()) {
            std::cout << v->name() << ": unavailable (" << *why << ")\n";
            continue;
          }
          CaseOutcome out = run_case(*v, c, kDefaultMaxRows, plugin_arg);
          if (out.skipped) {
            std::cout << v->name() << ": skipped (" << *out.skipped << ")\n";
            continue;
          }
          std::cout << v->name() << ": " << to_text(out.report);
          if (!o->html.empty() && !out.passed) write_case_html(*v, out, std::filesystem::path(o->html) / (v->name() + ".html"), kDefaultMaxRows);
          rc = (rc == kMismatch || !out.passed) ? int{kMismatch} : int{kPass};
        }
        return rc;
      }
      std::vector<VariantSummary> all;
      o->c.plugin = plugin_arg;
      for (auto& v : variants) all.push_back(run_campaign(*v, o->c, std::cout));
      std::printf("\n%-22s %7s %7s %7s %7s %10s %14s  %s\n", "variant", "cases", "passed", "failed", "skipped",
                  "worst_ulp", "worst_cos", "note");
      bool any_failed = false, any_tested = false;
      for (auto& s : all) {
        if (s.unavailable) {
          std::printf("%-22s %7s %7s %7s %7s %10s %14s  unavailable: %s\n", s.name.c_str(), "-", "-", "-", "-", "-", "-",
                      s.unavailable->c_str());
          continue;
        }
        any_failed |= s.failed > 0;
        any_tested |= (s.passed + s.failed) > 0;
        std::printf("%-22s %7lld %7lld %7lld %7lld %10llu %14.9f\n", s.name.c_str(), static_cast<long long>(s.cases),
                    static_cast<long long>(s.passed), static_cast<long long>(s.failed), static_cast<long long>(s.skipped),
                    static_cast<unsigned long long>(s.worst_ulp), s.worst_cos);
      }
      for (auto& s : all)
        for (auto& r : s.repro) std::printf("reproduce: %s\n", r.c_str());
      if (!o->html.empty()) write_failure_pages(all, variants, o->html, o->c.max_rows);
      if (!o->json.empty()) {
        nlohmann::json j;
        j["seed"] = o->c.seed;
        j["shard"] = o->shard;
        j["cases"] = o->c.cases;
        for (auto& s : all) {
          nlohmann::json v{{"name", s.name}, {"cases", s.cases}, {"passed", s.passed}, {"failed", s.failed},
                           {"skipped", s.skipped}, {"worst_ulp", s.worst_ulp}, {"worst_cos", s.worst_cos}};
          if (s.unavailable) v["unavailable"] = *s.unavailable;
          for (auto& f : s.failures) v["failures"].push_back(to_json(f.report));
          j["variants"].push_back(v);
        }
        if (o->json == "-") {
          json_out.write(j.dump(2) + "\n");
        } else {
          std::ofstream(o->json) << j.dump(2) << "\n";
        }
      }
      if (any_failed) return int{kMismatch};
      if (!any_tested) {
        std::fprintf(stderr, "flashcheck run: nothing could be tested (every kernel unavailable or every case skipped)\n");
        return int{kCannotTest};
      }
      return int{kPass};
    };
  });
}

void add_list(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("list", "the kernels this build registered (and plugins'), with what each declares");
  struct Opts {
    std::vector<std::string> plugins;
    std::string json;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--plugin", o->plugins, "also list the kernels of these plugin libraries");
  cmd->add_option("--json", o->json, "write the list as JSON to PATH, or - for stdout");
  cmd->callback([o, &action] {
    action = [o] {
      nlohmann::json j = nlohmann::json::array();
      for (auto& v : select("all", o->plugins, false)) {
        const Capabilities& c = v->caps();
        const auto why = v->unavailable();
        nlohmann::json e{{"name", v->name()},
                         {"memory", c.memory == Memory::device ? "device" : "host"},
                         {"min_sm", c.min_sm},
                         {"available", !why},
                         {"head_dims", c.head_dims},
                         {"dv_ne_dqk", c.dv_ne_dqk},
                         {"gqa", c.gqa},
                         {"lse_base", c.lse_base == LseBase::e ? "e" : c.lse_base == LseBase::two ? "2" : "none"}};
        if (why) e["unavailable"] = *why;
        for (DType d : c.dtypes) e["dtypes"].push_back(std::string(to_string(d)));
        for (Causal k : c.causals) e["causals"].push_back(std::string(to_string(k)));
        for (const TileShape& t : c.tiles) e["tiles"].push_back({{"head_dim", t.head_dim}, {"block_q", t.block_q}, {"block_kv", t.block_kv}});
        j.push_back(e);
        if (o->json != "-")
          std::printf("%-22s %-6s %s\n", v->name().c_str(), c.memory == Memory::device ? "device" : "host",
                      why ? ("unavailable: " + *why).c_str() : "available");
      }
      if (o->json == "-") {
        std::cout << j.dump(2) << "\n";
      } else if (!o->json.empty()) {
        std::ofstream os(o->json);
        os << j.dump(2) << "\n";
        if (!os) throw CannotTest("cannot write " + o->json);
      }
      return int{kPass};
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
  cmd->add_option("--plugin", o->plugins, "plugin libraries");
  cmd->add_option("--shape", o->shapes, "problem(s), e.g. \"b=4 h=16 s=4096 d=64 causal=none dtype=f32\"");
  cmd->add_option("--warmup", o->warmup, "untimed runs first")->check(CLI::NonNegativeNumber);
  cmd->add_option("--iters", o->iters, "timed runs; the median is reported")->check(CLI::PositiveNumber);
  cmd->callback([o, &action] {
    action = [o] {
      auto variants = select(o->kernel, o->plugins, false);
      std::printf("device: %s\n%-16s %-62s %10s %10s %9s\n", device::unavailable() ? "none" : device::name().c_str(),
                  "kernel", "shape", "median_ms", "min_ms", "TFLOPS");
      int measured = 0;
      for (const auto& shape : o->shapes) {
        const Problem p = parse_problem(shape);
        for (auto& v : variants) {
          if (v->unavailable() || v->unsupported(p) || (o->kernel == "all" && v->caps().memory == Memory::host)) continue;
          BenchResult r = bench_variant(*v, p, o->warmup, o->iters);
          std::printf("%-16s %-62s %10.3f %10.3f %9.2f\n", v->name().c_str(), to_string(p).c_str(), r.median_ms, r.min_ms,
                      r.tflops);
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
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--kernel", o->kernel, "kernel name")->required();
  cmd->add_option("--plugin", o->plugins, "plugin libraries");
  cmd->add_option("--problem", o->problem, "problem (without dtype=: the kernel's first declared dtype)");
  cmd->add_option("--runs", o->runs, "runs (default 100)")->check(CLI::PositiveNumber);
  cmd->callback([o, &action] {
    action = [o] {
      auto v = select(o->kernel, o->plugins, false).front();
      Problem p = parse_problem(o->problem);
      if (o->problem.find("dtype=") == std::string::npos) p.dtype = v->caps().dtypes.front();
      if (auto why = v->unavailable()) throw CannotTest(v->name() + " unavailable: " + *why);
      if (auto why = v->unsupported(p)) throw CannotTest(v->name() + " does not support it: " + *why);
      const Inputs in = make_inputs(p, 777);
      const HarnessResult first = run_variant(*v, p, in);
      for (int r = 1; r < o->runs; ++r) {
        const HarnessResult again = run_variant(*v, p, in);
        const bool same_o = std::memcmp(first.o.data(), again.o.data(), first.o.size() * 4) == 0;
        const bool same_l = !first.lse ||
                            std::memcmp(first.lse->data(), again.lse->data(), first.lse->size() * 4) == 0;
        if (!same_o || !same_l) {
          std::printf("%s: run %d differs from run 0 (%s): NOT deterministic\n", v->name().c_str(), r, same_o ? "lse" : "o");
          return int{kMismatch};
        }
      }
      std::printf("%s: %d runs bitwise identical (O and LSE) on %s\n", v->name().c_str(), o->runs, to_string(p).c_str());
      return int{kPass};
    };
  });
}

}  // namespace flashcheck::cli
