// The parent side of isolation (runner/isolation.h): starting worker processes, talking to them,
// and turning how they end into verdicts. The worker side is runner/isolation_worker.cpp.
#include "runner/isolation.h"

#include "verify/untrusted_text.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <thread>
#include <vector>

#include "runner/guarded_buffer.h"
#include "runner/isolation_wire.h"
#include "verify/metrics.h"

extern char** environ;

namespace flashcheck {

namespace {

using namespace wire;

uint8_t canary_byte(uint64_t i) { return reinterpret_cast<const uint8_t*>(&kCanary)[i % 2]; }

std::string signal_name(int sig) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 32))
  if (const char* a = sigabbrev_np(sig)) return std::string("SIG") + a;
#endif
  return "signal " + std::to_string(sig);
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, s >= 100 ? "%.0f" : "%.3g", s);
  return buf;
}

// One worker process: its channels (control socket, the stdout/stderr pipe, the shared memfd),
// its output forwarded with a label, and how it ended.
struct WorkerProcess {
  std::string label;  // prefix of each forwarded line: the kernel's name, or "plugin NAME.so"
  IsolationOptions opt;
  int shm = -1;
  Control* control = nullptr;
  pid_t pid = -1;
  int sock = -1, out = -1;
  int64_t starts = 0;
  size_t forwarded = 0, dropped = 0;
  TerminalFilter terminal;
  bool line_start = true;

  WorkerProcess(std::string label_, IsolationOptions opt_) : label(std::move(label_)), opt(std::move(opt_)) { open_shm(); }
  ~WorkerProcess() {
    stop();
    if (control) munmap(control, page_size());
    if (shm >= 0) close(shm);
  }
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  void open_shm() {
    int fd = memfd_create("flashcheck-buffers", MFD_CLOEXEC);
    if (fd < 0) throw std::runtime_error(std::string("memfd_create: ") + std::strerror(errno));
    // Above the fds the worker gets by number (0-4), so that no dup2 of the spawn clobbers another.
    shm = fcntl(fd, F_DUPFD_CLOEXEC, 10);
    close(fd);
    if (shm < 0 || ftruncate(shm, static_cast<off_t>(page_size())) != 0)
      throw std::runtime_error(std::string("cannot create the shared buffers: ") + std::strerror(errno));
    void* c = mmap(nullptr, page_size(), PROT_READ | PROT_WRITE, MAP_SHARED, shm, 0);
    if (c == MAP_FAILED) throw std::runtime_error(std::string("cannot map the control page: ") + std::strerror(errno));
    control = static_cast<Control*>(c);
  }

  void reset_control() {
    control->magic = kMagic;
    control->in_kernel = 0;
    control->signo = 0;
    control->buffer = -1;
    control->is_write = -1;
    control->offset = 0;
    control->addr = 0;
  }

  bool alive() {
    if (pid <= 0) return false;
    int st;
    if (waitpid(pid, &st, WNOHANG) == 0) return true;
    pid = -1;  // ended between requests (after a device kernel's error): start afresh
    if (sock >= 0) close(sock);
    if (out >= 0) close(out);
    sock = out = -1;
    return false;
  }

