// flashcheck: the command line. Exit codes follow `git bisect run`: 0 pass, 1 mismatch, 125 cannot test.
// (README, "Reliability": a kernel's crash, exit or hang is a verdict of its worker process, never
// flashcheck's own exit code.)
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>

#include "reference/blas_core.h"
#include "runner/guarded_buffer.h"
#include "runner/isolation.h"
#include "tools/commands.h"
#include "tools/gpus.h"
#include "tools/output.h"
#include "verify/untrusted_text.h"
#include "verify/check_file.h"

namespace {

// A command line refused before its command ran still keeps the reports' promise (tools/output.h):
// `--json -` gets the error document on stdout, `--json PATH` and `--junit PATH` have it replace an
// earlier report (CI reading the JUnit file then sees this run's error, not the last run's passes).
void refused_command_line(int argc, char** argv, const std::string& why) {
  const auto junit = flashcheck::cli::junit_target_of(argc, argv);
  if (junit && !junit->empty() && *junit != "-") {
    try {
      if (flashcheck::cli::holds_report(*junit, {flashcheck::cli::kJunitStart}))
        flashcheck::cli::write_report_file(*junit, flashcheck::cli::error_junit(argc > 1 ? argv[1] : "", why));
    } catch (const std::exception&) {
      // Said on stderr already, as for the JSON below.
    }
  }
  const auto target = flashcheck::cli::json_target_of(argc, argv);
  if (!target || target->empty()) return;
  const std::string text = flashcheck::json_text(flashcheck::cli::error_json(why)) + "\n";
  try {
    if (*target == "-") {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
    } else if (flashcheck::cli::holds_report(*target, {"{", "["})) {
      flashcheck::cli::write_report_file(*target, text);
    }
  } catch (const std::exception&) {
    // The refusal itself was already said on stderr; a path that cannot be written adds nothing.
  }
}

}  // namespace

int main(int argc, char** argv) {
  flashcheck::restart_with_better_blas_core(argv);  // before anything runs: OpenBLAS reads its core only at load
  // A kernel's worker process (runner/isolation.h) is this binary, started fresh by flashcheck.
  if (argc >= 2 && std::strcmp(argv[1], flashcheck::kWorkerArg) == 0) return flashcheck::worker_main(argc, argv);
  // A `run --gpus` worker (tools/gpus.h) dies with the run that started it, never outliving it on a GPU.
  if (const char* parent = std::getenv("FLASHCHECK_GPU_PARENT")) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != static_cast<pid_t>(std::atoll(parent))) return flashcheck::kCannotTest;  // it died before the signal was armed
    unsetenv("FLASHCHECK_GPU_PARENT");  // not inherited by this worker's own kernel workers
  }
  flashcheck::cli::remember_command_line(argc, argv);  // a `run --gpus` worker's command line is this one's
  // A malformed FLASHCHECK_GUARD_BYTES is bad input, said once before anything runs: read where
  // the buffers are made, it would fail every case as the kernel's error.
  try {
    flashcheck::guard_bytes();
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "flashcheck: %s\n", flashcheck::printable_line(e.what()).c_str());
    return flashcheck::kCannotTest;
  }
  namespace cli = flashcheck::cli;
  CLI::App app{"flashcheck: reference-and-verification testbed for FlashAttention forward kernels.\n"
               "Exit codes: 0 pass, 1 numerical mismatch, 125 cannot test."};
  app.require_subcommand(0, 1);  // no subcommand: the default job
  cli::Action action;
  cli::add_run(app, action);
  cli::add_list(app, action);
  cli::add_merge(app, action);
  cli::add_check(app, action);
  cli::add_golden(app, action);
  cli::add_calibrate(app, action);
  cli::add_oracle(app, action);
  cli::add_bench(app, action);
  cli::add_determinism(app, action);
  // CLI11 quotes what it refuses (an unknown option, a value): escaped, so a command line cannot
  // put escape sequences on the terminal through flashcheck's message.
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return flashcheck::printable_line(e.what()) + "\nRun with --help for more information.\n";
  });
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    refused_command_line(argc, argv, e.what());
    return flashcheck::kCannotTest;  // a bad command line tests nothing: bisect must skip, not blame
  }
  try {
    if (!action) {
      // Default job: a short campaign over every available kernel (on a machine without a GPU, the
      // blocked replica and the example CPU plugin).
      const char* args[] = {"flashcheck", "run", "--cases", "100"};
      app.parse(4, const_cast<char**>(args));
    }
    return action();
  } catch (const CLI::ParseError& e) {  // the default job's own parse
    app.exit(e);
    return flashcheck::kCannotTest;
  } catch (const std::exception& e) {  // the commands catch their own; this is the last net
    std::fprintf(stderr, "flashcheck: %s\n", flashcheck::printable_line(e.what()).c_str());
    return flashcheck::kCannotTest;
  } catch (...) {
    std::fprintf(stderr, "flashcheck: unknown error\n");
    return flashcheck::kCannotTest;
  }
}
