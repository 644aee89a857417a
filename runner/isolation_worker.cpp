// The worker side of isolation (runner/isolation.h): `flashcheck __kernel-worker ...`, the process
// in which a plugin's code runs — its loading, its supports(), its forward() and its unloading.
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <vector>

#include "runner/backward_harness.h"
#include "runner/device.h"
#include "runner/guarded_buffer.h"
#include "runner/isolation.h"
#include "runner/isolation_wire.h"
#include "runner/staged_problem.h"

namespace flashcheck {

namespace {

using namespace wire;

struct FaultRange {
  uintptr_t lo = 0, hi = 0;  // the payload
};
FaultRange g_payload[kBuffers];
uintptr_t g_reserved_lo = 0, g_reserved_hi = 0;
Control* g_control = nullptr;

// Async-signal-safe: plain stores into the shared control page, then the default action, so the
// parent sees the signal as the worker's cause of death.
void on_fault(int sig, siginfo_t* si, void* uc) {
  Control* c = g_control;
  if (c) {
    c->signo = sig;
    c->buffer = -1;
    c->is_write = -1;
    const uintptr_t a = reinterpret_cast<uintptr_t>(si->si_addr);
    c->addr = a;
    if (a >= g_reserved_lo && a < g_reserved_hi) {
      // The guard regions between buffers are shared: the nearest payload is the one overrun (or
      // underrun).
      uintptr_t best = UINTPTR_MAX;
      for (int i = 0; i < kBuffers; ++i) {
        const FaultRange& r = g_payload[i];
        if (r.lo == r.hi) continue;  // a buffer the problem does not use: the kernel got null
        const uintptr_t d = a < r.lo ? r.lo - a : a >= r.hi ? a - r.hi + 1 : 0;
        if (d < best) {
          best = d;
          c->buffer = i;
          c->offset = static_cast<int64_t>(a - r.lo);
        }
      }
    }
#if defined(__x86_64__)
    // The page-fault error code's bit 1 says whether the access was a write.
    if (sig == SIGSEGV) c->is_write = (static_cast<ucontext_t*>(uc)->uc_mcontext.gregs[REG_ERR] & 2) ? 1 : 0;
#else
    (void)uc;
#endif
  }
  signal(sig, SIG_DFL);
  raise(sig);  // delivered when the handler returns (the signal is blocked inside it)
}

void install_fault_handlers() {
  // An alternate stack: a stack overflow in the kernel must still reach the handler.
  static std::vector<char> alt(256 * 1024);
  stack_t ss{};
  ss.ss_sp = alt.data();
  ss.ss_size = alt.size();
  sigaltstack(&ss, nullptr);
  struct sigaction sa{};
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, nullptr);
  sigaction(SIGBUS, &sa, nullptr);
}

struct WorkerMapping {
  uint8_t* base = nullptr;
  size_t len = 0;
  uint8_t* payload[kBuffers]{};

