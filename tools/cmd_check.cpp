// `flashcheck check FILE.safetensors`: judge any kernel's output file.
#include <cstdio>
#include <iostream>
#include <optional>

#include "tools/commands.h"
#include "tools/output.h"
#include "tools/strict_options.h"
#include "verify/check_file.h"
#include "verify/report_html.h"

namespace flashcheck::cli {

void add_check(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("check", "check a kernel's output file (q, k, v, o[, lse] in safetensors; bhsd, bshd, thd or a paged cache, with the variants' tensors and metadata: README) against the fp64 oracle");
  struct Opts {
    std::string file, json, oracle_name = "auto", html;
    CheckFileOptions o;
  };
  auto opts = std::make_shared<Opts>();
  cmd->add_option("file", opts->file, "the .safetensors file")->required();
  cmd->add_option("--json", opts->json, "also write the report as JSON to PATH, or - for stdout (the text then goes to stderr)");
  cmd->add_option("--html", opts->html, "also write the report as one self-contained HTML page with error heatmaps to PATH");
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
  cmd->callback([opts, &action] {
    action = [opts] {
      CommandOutputs outputs("check", opts->json, {opts->html});
      return outputs.run([&] {
        outputs.require_writable();
        opts->o.error_maps = !opts->html.empty();
        opts->o.oracle = opts->oracle_name == "cpu"   ? OracleChoice::cpu
                         : opts->oracle_name == "gpu" ? OracleChoice::gpu
                                                      : OracleChoice::automatic;
        const Report r = check_file(opts->file, opts->o);
        // The text shows the file's path and names escaped (a path can hold anything but '/' and NUL).
        const Report shown = printable_report(r);
        std::cout << to_text(shown);
        if (opts->o.timings) {
          double total = 0;
          for (const auto& [phase, s] : r.timings) {
            std::fprintf(stderr, "timing: %-26s %8.3f s\n", phase.c_str(), s);
            if (phase.rfind("  ", 0) != 0) total += s;  // indented: a part of the phase above
          }
          std::fprintf(stderr, "timing: %-26s %8.3f s\n", "total", total);
        }
        // Every output is tried: a page that cannot be written does not cost the JSON.
        std::optional<std::string> failed_output;
        if (!opts->html.empty()) {
          try {
            outputs.write_file(opts->html, to_html(shown));
          } catch (const std::exception& e) {
            failed_output = e.what();
          }
        }
        if (outputs.json_wanted()) {
          nlohmann::json j = to_json(r);
          if (failed_output) j.update(error_json(*failed_output));
          outputs.write_json(j);
        }
        if (failed_output) throw CannotTest(*failed_output);
        return r.pass() ? int{kPass} : int{kMismatch};
      });
    };
  });
}

}  // namespace flashcheck::cli
