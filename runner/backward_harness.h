// A backward case's kernel calls with the forward harness's hygiene (runner/harness.h): the
// buffers of the forward and of the backward (dO, dq, dk, dv, dsinks: runner/staged_problem.h)
// staged and fenced, the gradients poisoned; the kernel's own forward first — its backward is fed
// O and LSE as it wrote them, as in training — then its backward, once or, for a deterministic
// one, `calls` times with the gradients re-poisoned before each and compared bit for bit with the
// first call's. The in-process harness here and the isolated worker (runner/isolation_worker.cpp)
// share the repeat rule (repeat_backward).
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "reference/inputs.h"
#include "runner/harness.h"
#include "runner/registry.h"
#include "runner/staged_problem.h"

namespace flashcheck {

// Calls of a deterministic backward per case (`run --backward`): a difference between any two is
// a failure named `determinism`.
inline constexpr int kDeterminismCalls = 3;

// The backward `calls` times: call(), then for each further call restore() (the gradients back to
// their poison) and call(), its gradient buffers (read(b): the bytes of buffer b as they are now,
// b among `buffers`) compared with the first call's. Returns where a call first differed, or empty;
// every call is made either way, and the buffers end with the last call's gradients.
std::optional<std::string> repeat_backward(int calls, const std::vector<int>& buffers, const std::function<void()>& call,
                                           const std::function<void()>& restore,
                                           const std::function<std::vector<uint8_t>(int)>& read);

// The gradient buffers a problem uses (dq, dk, dv, and dsinks with sinks).
std::vector<int> gradient_buffers(const Problem& p);

// The backward's calls on buffers a forward filled (synchronized), in this process or in the
// isolated worker: `fill(b, dst)` writes buffer b's staged bytes (the gradients' poison, the
// inputs to compare with). Counts the canaries the calls damaged, and fails (error) a backward
// that wrote into an input, dO, O or LSE. The gradients are left in `buf` for the caller.
BackwardOutputs backward_calls(const Variant& v, const Problem& p, const LaunchShape& shape, StagedBuffers& buf,
                               const std::function<void(int, uint8_t*)>& fill, int calls, bool deterministic);

// The forward, then the backward (`calls` times, BackwardArgs::deterministic as given), in this
// process. The result's forward part is run_variant's; its `backward` holds the gradients, or the
// backward's error (a throw of the forward propagates, as in run_variant). Throws InvalidProblem
// for a problem that cannot be staged.
HarnessResult run_variant_backward(const Variant& v, const Problem& p, const Inputs& in, const std::vector<float>& d_out, int calls,
                                   bool deterministic);

}  // namespace flashcheck
