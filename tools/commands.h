// Each flashcheck subcommand registers itself on the app and, when chosen, stores its exit code.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>

namespace flashcheck::cli {

// The chosen subcommand's action; returns the process exit code (0 pass, 1 mismatch, 125 cannot test).
using Action = std::function<int()>;

void add_check(CLI::App& app, Action& action);
void add_golden(CLI::App& app, Action& action);
void add_calibrate(CLI::App& app, Action& action);
void add_oracle(CLI::App& app, Action& action);
void add_run(CLI::App& app, Action& action);
void add_list(CLI::App& app, Action& action);
void add_merge(CLI::App& app, Action& action);
void add_bench(CLI::App& app, Action& action);
void add_determinism(CLI::App& app, Action& action);

}  // namespace flashcheck::cli
