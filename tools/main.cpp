// flashcheck: the command line. Exit codes follow `git bisect run`: 0 pass, 1 mismatch, 125 cannot test.
// (README, "Reliability": a kernel's crash, exit or hang is a verdict of its worker process, never
// flashcheck's own exit code.)
#include <cstdio>
#include <cstring>
#include <exception>

#include "reference/blas_core.h"
#include "runner/isolation.h"
#include "tools/commands.h"
#include "verify/check_file.h"

int main(int argc, char** argv) {
  flashcheck::restart_with_better_blas_core(argv);  // before anything runs: OpenBLAS reads its core only at load
  // A kernel's worker process (runner/isolation.h) is this binary, started fresh by flashcheck.
  if (argc >= 2 && std::strcmp(argv[1], flashcheck::kWorkerArg) == 0) return flashcheck::worker_main(argc, argv);
  namespace cli = flashcheck::cli;
  CLI::App app{"flashcheck: reference-and-verification testbed for FlashAttention forward kernels.\n"
               "Exit codes: 0 pass, 1 numerical mismatch, 125 cannot test."};
  app.require_subcommand(0, 1);  // no subcommand: the default job
  cli::Action action;
  cli::add_run(app, action);
  cli::add_list(app, action);
  cli::add_check(app, action);
  cli::add_golden(app, action);
  cli::add_calibrate(app, action);
  cli::add_oracle(app, action);
  cli::add_bench(app, action);
  cli::add_determinism(app, action);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
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
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flashcheck: %s\n", e.what());
    return flashcheck::kCannotTest;
  } catch (...) {
    std::fprintf(stderr, "flashcheck: unknown error\n");
    return flashcheck::kCannotTest;
  }
}
