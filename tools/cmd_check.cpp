// `flashcheck check FILE.safetensors`: judge any kernel's output file.
#include <cstdio>
#include <iostream>
#include <optional>

#include "tools/commands.h"
#include "tools/output.h"
#include "tools/strict_options.h"
#include "verify/backward_report.h"
#include "verify/check_file.h"
#include "verify/report_html.h"
#include "verify/report_junit.h"

namespace flashcheck::cli {

void add_check(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("check", "check a kernel's output file (q, k, v, o[, lse] in safetensors; bhsd, bshd, thd or a paged cache, with the variants' tensors and metadata: README) against the fp64 oracle, and its gradients (do, dq, dk, dv[, dsinks]) when it holds them");
  struct Opts {
    std::string file, json, oracle_name = "auto", html, junit;
    bool identify = false;
    CheckFileOptions o;
  };
  auto opts = std::make_shared<Opts>();
  cmd->add_option("file", opts->file, "the .safetensors file")->required();
  cmd->add_option("--json", opts->json, "also write the report as JSON to PATH, or - for stdout (the text then goes to stderr)");
  cmd->add_option("--html", opts->html, "also write the report as one self-contained HTML page with error heatmaps to PATH");
  cmd->add_option("--junit", opts->junit,
                  "also write the report as JUnit XML to PATH for CI dashboards (a testcase per criterion, the reproduce "
                  "line in each failure)");
  cmd->add_option("--max-rows", opts->o.max_rows, "rows per (b,h) checked before sampling starts")
      ->check(whole_number(1, kMaxCount));
  cmd->add_option("--tile-q", opts->o.tile_q, "kernel's query tile, to name the worst element's tile")
      ->check(whole_number(1, kMaxCount));
  cmd->add_option("--tile-kv", opts->o.tile_kv, "kernel's KV tile")->check(whole_number(1, kMaxCount));
  cmd->add_option("--oracle", opts->oracle_name, "fp64 truth and baseline on: auto (the GPU for large problems when one is usable), cpu, gpu")
      ->check(CLI::IsMember({"auto", "cpu", "gpu"}));
  cmd->add_flag("--timings", opts->o.timings, "print seconds per phase (read, widen, oracle, baseline, criteria) to stderr, and add them to the JSON");
  cmd->add_flag("--allow-nonfinite-inputs", opts->o.allow_nonfinite_inputs,
                "accept NaN/Inf in q/k/v and check that they propagate to exactly the oracle's rows");
  cmd->add_flag("--identify", opts->identify,
                "also judge the output under every reading of the problem that differs in one convention (causal alignment, "
                "window bounds inclusive or exclusive, ALiBi form and LSE, empty-row LSE, LSE base, sinks) and say which "
                "readings pass: the convention the kernel follows");
  cmd->callback([opts, &action] {
    action = [opts] {
      CommandOutputs outputs("check", opts->json, {opts->html}, opts->junit);
      return outputs.run([&] {
        outputs.require_writable();
        opts->o.error_maps = !opts->html.empty();
        opts->o.oracle = opts->oracle_name == "cpu"   ? OracleChoice::cpu
                         : opts->oracle_name == "gpu" ? OracleChoice::gpu
                                                      : OracleChoice::automatic;
        if (opts->identify) {
          if (!opts->html.empty()) throw CannotTest("--identify writes no HTML page: give --html without it");
          if (!opts->junit.empty()) throw CannotTest("--identify writes no JUnit report (it judges readings, not a kernel): give --junit without it");
          const std::vector<ReadingVerdict> v = identify_file(opts->file, opts->o);
          std::cout << printable_block(to_text(v)) << printable_line(identification_summary(v)) << "\n";
          if (outputs.json_wanted()) {
            nlohmann::json j;
            j["file"] = valid_utf8(opts->file);
            for (const ReadingVerdict& rv : v)
              j["readings"].push_back({{"reading", rv.reading.name},
                                       {"problem", to_string(rv.reading.problem)},
                                       {"pass", rv.pass},
                                       {"failed", rv.failed},
                                       {"rows_checked", rv.rows_checked}});
            j["summary"] = identification_summary(v);
            j["pass"] = !v.empty() && v.front().pass;
            outputs.write_json(j);
          }
          // As stated or not: the exit code says whether the output follows the file's own
          // conventions; the table says which ones it does follow.
          return !v.empty() && v.front().pass ? int{kPass} : int{kMismatch};
        }
        const CheckFileVerdict verdict = check_file(opts->file, opts->o);
        const Report& r = verdict.forward;
        // The text shows the file's path and names escaped (a path can hold anything but '/' and NUL).
        const Report shown = printable_report(r);
        std::cout << to_text(shown);
        if (verdict.backward) {
          // Forward and backward verdicts apart, then the file's: a reader of the last line sees both.
          std::cout << to_text(*verdict.backward);
          std::string failing;
          for (const GradientVerdict& g : verdict.backward->gradients)
            if (!g.pass()) failing += (failing.empty() ? " (" : ", ") + g.name;
          std::cout << (verdict.pass() ? "PASS" : "FAIL") << "  file: forward " << (r.pass() ? "PASS" : "FAIL")
                    << ", backward " << (verdict.backward->pass() ? "PASS" : "FAIL" + failing + ")") << "\n";
        }
        if (opts->o.timings) {
          double total = 0;
          for (const auto& [phase, s] : r.timings) {
            std::fprintf(stderr, "timing: %-30s %8.3f s\n", phase.c_str(), s);
            if (phase.rfind("  ", 0) != 0) total += s;  // indented: a part of the phase above
          }
          std::fprintf(stderr, "timing: %-30s %8.3f s\n", "total", total);
        }
        // Every output is tried: a page that cannot be written does not cost the JSON.
        std::optional<std::string> failed_output;
        if (!opts->html.empty()) {
          try {
            outputs.write_file(opts->html, to_html(shown, verdict.backward ? &*verdict.backward : nullptr));
          } catch (const std::exception& e) {
            failed_output = e.what();
          }
        }
        if (outputs.junit_wanted()) {
          try {
            std::vector<JunitSuite> suites{check_junit(r, opts->file)};
            if (verdict.backward) suites.push_back(check_backward_junit(*verdict.backward, opts->file));
            if (failed_output) suites.push_back(cannot_test_suite("check", *failed_output));
            outputs.write_junit(junit_xml("flashcheck check", suites));
          } catch (const std::exception& e) {
            if (!failed_output) failed_output = e.what();
          }
        }
        if (outputs.json_wanted()) {
          nlohmann::json j = to_json(r);
          if (verdict.backward) {
            // The forward's report stays at the top (what scripts read); "pass" is the file's verdict.
            j["forward_pass"] = r.pass();
            j["backward"] = to_json(*verdict.backward);
            j["pass"] = verdict.pass();
          }
          if (failed_output) j.update(error_json(*failed_output));
          outputs.write_json(j);
        }
        if (failed_output) throw CannotTest(*failed_output);
        return verdict.pass() ? int{kPass} : int{kMismatch};
      });
    };
  });
}

}  // namespace flashcheck::cli