  void unmap() {
    if (base) munmap(base, len);
    base = nullptr;
    g_reserved_lo = g_reserved_hi = 0;
  }
  // [guard | region q | guard | region k | ... | region dsinks | guard]; inputs (every buffer but
  // o, lse and the gradients) read-only for host kernels (the ABI passes them const).
  void map(const Request& rq, bool host) {
    unmap();
    size_t total = kGuardRegion;
    for (const WireBuffer& b : rq.buf) total += b.region + kGuardRegion;
    void* r = mmap(nullptr, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED) throw std::runtime_error(std::string("worker: cannot reserve address space: ") + std::strerror(errno));
    base = static_cast<uint8_t*>(r);
    len = total;
    uint8_t* at = base + kGuardRegion;
    for (int i = 0; i < kBuffers; ++i) {
      const WireBuffer& b = rq.buf[i];
      const int prot = host && !is_output_buffer(i) && !is_gradient_buffer(i) ? PROT_READ : PROT_READ | PROT_WRITE;
      void* m = mmap(at, b.region, prot, MAP_SHARED | MAP_FIXED, kShmFd, static_cast<off_t>(b.file_off));
      if (m == MAP_FAILED) throw std::runtime_error(std::string("worker: cannot map a buffer: ") + std::strerror(errno));
      payload[i] = at + (b.region - b.payload);
      g_payload[i] = {reinterpret_cast<uintptr_t>(payload[i]), reinterpret_cast<uintptr_t>(payload[i] + b.payload)};
      at += b.region + kGuardRegion;
    }
    g_reserved_lo = reinterpret_cast<uintptr_t>(base);
    g_reserved_hi = reinterpret_cast<uintptr_t>(base + total);
  }
};

// One call of the kernel on the mapped buffers, with the arguments the parent staged (the
// request's shape; a buffer with no payload is null). Returns device canary bytes changed.
int64_t run_once(const Variant& v, const Problem& p, const Request& rq, WorkerMapping& m) {
  const bool has_lse = v.caps().lse_base != LseBase::none;
  std::array<void*, kBuffers> ptr{};
  if (v.caps().memory == Memory::host) {
    for (int i = 0; i < kBuffers; ++i) ptr[static_cast<size_t>(i)] = rq.buf[i].payload ? m.payload[i] : nullptr;
    g_control->in_kernel = kInForward;
    v.forward(p, kernel_args(rq.shape, ptr, has_lse, nullptr));
    g_control->in_kernel = kNotInKernel;
    return 0;
  }
  // Device memory: the payloads go to device buffers fenced by canaries, and come back.
  std::vector<std::unique_ptr<GuardedBuffer>> b(kBuffers);
  for (int i = 0; i < kBuffers; ++i) {
    if (!rq.buf[i].payload && i > kBufLse) continue;  // a side tensor the problem does not use
    b[i] = std::make_unique<GuardedBuffer>(Memory::device, rq.buf[i].payload);
    std::memcpy(b[i]->payload_host(), m.payload[i], rq.buf[i].payload);
    b[i]->upload();
    ptr[static_cast<size_t>(i)] = b[i]->kernel_ptr();
  }
  g_control->in_kernel = kInForward;
  v.forward(p, kernel_args(rq.shape, ptr, has_lse, device::stream()));
  device::synchronize();
  g_control->in_kernel = kNotInKernel;
  int64_t oob = 0;
  std::string wrote_input;
  for (int i = 0; i < kBuffers; ++i) {
    if (!b[i]) continue;
    b[i]->download();
    if (is_output_buffer(i)) {
      std::memcpy(m.payload[i], b[i]->payload_host(), rq.buf[i].payload);
    } else if (wrote_input.empty() && std::memcmp(m.payload[i], b[i]->payload_host(), rq.buf[i].payload) != 0) {
      // Host kernels fault on such a write (read-only mappings); a device kernel's is found here.
      const uint8_t* now = b[i]->payload_host();
      size_t at = 0;
      while (m.payload[i][at] == now[at]) ++at;
      wrote_input = "it wrote into its input " + std::string(staged_buffer_name(i)) + " at byte " + std::to_string(at) +
                    " (inputs are read-only)";
    }
    oob += b[i]->damaged_guard_bytes();
  }
  if (!wrote_input.empty()) throw std::runtime_error(wrote_input);
  return oob;
}

// A backward case (kBackward): the forward, then the backward's calls (runner/backward_harness.h),
// their outcome in the reply's backward fields. A throw of the forward propagates (the forward's
// error); the backward's errors are the reply's. Returns the forward's device canary bytes changed.
int64_t run_backward_once(const Variant& v, const Problem& p, const Request& rq, WorkerMapping& m, Reply& rp) {
  const bool has_lse = v.caps().lse_base != LseBase::none;
  const int calls = static_cast<int>(std::max<uint32_t>(1, rq.backward_calls));
  const bool det = rq.deterministic != 0;
  const std::vector<int> grads = gradient_buffers(p);
  auto report = [&](const BackwardOutputs& b) {
    rp.backward_oob_bytes = b.oob_writes;
    if (b.error) {
      rp.backward_status = kKernelError;
      set_text(rp.backward_msg, *b.error);
    } else if (b.nondeterministic) {
      rp.nondeterministic = 1;
      set_text(rp.backward_msg, *b.nondeterministic);
    }
  };
  if (v.caps().memory == Memory::host) {
    std::array<void*, kBuffers> ptr{};
    for (int i = 0; i < kBuffers; ++i) ptr[static_cast<size_t>(i)] = rq.buf[i].payload ? m.payload[i] : nullptr;
    const KernelArgs fwd = kernel_args(rq.shape, ptr, has_lse, nullptr);
    g_control->in_kernel = kInForward;
    v.forward(p, fwd);
    g_control->in_kernel = kNotInKernel;
    // O and LSE are the backward's inputs: read-only now, so a write faults at its first byte.
    for (int i : {int{kBufO}, int{kBufLse}})
      mprotect(m.payload[i] - (rq.buf[i].region - rq.buf[i].payload), rq.buf[i].region, PROT_READ);
    std::vector<std::vector<uint8_t>> poison;  // the gradients as staged, to restore between calls
    for (int b : grads) poison.emplace_back(m.payload[b], m.payload[b] + rq.buf[b].payload);
    const BackwardArgs g = backward_args(rq.shape, ptr, det);
    BackwardOutputs out;
    try {
      out.nondeterministic = repeat_backward(
          calls, grads,
          [&] {
            g_control->in_kernel = kInBackward;
            v.backward(p, fwd, g);
            g_control->in_kernel = kNotInKernel;
          },
          [&] {
            for (size_t i = 0; i < grads.size(); ++i) std::memcpy(m.payload[grads[i]], poison[i].data(), poison[i].size());
          },
          [&](int b) { return std::vector<uint8_t>(m.payload[b], m.payload[b] + rq.buf[b].payload); });
    } catch (const std::exception& e) {
      g_control->in_kernel = kNotInKernel;
      out.error = e.what();
    }
    report(out);
    return 0;
  }
  // Device memory: every buffer to the device, fenced; the forward; its outputs back to the shared
  // buffers at once (a backward that crashes or hangs leaves them to be judged); then the calls.
  StagedBuffers b;
  for (int i = 0; i < kBuffers; ++i) {
    if (!rq.buf[i].payload && (i > kBufLse && (i < kBufDout || i > kBufDv))) continue;  // a tensor the problem does not use
    b[static_cast<size_t>(i)] = std::make_unique<GuardedBuffer>(Memory::device, rq.buf[i].payload);
    std::memcpy(b[static_cast<size_t>(i)]->payload_host(), m.payload[i], rq.buf[i].payload);
    b[static_cast<size_t>(i)]->upload();
  }
  std::array<void*, kBuffers> ptr{};
  for (size_t i = 0; i < ptr.size(); ++i) ptr[i] = b[i] ? b[i]->kernel_ptr() : nullptr;
  device::poison_shared_memory();
  g_control->in_kernel = kInForward;
  v.forward(p, kernel_args(rq.shape, ptr, has_lse, device::stream()));
  device::synchronize();
  g_control->in_kernel = kNotInKernel;
  int64_t oob = 0;
  for (int i = 0; i < kBuffers; ++i) {
    if (!b[static_cast<size_t>(i)]) continue;
    b[static_cast<size_t>(i)]->download();
    oob += b[static_cast<size_t>(i)]->damaged_guard_bytes();
    if (is_output_buffer(i)) {
      std::memcpy(m.payload[i], b[static_cast<size_t>(i)]->payload_host(), rq.buf[i].payload);
    } else if (!is_gradient_buffer(i) && std::memcmp(m.payload[i], b[static_cast<size_t>(i)]->payload_host(), rq.buf[i].payload) != 0) {
      throw std::runtime_error("it wrote into its input " + std::string(staged_buffer_name(i)) + " (inputs are read-only)");
    }
  }
  g_control->in_kernel = kInBackward;
  const BackwardOutputs out = backward_calls(v, p, rq.shape, b, [&](int i, uint8_t* dst) { std::memcpy(dst, m.payload[i], rq.buf[i].payload); },
                                             calls, det);
  g_control->in_kernel = kNotInKernel;
  for (int i : grads) std::memcpy(m.payload[i], b[static_cast<size_t>(i)]->payload_host(), rq.buf[i].payload);
  report(out);
  rp.exiting = out.error.has_value();  // a device error is sticky: the next case needs a fresh context
  return oob;
}

[[noreturn]] void worker_exit(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  _exit(code);  // no static destructors: after a kernel fault, CUDA teardown may not be safe
}

Reply reply(Status s = kOk, const std::string& msg = "") {
  Reply r{};
  r.magic = kMagic;
  r.status = s;
  set_message(r, msg);
  return r;
}

// `describe PLUGIN`: load the plugin (its constructors, flashcheck_get_kernel, its declared space,
// every field checked), send its kernels' descriptions and end without unloading it (a kernel
// worker's unload is the one that is judged).
[[noreturn]] void describe_main(const std::string& plugin) {
  std::string payload;
  Reply r = reply();
  std::vector<std::shared_ptr<Variant>> loaded;  // kept loaded: no destructor runs in this process
  try {
    loaded = load_plugin(plugin);
    payload = describe_variants(loaded).dump();
  } catch (const std::exception& e) {
    r = reply(kSetupError, e.what());
  }
  std::fflush(stdout);  // the plugin's output reaches the parent before the description
  r.payload_bytes = payload.size();
  if (send_all(kSockFd, &r, sizeof r)) send_all(kSockFd, payload.data(), payload.size());
  worker_exit(0);
}

// `kernel NAME [PLUGIN]`: load the kernel, then serve requests until the parent closes the socket
// or asks for the unload.
[[noreturn]] void kernel_main(const std::string& name, const std::string& plugin) {
  Reply ready = reply();
  std::vector<std::shared_ptr<Variant>> loaded;  // keeps the plugin library loaded
  std::shared_ptr<Variant> v;
  try {
    void* c = mmap(nullptr, page_size(), PROT_READ | PROT_WRITE, MAP_SHARED, kShmFd, 0);
    if (c == MAP_FAILED) throw std::runtime_error(std::string("cannot map the control page: ") + std::strerror(errno));
    g_control = static_cast<Control*>(c);
    if (!plugin.empty()) {
      loaded = load_plugin(plugin);
      for (auto& k : loaded)
        if (k->name() == name) v = k;
    } else {
      v = Registry::builtin().find(name);
    }
    if (!v) throw std::runtime_error("no kernel named '" + name + "'" + (plugin.empty() ? "" : " in " + plugin));
    if (v->caps().memory == Memory::device) {
      if (auto why = v->unavailable()) throw std::runtime_error(*why);
      device::stream();  // create the CUDA context now, outside any case's time limit
    }
  } catch (const std::exception& e) {
    ready = reply(kSetupError, e.what());
    send_all(kSockFd, &ready, sizeof ready);
    worker_exit(0);
  }
  install_fault_handlers();
  std::fflush(stdout);
  if (!send_all(kSockFd, &ready, sizeof ready)) worker_exit(0);

  WorkerMapping m;
  for (;;) {
    Request rq;
    std::string line;
    if (!recv_all(kSockFd, &rq, sizeof rq) || rq.magic != kMagic || rq.problem_bytes > kMaxProblemBytes)
      worker_exit(0);  // the parent is done
    line.resize(rq.problem_bytes);
    if (!recv_all(kSockFd, line.data(), line.size())) worker_exit(0);
    Reply rp = reply();
    if (rq.op == kUnload) {
      // The plugin's destructors and exit handlers run here, where a crash, a hang or an
      // _exit(0) of theirs is the parent's verdict on the unload, not flashcheck's exit code.
      m.unmap();
      v.reset();
      loaded.clear();  // dlclose: the library's destructors
      std::fflush(stdout);
      std::exit(kUnloadedExit);  // exit handlers, and destructors of a library dlclose kept loaded
    }
    try {
      const Problem p = parse_problem(line);
      if (rq.op == kSupports) {
        const std::optional<std::string> why = v->unsupported(p);
        rp.supported = !why;
        if (why) set_message(rp, *why);
      } else if (rq.op == kBackward) {
        m.map(rq, v->caps().memory == Memory::host);
        rp.oob_bytes = run_backward_once(*v, p, rq, m, rp);
      } else {
        m.map(rq, v->caps().memory == Memory::host);
        rp.oob_bytes = run_once(*v, p, rq, m);
      }
    } catch (const std::exception& e) {
      rp.status = kKernelError;
      set_message(rp, e.what());
      rp.exiting = v->caps().memory == Memory::device;
    }
    std::fflush(stdout);  // the kernel's output reaches the parent before the verdict
    std::fflush(stderr);
    if (!send_all(kSockFd, &rp, sizeof rp) || rp.exiting) worker_exit(0);
  }
}

}  // namespace

int worker_main(int argc, char** argv) {
  // argv: flashcheck __kernel-worker PARENT_PID MODE ...
  const bool describe = argc == 5 && std::strcmp(argv[3], kModeDescribe) == 0;
  const bool kernel = (argc == 5 || argc == 6) && std::strcmp(argv[3], kModeKernel) == 0;
  if (!describe && !kernel) {
    std::fprintf(stderr, "usage: %s %s PARENT_PID kernel NAME [PLUGIN] | describe PLUGIN (started by flashcheck itself)\n",
                 argv[0], kWorkerArg);
    return kCannotTest;
  }
  // Die with the parent: a worker must never outlive the run that started it.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != static_cast<pid_t>(std::atoll(argv[2]))) worker_exit(0);  // it died before the signal was armed
  if (describe) describe_main(argv[4]);
  kernel_main(argv[4], argc > 5 ? argv[5] : "");
}

}  // namespace flashcheck
