// Isolation: every kernel under test runs in a worker process, so that a crash, an abort, an exit()
// or a hang ends one case with a verdict instead of ending flashcheck.
//
// The worker is a fresh exec of the flashcheck binary (`flashcheck __kernel-worker ...`), not a bare
// fork: the parent initialises CUDA (availability, compute capability) before any kernel runs, and a
// process forked after CUDA is initialised cannot use CUDA. A fresh exec creates its own context, so
// one mechanism serves host and device kernels alike. One worker serves every case of one kernel
// (CUDA context creation and plugin loading are paid once) and is restarted after it dies.
//
// A plugin's code runs only in workers, never in flashcheck's own process: describe_plugin() loads
// it in a worker that sends back its kernels' descriptions (runner/registry.h), a kernel's worker
// answers its supports() and runs its forward(), and unload() runs its destructors there. Each
// misbehaviour is a verdict: at loading, a refused plugin (cannot test, no kernel was identified);
// in supports() or forward(), a failed case; at unloading, a failed kernel.
//
// The parent keeps the inputs, the oracle and the judge; the worker only runs the kernel. The five
// buffers live in one memfd both processes map. In the worker each buffer of a host-memory kernel
// sits between PROT_NONE guard regions, its payload ending exactly at a page boundary, and the inputs
// are mapped read-only: any write past o, or any read past q, faults at the first byte, and the
// worker's SIGSEGV handler records the address, which the parent reports as `out_of_bounds` with the
// buffer and the offset. Device buffers are copied to device memory fenced by canaries
// (runner/guarded_buffer.h) and checked there.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "reference/inputs.h"
#include "runner/case_time_limit.h"
#include "runner/harness.h"
#include "runner/registry.h"

namespace flashcheck {

// argv[1] of the worker; the flashcheck binary's main() hands such a call to worker_main().
inline constexpr const char* kWorkerArg = "__kernel-worker";

struct IsolationOptions {
  bool enabled = false;  // the CLI turns it on (`--no-isolation` turns it off); library callers opt in
  // A binary whose main() calls worker_main() for kWorkerArg: the flashcheck binary. /proc/self/exe
  // is the running flashcheck even if the file was rebuilt meanwhile (git bisect).
  std::string worker_exe = "/proc/self/exe";
  std::optional<double> timeout_s;  // per case, fixed (`--timeout`); empty: learned (CaseTimeLimit)
  TimeLimitRule time_limits;        // how the per-case limit is learned
  double startup_timeout_s = 120;   // a kernel's worker: loading the plugin, creating the CUDA context
  double load_timeout_s = 60;       // describe_plugin: the plugin's constructors and flashcheck_get_kernel
  double supports_timeout_s = 10;   // one supports() call (at most timeout_s when that is given)
  double unload_timeout_s = 10;     // the plugin's destructors and exit handlers
  size_t output_limit = 4096;       // bytes of the kernel's stdout/stderr forwarded per case
};

// A kernel call that did not return: a verdict for the case.
struct AbnormalEnd {
  std::string criterion;  // "kernel_crashed", or "out_of_bounds" for a fault in a guard page
  std::string detail;     // "crashed (SIGSEGV)", "exited 3", "timed out after 15 s (...)", ...
  bool timed_out = false;
};

struct IsolatedRun {
  std::optional<HarnessResult> result;   // the kernel returned
  std::optional<std::string> error;      // it reported an error (threw, or a plugin returned non-zero)
  std::optional<AbnormalEnd> abnormal;   // it crashed, exited or hung
  // A backward case (run_backward): the abnormal end came in the backward's calls, after the
  // forward returned; `result` then holds the forward's outputs (its `backward` no gradients).
  bool in_backward = false;
  double seconds = 0;                    // wall time of the call, staging included
  double kernel_seconds = 0;             // from the request to the reply: the span the time limit applies to
};

// Whether a kernel takes a problem, from its own code.
struct SupportsAnswer {
  std::optional<std::string> refusal;   // why not (the case is skipped)
  std::optional<AbnormalEnd> abnormal;  // supports() crashed, exited or hung (the case fails)
  std::optional<std::string> error;     // the worker could not load the kernel (the case fails, as in run())
};

// Loads a plugin in a worker process and returns its kernels as described variants (the same
// names, capabilities and refusals of bad fields that load_plugin gives), without loading it here.
// A plugin that crashes, exits or hangs while loading throws CannotTest naming what happened.
std::vector<std::shared_ptr<Variant>> describe_plugin(const std::string& path, const IsolationOptions& opt);

// One kernel's worker process, started on the first request and again after it dies.
class KernelWorker {
 public:
  // `plugin` is the library the variant came from ("" for a built-in kernel or the replica).
  KernelWorker(const Variant& v, std::string plugin, IsolationOptions opt);
  ~KernelWorker();
  KernelWorker(const KernelWorker&) = delete;
  KernelWorker& operator=(const KernelWorker&) = delete;

  // Runs the kernel once on (p, in) in the worker. `waiting` is called about once a second while
  // the kernel runs, with the seconds elapsed (progress for long cases).
  IsolatedRun run(const Problem& p, const Inputs& in, const std::function<void(double)>& waiting = {});
  // A backward case in the worker (runner/backward_harness.h's run_variant_backward there): the
  // kernel's forward, then its backward `calls` times; the result's `backward` holds the gradients
  // (or the backward's error, overrun and nondeterminism). One time limit covers all the calls.
  IsolatedRun run_backward(const Problem& p, const Inputs& in, const std::vector<float>& d_out, int calls, bool deterministic,
                           const std::function<void(double)>& waiting = {});
  // A built-in kernel's declared space, judged here; a plugin's supports(), called in the worker.
  SupportsAnswer supports(const Problem& p);
  // Unloads the plugin in the worker (its destructors and exit handlers run) and ends the worker;
  // what went wrong there, if anything. Without a plugin, or with no worker running, nothing to do.
  std::optional<AbnormalEnd> unload();

  // The per-case time limit, learned from the passing cases recorded here (run_case does).
  CaseTimeLimit& time_limit();
  double timeout_for(const Problem& p) const;
  int64_t starts() const;  // worker processes started so far

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The worker's main: `flashcheck __kernel-worker PARENT_PID kernel NAME [PLUGIN]` (one kernel's
// requests) or `... describe PLUGIN` (its description), with the control socket on fd 3 and the
// buffers' memfd on fd 4. Returns the process exit code.
int worker_main(int argc, char** argv);

}  // namespace flashcheck