  // The worker's stdout and stderr, forwarded to flashcheck's stderr (stdout carries the reports
  // and `--json -`) with the label on each line, at most output_limit bytes per request.
  // A kernel's output is untrusted text: escape sequences and carriage returns are dropped
  // (verify/untrusted_text.h), so nothing it prints acts on the terminal or rewrites a line.
  void forward(const char* s, size_t n) {
    std::string clean, chunk;
    terminal.feed(std::string_view(s, n), clean);
    for (size_t i = 0; i < clean.size(); ++i) {
      if (forwarded >= opt.output_limit) {
        dropped += clean.size() - i;
        break;
      }
      if (line_start) chunk += "[" + label + "] ";
      chunk += clean[i];
      line_start = clean[i] == '\n';
      ++forwarded;
    }
    if (!chunk.empty()) std::fwrite(chunk.data(), 1, chunk.size(), stderr);
  }
  void pump_output() {
    if (out < 0) return;
    char buf[65536];
    for (;;) {
      const ssize_t n = read(out, buf, sizeof buf);
      if (n > 0) {
        forward(buf, static_cast<size_t>(n));
        continue;
      }
      if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        close(out);  // the worker (or the kernel, closing its stdout and stderr) ended the stream
        out = -1;
      }
      if (n < 0 && errno == EINTR) continue;
      return;
    }
  }
  void end_output() {
    if (!line_start) std::fputc('\n', stderr);
    line_start = true;
    if (dropped)
      std::fprintf(stderr, "[%s] ... %zu more bytes of the kernel's output not shown (limit %zu per case)\n", label.c_str(),
                   dropped, opt.output_limit);
    forwarded = dropped = 0;
  }

  // `flashcheck __kernel-worker PARENT_PID <args...>`.
  void spawn(const std::vector<std::string>& worker_args) {
    int sv[2], op[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0 || pipe2(op, O_CLOEXEC) != 0)
      throw std::runtime_error(std::string("cannot create the worker's channels: ") + std::strerror(errno));
    // Move the child's ends above 4 so that the dup2s below cannot overwrite one another.
    const int child_sock = fcntl(sv[1], F_DUPFD_CLOEXEC, 10), child_out = fcntl(op[1], F_DUPFD_CLOEXEC, 10);
    close(sv[1]);
    close(op[1]);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, child_out, 1);
    posix_spawn_file_actions_adddup2(&fa, child_out, 2);
    posix_spawn_file_actions_adddup2(&fa, child_sock, kSockFd);
    posix_spawn_file_actions_adddup2(&fa, shm, kShmFd);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
    posix_spawn_file_actions_addclosefrom_np(&fa, kShmFd + 1);  // nothing else of the parent's leaks in
