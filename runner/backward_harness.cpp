#include "runner/backward_harness.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "reference/dtype.h"
#include "reference/rng.h"
#include "runner/device.h"
#include "runner/staged_problem.h"

namespace flashcheck {

namespace {

std::vector<uint8_t> bytes_of(GuardedBuffer& b, size_t n) {
  b.download();
  return {b.payload_host(), b.payload_host() + n};
}

}  // namespace

std::optional<std::string> repeat_backward(int calls, const std::vector<int>& buffers, const std::function<void()>& call,
                                           const std::function<void()>& restore,
                                           const std::function<std::vector<uint8_t>(int)>& read) {
  call();
  if (calls <= 1) return std::nullopt;
  std::vector<std::vector<uint8_t>> first;
  for (int b : buffers) first.push_back(read(b));
  std::optional<std::string> differs;
  // Every call is made, a difference or not: each call's gradients are what a caller of that call
  // gets, and the last call's are judged.
  for (int c = 2; c <= calls; ++c) {
    // Poisoned again: a call that leaves an element unwritten shows as a difference, not as the
    // last call's value.
    restore();
    call();
    for (size_t i = 0; i < buffers.size(); ++i) {
      const std::vector<uint8_t> now = read(buffers[i]);
      const auto [a, b] = std::mismatch(first[i].begin(), first[i].end(), now.begin(), now.end());
      if (!differs && (a != first[i].end() || b != now.end()))
        differs = std::string(staged_buffer_name(buffers[i])) + " of call " + std::to_string(c) + " of " + std::to_string(calls) +
               " differs from the first call's at byte " + std::to_string(a - first[i].begin()) +
               " (a deterministic backward was asked for)";
    }
  }
  return differs;
}

std::vector<int> gradient_buffers(const Problem& p) {
  std::vector<int> b{kBufDq, kBufDk, kBufDv};
  if (p.sinks) b.push_back(kBufDsinks);
  return b;
}

BackwardOutputs backward_calls(const Variant& v, const Problem& p, const LaunchShape& shape, StagedBuffers& buf,
                               const std::function<void(int, uint8_t*)>& fill, int calls, bool deterministic) {
  const bool dev = v.caps().memory == Memory::device;
  BackwardOutputs out;
  auto size_of = [&](int b) { return static_cast<size_t>(buf[static_cast<size_t>(b)]->payload_bytes()); };
  auto damaged = [&] {
    int64_t n = 0;
    for (auto& b : buf)
      if (b) {
        b->download();
        n += b->damaged_guard_bytes();
      }
    return n;
  };
  const int64_t oob_then = damaged();
  // What the backward must leave as it found it: the forward's outputs are its inputs now.
  const std::vector<uint8_t> o_then = bytes_of(*buf[kBufO], size_of(kBufO));
  const std::vector<uint8_t> lse_then = bytes_of(*buf[kBufLse], size_of(kBufLse));
  std::array<void*, kStagedBuffers> ptr{};
  for (size_t b = 0; b < ptr.size(); ++b) ptr[b] = buf[b] ? buf[b]->kernel_ptr() : nullptr;
  const KernelArgs fwd = kernel_args(shape, ptr, v.caps().lse_base != LseBase::none, dev ? device::stream() : nullptr);
  const BackwardArgs g = backward_args(shape, ptr, deterministic);
  const std::vector<int> grads = gradient_buffers(p);
  try {
    out.nondeterministic = repeat_backward(
        calls, grads,
        [&] {
          if (dev) device::poison_shared_memory();
          v.backward(p, fwd, g);
          if (dev) device::synchronize();
        },
        [&] {
          for (int b : grads) {
            GuardedBuffer& gb = *buf[static_cast<size_t>(b)];
            gb.download();  // canaries as the kernel left them: restoring the payload must not hide an overrun
            fill(b, gb.payload_host());
            gb.upload();
          }
        },
        [&](int b) { return bytes_of(*buf[static_cast<size_t>(b)], size_of(b)); });
  } catch (const std::exception& e) {
    out.error = e.what();
    return out;
  }
  out.oob_writes = std::max<int64_t>(0, damaged() - oob_then);
  // Its inputs (q, k, v, dO, the side tensors) and the forward's outputs must be as they were.
  auto wrote = [&](const char* what, int64_t at) {
    out.error = std::string("its backward wrote into ") + what + " at byte " + std::to_string(at) + " (the backward's inputs are read-only)";
  };
  std::vector<uint8_t> staged;
  for (int b = 0; b < kStagedBuffers && !out.error; ++b) {
    if (is_output_buffer(b) || is_gradient_buffer(b) || !buf[static_cast<size_t>(b)]) continue;
    staged.resize(size_of(b));
    fill(b, staged.data());
    const uint8_t* now = buf[static_cast<size_t>(b)]->payload_host();
    const auto at = std::mismatch(staged.begin(), staged.end(), now).first;
    if (at != staged.end()) wrote(staged_buffer_name(b), at - staged.begin());
  }
  for (const auto& [b, then] : {std::pair{int{kBufO}, &o_then}, std::pair{int{kBufLse}, &lse_then}}) {
    if (out.error) break;
    const uint8_t* now = buf[static_cast<size_t>(b)]->payload_host();
    const auto at = std::mismatch(then->begin(), then->end(), now).first;
    if (at != then->end()) wrote(staged_buffer_name(b), at - then->begin());
  }
  return out;
}

HarnessResult run_variant_backward(const Variant& v, const Problem& p, const Inputs& in, const std::vector<float>& d_out, int calls,
                                   bool deterministic) {
  const Capabilities& caps = v.caps();
  const bool dev = caps.memory == Memory::device;
  StagedProblem st(caps.memory, p, in, d_out);  // validates the problem, its inputs and dO (InvalidProblem)
  if (dev) device::poison_shared_memory();
  st.launch(v);
  if (dev) device::synchronize();
  HarnessResult h = finish_run(st, caps);  // the forward's outputs and checks, as run_variant's (a throw is the forward's)
  h.backward = backward_calls(v, p, st.staging.shape(), st.buf, [&](int b, uint8_t* dst) { st.staging.fill(b, dst); }, calls,
                              deterministic);
  if (!h.backward->error)
    h.backward->gradients = st.staging.collect_gradients(st.buffer(kBufDq).payload_host(), st.buffer(kBufDk).payload_host(),
                                                         st.buffer(kBufDv).payload_host(),
                                                         p.sinks ? st.buffer(kBufDsinks).payload_host() : nullptr);
  return h;
}

}  // namespace flashcheck
