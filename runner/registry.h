// Every kernel flashcheck can validate — registered in the kernels layer, the CPU replica, or loaded
// from a plugin — behind one interface.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpu/kernel.h"
#include "reference/problem.h"
#include "verify/judge.h"

namespace flashcheck {

// Thrown by Variant::forward when a kernel finds out only once called that it does not support the
// problem (a library that refuses a shape at dispatch, as torch SDPA's backends do): the case is
// skipped with this reason, as for unsupported(), never failed, and shrinking never moves to it.
struct Declined : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Variant {
 public:
  virtual ~Variant() = default;
  virtual std::string name() const = 0;
  virtual const Capabilities& caps() const = 0;
  // Empty if supported, else why not (counted as skipped, never failed).
  virtual std::optional<std::string> unsupported(const Problem& p) const;
  // Why the variant cannot run on this machine at all (no GPU, a GPU below its min_sm), or empty.
  virtual std::optional<std::string> unavailable() const;
  // Computes o (and lse if the variant has one) from the staged buffers (runner/staged_problem.h):
  // every tensor in the problem's storage layout with its strides, the side tensors the problem
  // uses, all in the declared memory; a.lse.data is null for a variant without LSE. The problem's
  // window is flashcheck's (inclusive); a variant converts it to its own convention where it hands
  // it on. Throws std::runtime_error on any kernel or CUDA error.
  virtual void forward(const Problem& p, const KernelArgs& a) const = 0;
  // How the judge reads this variant's outputs, for problem p (tiles depend on the head dim).
  Declared declared(const Problem& p) const;

  // The backward pass (gpu/kernel.h: BackwardFn's contract), for `run --backward`. Null: the
  // variant has none. A built-in kernel's are its KernelDef's; a plugin's backward takes its
  // forward's declared space (fc_kernel2 declares nothing else) with its determinism flag.
  virtual const BackwardCaps* backward_caps() const { return nullptr; }
  // Gradients of the forward `fwd` describes (its buffers as the forward read and wrote them) into
  // g's buffers, in the declared memory; the window is flashcheck's, converted where it is handed
  // on, as in forward(). Throws std::logic_error for a variant without a backward, and
  // std::runtime_error on any kernel or CUDA error.
  virtual void backward(const Problem& p, const KernelArgs& fwd, const BackwardArgs& g) const;
  // Why the backward does not take p by its declaration (backward_space), or empty; the forward's
  // own refusal (unsupported(), a plugin's supports()) is asked apart. Without a backward: says so.
  std::optional<std::string> backward_refusal(const Problem& p) const;
};

// backward_space (the problems a kernel's backward computes) is the kernels layer's, gpu/kernel.h:
// a kernel module declares it too.

class Registry {
 public:
  // The blocked CPU replica plus every kernel the build registered (gpu/*/register.cpp).
  static Registry& builtin();
  void add(std::shared_ptr<Variant> v);
  const std::vector<std::shared_ptr<Variant>>& all() const { return variants_; }
  std::shared_ptr<Variant> find(const std::string& name) const;

 private:
  std::vector<std::shared_ptr<Variant>> variants_;
};

// The blocked replica as a kernel: every variant and layout of problem model 2, fp8 e4m3 inputs
// included (FlashAttention 3's numerics: P scaled by 2^8 and rounded to fp8), judged under the
// calibrated fp8 tolerances. e5m2 is declared only when asked (replica_variant.cpp says why).
std::shared_ptr<Variant> make_replica_variant(bool declare_e5m2 = false);

// Loads every kernel a plugin library exports into this process; throws std::runtime_error naming
// what is wrong. flashcheck's own process loads none by default: describe_plugin
// (runner/isolation.h) loads it in a worker process, which calls this.
// A library that exports flashcheck_get_kernel2 is loaded through ABI 2 (its ABI 1 entry, if any,
// is for flashcheck builds that predate ABI 2); otherwise through ABI 1, whose kernels are given
// plain problems only.
std::vector<std::shared_ptr<Variant>> load_plugin(const std::string& path);
// Through the ABI 1 entry alone, as a flashcheck that predates ABI 2 loads it (tests of a library
// that exports both).
std::vector<std::shared_ptr<Variant>> load_plugin_abi1(const std::string& path);

// Kernels as data (name and every capability), for the trip from a worker process that loaded a
// plugin to flashcheck's process, which never does. A described variant's supports() and
// forward() are asked of its KernelWorker; called in-process they throw std::logic_error.
nlohmann::json describe_variants(const std::vector<std::shared_ptr<Variant>>& variants);
std::vector<std::shared_ptr<Variant>> described_variants(const nlohmann::json& description);

}  // namespace flashcheck