#endif
    posix_spawnattr_t at;
    posix_spawnattr_init(&at);
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &all);
    // Its own process group: a timeout kills the worker and anything it started.
    posix_spawnattr_setpgroup(&at, 0);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
    const std::string parent = std::to_string(getpid());
    std::vector<char*> args{const_cast<char*>(opt.worker_exe.c_str()), const_cast<char*>(kWorkerArg),
                            const_cast<char*>(parent.c_str())};
    for (const std::string& a : worker_args) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    // The parent's environment, plus a passive OpenMP wait policy unless one is set: an OpenMP
    // kernel's idle threads would otherwise spin between cases, taking cores from the judge that
    // runs meanwhile (measured: 100x slower tiny cases on a loaded 2-core machine).
    std::vector<char*> env;
    bool omp_set = false;
    for (char** e = environ; *e; ++e) {
      omp_set |= std::strncmp(*e, "OMP_WAIT_POLICY=", 16) == 0;
      env.push_back(*e);
    }
    static char kPassive[] = "OMP_WAIT_POLICY=passive";
    if (!omp_set) env.push_back(kPassive);
    env.push_back(nullptr);
    const int rc = posix_spawn(&pid, opt.worker_exe.c_str(), &fa, &at, args.data(), env.data());
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    close(child_sock);
    close(child_out);
    if (rc != 0) {
      close(sv[0]);
      close(op[0]);
      pid = -1;
      throw std::runtime_error("cannot start a worker process (" + opt.worker_exe + "): " + std::strerror(rc));
    }
    ++starts;
    sock = sv[0];
    out = op[0];
    fcntl(out, F_SETFL, fcntl(out, F_GETFL) | O_NONBLOCK);
  }

  enum class Wait { reply, closed, timeout };

  // Reads `n` bytes from the socket within what is left of `timeout_s`, forwarding the worker's
  // output meanwhile and calling `waiting` about once a second.
  Wait receive(void* into, size_t n, std::chrono::steady_clock::time_point t0, double timeout_s,
               const std::function<void(double)>& waiting) {
    size_t got = 0;
    double next_beat = 1;
    while (got < n) {
      const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (el >= timeout_s) return Wait::timeout;
      if (waiting && el >= next_beat) {
        waiting(el);
        next_beat = el + 1;
      }
      pollfd fds[2] = {{sock, POLLIN, 0}, {out, POLLIN, 0}};
      const int ms = static_cast<int>(std::ceil(std::min(timeout_s - el, 1.0) * 1000));
      if (poll(fds, out >= 0 ? 2 : 1, ms) < 0 && errno != EINTR) return Wait::closed;
      if (out >= 0 && fds[1].revents) pump_output();
      if (fds[0].revents) {
        const ssize_t r = recv(sock, static_cast<char*>(into) + got, n - got, MSG_DONTWAIT);
        if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN)) return Wait::closed;
        if (r > 0) got += static_cast<size_t>(r);
      }
    }
    return Wait::reply;
  }

  // A reply (and the payload after it, when `payload` is given) within `timeout_s`.
  Wait wait_reply(Reply& r, double timeout_s, const std::function<void(double)>& waiting, std::string* payload = nullptr) {
    const auto t0 = std::chrono::steady_clock::now();
    Wait w = receive(&r, sizeof r, t0, timeout_s, waiting);
    if (w != Wait::reply) return w;
    if (r.magic != kMagic || (r.payload_bytes && !payload) || r.payload_bytes > (uint64_t{1} << 30)) return Wait::closed;
    if (payload && r.payload_bytes) {
      payload->resize(r.payload_bytes);
      w = receive(payload->data(), payload->size(), t0, timeout_s, waiting);
    }
    if (w == Wait::reply) pump_output();  // what the worker printed before replying comes first
    return w;
  }

  // Waits for the worker to end (killing it after `grace_s`), kills what is left of its process
  // group, and returns its wait status.
  int reap(double grace_s) {
    if (sock >= 0) close(sock);
    sock = -1;
    int status = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (;;) {
      siginfo_t si{};
      // WNOWAIT: look without reaping, so that the group cannot be reused before it is killed.
      if (waitid(P_PID, static_cast<id_t>(pid), &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == pid) break;
      if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > grace_s) {
        kill(-pid, SIGKILL);
        kill(pid, SIGKILL);
        break;
      }
      pump_output();
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    kill(-pid, SIGKILL);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    pump_output();
    if (out >= 0) close(out);
    out = -1;
    pid = -1;
    return status;
  }
  int kill_and_reap() {
    kill(-pid, SIGKILL);
    return reap(5.0);
  }

  void stop() {
    if (pid > 0) reap(2.0);  // closing the socket asks it to exit
  }

  // After an unexpected end: what the verdict says. `when` follows the cause (" in its supports()").
  AbnormalEnd describe(int status, const BufferLayout* l, const std::string& when) const {
    if (WIFEXITED(status)) return {"kernel_crashed", "exited " + std::to_string(WEXITSTATUS(status)) + when, false};
    if (!WIFSIGNALED(status)) return {"kernel_crashed", std::string("ended with wait status ") + std::to_string(status) + when, false};
    const int sig = WTERMSIG(status);
    const std::string sname = signal_name(sig);
    const bool fault = (sig == SIGSEGV || sig == SIGBUS) && control->signo == sig;
    if (fault && l && control->buffer >= 0 && control->in_kernel) {
      const int b = control->buffer;
      const int64_t off = control->offset, size = static_cast<int64_t>(l->buf[b].payload);
      const std::string access = control->is_write == 1 ? "write" : control->is_write == 0 ? "read" : "access";
      const std::string tail = " (" + std::to_string(size) + " bytes): it faulted in the guard pages around the buffer (" + sname + ")";
      if (off >= size)
        return {"out_of_bounds", access + " at byte " + std::to_string(off - size) + " past the end of " + staged_buffer_name(b) + tail, false};
      if (off < 0)
        return {"out_of_bounds", access + " " + std::to_string(-off) + " bytes before the start of " + staged_buffer_name(b) + tail, false};
      return {"kernel_crashed", "crashed (" + sname + "): " + access + " at byte " + std::to_string(off) + " of input " +
                                    staged_buffer_name(b) + " (inputs are read-only)",
              false};
    }
    std::string d = "crashed (" + sname + ")" + when;
    if (fault && l) {
      char a[64];
      std::snprintf(a, sizeof a, ": fault at address 0x%llx, outside every buffer", static_cast<unsigned long long>(control->addr));
      d += a;
    }
    return {"kernel_crashed", d, false};
  }

  // One request whose reply carries no buffers (supports, unload): the answer, or how it ended.
  struct Exchange {
    std::optional<Reply> reply;
    std::optional<AbnormalEnd> abnormal;
  };
  Exchange ask(const std::string& rq, double timeout_s, const std::string& when) {
    reset_control();
    Reply rp{};
    const Wait got = send_all(sock, rq) ? wait_reply(rp, timeout_s, {}) : Wait::closed;
    Exchange e;
    if (got == Wait::reply) {
      e.reply = rp;
    } else if (got == Wait::timeout) {
      kill_and_reap();
      e.abnormal = AbnormalEnd{"kernel_crashed", "timed out after " + seconds_text(timeout_s) + " s" + when, true};
    } else {
      e.abnormal = describe(reap(5.0), nullptr, when);
    }
    end_output();
    return e;
  }
};

std::string base_name(const std::string& path) { return std::filesystem::path(path).filename().string(); }

}  // namespace

// ---- describe_plugin ---------------------------------------------------------------------------

std::vector<std::shared_ptr<Variant>> describe_plugin(const std::string& path, const IsolationOptions& opt) {
  IsolationOptions o = opt;
  o.output_limit = std::max<size_t>(o.output_limit, 64 * 1024);  // a constructor's chatter is all there is to see
  WorkerProcess w("plugin " + base_name(path), o);
  w.reset_control();
  w.spawn({kModeDescribe, path});
  Reply r{};
  std::string payload;
  const std::string what = "cannot test: plugin '" + path + "' ";
  const auto got = w.wait_reply(r, opt.load_timeout_s, {}, &payload);
  std::optional<std::string> failure;
  if (got == WorkerProcess::Wait::timeout) {
    w.kill_and_reap();
    failure = what + "timed out after " + seconds_text(opt.load_timeout_s) +
              " s while loading (its constructors or flashcheck_get_kernel never returned)";
  } else if (got == WorkerProcess::Wait::closed) {
    // Loading ended the process: a constructor, flashcheck_get_kernel or a declared field's pointer.
    const AbnormalEnd e = w.describe(w.reap(5.0), nullptr, "");
    failure = what + e.detail + " while loading (its constructors, flashcheck_get_kernel or its declared space)";
  } else {
    w.reap(5.0);
  }
  w.end_output();
  if (failure) throw CannotTest(*failure);
  if (r.status != kOk) throw CannotTest(message_of(r));  // a bad field, the same message load_plugin gives
  return described_variants(nlohmann::json::parse(payload));
}

// ---- KernelWorker ------------------------------------------------------------------------------

struct KernelWorker::Impl {
  std::string name, plugin;
  const Variant* variant;  // a built-in's declared space is judged here
  Memory memory;
  LseBase lse_base;
  IsolationOptions opt;
  WorkerProcess proc;
  CaseTimeLimit limit;

  Impl(const Variant& v, std::string plugin_, IsolationOptions opt_)
      : name(v.name()),
        plugin(std::move(plugin_)),
        variant(&v),
        memory(v.caps().memory),
        lse_base(v.caps().lse_base),
        opt(opt_),
        proc(v.name(), opt_),
        limit(v.caps().memory, opt_.time_limits, opt_.timeout_s) {}

  // One run request (the forward) or, with d_out, one backward case's (KernelWorker::run_backward).
  IsolatedRun exchange(const Problem& p, const Inputs& in, const std::vector<float>* d_out, int calls, bool deterministic,
                       const std::function<void(double)>& waiting);

  // Starts the worker if none runs. Empty on success, else the run that says why it could not.
  std::optional<IsolatedRun> ensure_started(const std::function<void(double)>& waiting) {
    if (proc.alive()) return std::nullopt;
    proc.reset_control();
    std::vector<std::string> args{kModeKernel, name};
    if (!plugin.empty()) args.push_back(plugin);
    proc.spawn(args);
    Reply r{};
    IsolatedRun run;
    switch (proc.wait_reply(r, opt.startup_timeout_s, waiting)) {
      case WorkerProcess::Wait::reply:
        if (r.status == kOk) return std::nullopt;
        run.error = "the worker process could not load the kernel: " + message_of(r);
        proc.reap(2.0);
        break;
      case WorkerProcess::Wait::closed:
        run.abnormal = proc.describe(proc.reap(5.0), nullptr, " while the worker process was loading the kernel");
        break;
      case WorkerProcess::Wait::timeout:
        proc.kill_and_reap();
        run.abnormal = AbnormalEnd{"kernel_crashed",
                                   "timed out after " + seconds_text(opt.startup_timeout_s) + " s loading the kernel", true};
        break;
    }
    proc.end_output();
    return run;
  }
};

KernelWorker::KernelWorker(const Variant& v, std::string plugin, IsolationOptions opt)
    : impl_(std::make_unique<Impl>(v, std::move(plugin), std::move(opt))) {}

KernelWorker::~KernelWorker() = default;

int64_t KernelWorker::starts() const { return impl_->proc.starts; }

CaseTimeLimit& KernelWorker::time_limit() { return impl_->limit; }

double KernelWorker::timeout_for(const Problem& p) const { return impl_->limit.for_problem(p).seconds; }

SupportsAnswer KernelWorker::supports(const Problem& p) {
  Impl& w = *impl_;
  SupportsAnswer a;
  // A built-in kernel's refusal is flashcheck's own code (its declared space): no process needed.
  if (w.plugin.empty()) {
    a.refusal = w.variant->unsupported(p);
    return a;
  }
  if (auto failed = w.ensure_started({})) {
    a.abnormal = failed->abnormal;
    a.error = failed->error;
    return a;
  }
  const double limit = w.opt.timeout_s ? std::min(*w.opt.timeout_s, w.opt.supports_timeout_s) : w.opt.supports_timeout_s;
  WorkerProcess::Exchange e = w.proc.ask(request(kSupports, p), limit, " in its supports()");
  if (e.abnormal) {
    a.abnormal = e.abnormal;
  } else if (e.reply->status != kOk) {
    // supports() of a C plugin cannot throw; a C++ one that did has said no in its own way.
    a.refusal = "its supports() failed: " + message_of(*e.reply);
  } else if (!e.reply->supported) {
    a.refusal = message_of(*e.reply);
  }
  return a;
}

std::optional<AbnormalEnd> KernelWorker::unload() {
  Impl& w = *impl_;
  if (w.plugin.empty()) return std::nullopt;  // a built-in kernel: nothing of anyone else's to unload
  // A worker that died with its last case is started again: the destructors are judged either way.
  if (!w.proc.alive() && w.ensure_started({})) return std::nullopt;  // loading failed: its cases said so
  const std::string when = " while unloading (its destructors or exit handlers)";
  w.proc.reset_control();
  const std::string rq = request(kUnload, Problem{});
  Reply ignored{};
  const auto got = send_all(w.proc.sock, rq) ? w.proc.wait_reply(ignored, w.opt.unload_timeout_s, {})
                                                          : WorkerProcess::Wait::closed;
  std::optional<AbnormalEnd> bad;
  if (got == WorkerProcess::Wait::timeout) {
    w.proc.kill_and_reap();
    bad = AbnormalEnd{"kernel_crashed", "timed out after " + seconds_text(w.opt.unload_timeout_s) + " s" + when, true};
  } else {
    // The worker never replies to an unload: it exits with kUnloadedExit once every handler ran.
    const int status = w.proc.reap(w.opt.unload_timeout_s);
    if (!(WIFEXITED(status) && WEXITSTATUS(status) == kUnloadedExit)) bad = w.proc.describe(status, nullptr, when);
  }
  w.proc.end_output();
  return bad;
}

IsolatedRun KernelWorker::run(const Problem& p, const Inputs& in, const std::function<void(double)>& waiting) {
  return impl_->exchange(p, in, nullptr, 0, false, waiting);
}

IsolatedRun KernelWorker::run_backward(const Problem& p, const Inputs& in, const std::vector<float>& d_out, int calls,
                                       bool deterministic, const std::function<void(double)>& waiting) {
  return impl_->exchange(p, in, &d_out, std::max(1, calls), deterministic, waiting);
}

IsolatedRun KernelWorker::Impl::exchange(const Problem& p, const Inputs& in, const std::vector<float>* d_out, int calls,
                                         bool deterministic, const std::function<void(double)>& waiting) {
  Impl& w = *this;
  WorkerProcess& proc = w.proc;
  const auto t0 = std::chrono::steady_clock::now();
  auto finish = [&](IsolatedRun r) {
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
  };
  // The problem and its inputs are checked here, before any worker: a bad one is the caller's
  // (InvalidProblem, cannot test), never the kernel's.
  const Staging staging = d_out ? Staging(p, in, *d_out) : Staging(p, in);
  if (auto failed = w.ensure_started(waiting)) return finish(std::move(*failed));

  const BufferLayout l = layout_for(staging);
  if (ftruncate(proc.shm, static_cast<off_t>(l.file_bytes)) != 0)
    throw std::runtime_error("cannot size the shared buffers to " + std::to_string(l.file_bytes) + " bytes: " + std::strerror(errno));
  void* mm = mmap(nullptr, l.file_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, proc.shm, 0);
  if (mm == MAP_FAILED) throw std::runtime_error(std::string("cannot map the shared buffers: ") + std::strerror(errno));
  struct Unmap {
    void* p;
    size_t n;
    ~Unmap() { munmap(p, n); }
  } unmap{mm, l.file_bytes};
  uint8_t* base = static_cast<uint8_t*>(mm);

  // Stage: canaries in each region's slack before the payload (an underrun that stays inside the
  // page changes them), then every buffer as the in-process harness stages it (Staging).
  for (int i = 0; i < kBuffers; ++i) {
    uint8_t* r = base + l.buf[i].file_off;
    for (uint64_t j = 0; j < l.buf[i].region - l.buf[i].payload; ++j) r[j] = canary_byte(j);
    staging.fill(i, base + l.payload_off(i));
  }

  proc.reset_control();
  const std::string rq = d_out ? request(kBackward, p, &l, &staging.shape(), static_cast<uint32_t>(calls), deterministic)
                               : request(kRun, p, &l, &staging.shape());
  const CaseTimeLimit::Limit limit = w.limit.for_problem(p);
  Reply rp{};
  const auto sent = std::chrono::steady_clock::now();
  const WorkerProcess::Wait got =
      send_all(proc.sock, rq) ? proc.wait_reply(rp, limit.seconds, waiting) : WorkerProcess::Wait::closed;
  IsolatedRun out;
  out.kernel_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - sent).count();
  // The kernel's outputs as the shared buffers hold them, their slack canaries counted (an underrun
  // that stayed inside the first page): the forward's o and lse, and a backward case's gradients.
  auto collect = [&](bool gradients) {
    HarnessResult h = staging.collect(base + l.payload_off(kBufO), base + l.payload_off(kBufLse), w.lse_base != LseBase::none);
    h.oob_writes = rp.oob_bytes;
    auto slack = [&](int i) {
      int64_t n = 0;
      const uint8_t* r = base + l.buf[i].file_off;
      for (uint64_t j = 0; j < l.buf[i].region - l.buf[i].payload; ++j) n += r[j] != canary_byte(j);
      return n;
    };
    for (int i : {int{kBufO}, int{kBufLse}}) h.oob_writes += slack(i);
    if (!d_out) return h;
    BackwardOutputs& b = h.backward.emplace();
    if (!gradients) return h;
    b.oob_writes = rp.backward_oob_bytes;
    for (int i : {int{kBufDq}, int{kBufDk}, int{kBufDv}, int{kBufDsinks}}) b.oob_writes += slack(i);
    if (rp.backward_status != kOk) b.error = text_of(rp.backward_msg);
    else b.gradients = staging.collect_gradients(base + l.payload_off(kBufDq), base + l.payload_off(kBufDk), base + l.payload_off(kBufDv),
                                                 p.sinks ? base + l.payload_off(kBufDsinks) : nullptr);
    if (rp.nondeterministic) b.nondeterministic = text_of(rp.backward_msg);
    return h;
  };
  if (got == WorkerProcess::Wait::timeout) {
    out.in_backward = d_out && proc.control->in_kernel == kInBackward;
    proc.kill_and_reap();
    out.abnormal = AbnormalEnd{"kernel_crashed", "timed out after " + seconds_text(limit.seconds) + " s (" + limit.basis + ")", true};
  } else if (got == WorkerProcess::Wait::closed) {
    out.in_backward = d_out && proc.control->in_kernel == kInBackward;
    out.abnormal = proc.describe(proc.reap(5.0), &l, "");
  } else if (rp.status != kOk) {
    out.error = message_of(rp);
    if (rp.exiting) proc.reap(5.0);
  } else {
    out.result = collect(true);
    if (rp.exiting) proc.reap(5.0);  // the backward's device error: CUDA errors are sticky
  }
  // The forward returned before the backward crashed or hung: its outputs are in the shared buffers.
  if (out.in_backward) out.result = collect(false);
  proc.end_output();
  return finish(std::move(out));
}

}  // namespace flashcheck
