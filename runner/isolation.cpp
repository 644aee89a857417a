#include "runner/isolation.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <vector>

#include "runner/device.h"
#include "runner/guarded_buffer.h"
#include "verify/metrics.h"

extern char** environ;

namespace flashcheck {

namespace {

constexpr uint32_t kMagic = 0xFC150001u;
// Address space (not memory) left PROT_NONE around every buffer in the worker: a write anywhere in
// the 4 MiB past a buffer faults, far beyond any canary.
constexpr size_t kGuardRegion = size_t{4} << 20;
constexpr int kSockFd = 3, kShmFd = 4;  // where the worker finds its control socket and the memfd
constexpr int kBuffers = 5;
constexpr const char* kBufferName[kBuffers] = {"q", "k", "v", "o", "lse"};

enum : int32_t { kOk = 0, kKernelError = 1, kSetupError = 2 };

struct WireBuffer {
  uint64_t file_off, region, payload;  // region: whole pages; the payload ends where the region ends
};

struct Request {
  uint32_t magic;
  uint32_t op;  // 1: run the kernel once
  int64_t dims[7];
  int32_t causal, dtype, has_scale, pad;
  double scale;
  uint64_t file_bytes;
  WireBuffer buf[kBuffers];
};

struct Reply {
  uint32_t magic;
  int32_t status;
  int32_t exiting;  // the worker ends after this reply (a device kernel failed: CUDA errors are sticky)
  int32_t pad;
  int64_t oob_bytes;  // device canary bytes changed
  char msg[2000];
};

// The memfd's first page. The worker's fault handler writes it; the parent reads it once the
// worker is dead, to tell a fault in a guard page from any other crash.
struct Control {
  uint32_t magic;
  volatile int32_t in_kernel;
  volatile int32_t signo;
  volatile int32_t buffer;    // the buffer nearest to the fault address, or -1 (outside them all)
  volatile int32_t is_write;  // 1 write, 0 read, -1 unknown
  int32_t pad;
  volatile int64_t offset;  // fault address minus that buffer's payload start
  volatile uint64_t addr;
};

struct BufferLayout {
  uint64_t file_bytes = 0;
  WireBuffer buf[kBuffers]{};
  uint64_t payload_off(int i) const { return buf[i].file_off + buf[i].region - buf[i].payload; }
};

size_t page_size() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }

uint64_t round_up(uint64_t x, uint64_t to) { return (x + to - 1) / to * to; }

BufferLayout layout_for(const Problem& p) {
  const uint64_t page = page_size(), db = static_cast<uint64_t>(dtype_bytes(p.dtype));
  const uint64_t payload[kBuffers] = {static_cast<uint64_t>(p.q_elems()) * db, static_cast<uint64_t>(p.k_elems()) * db,
                                      static_cast<uint64_t>(p.v_elems()) * db, static_cast<uint64_t>(p.o_elems()) * db,
                                      static_cast<uint64_t>(p.lse_elems()) * 4};
  BufferLayout l;
  uint64_t off = page;  // the control page comes first
  for (int i = 0; i < kBuffers; ++i) {
    const uint64_t region = round_up(std::max<uint64_t>(payload[i], 1), page);
    l.buf[i] = {off, region, payload[i]};
    off += region;
  }
  l.file_bytes = off;
  return l;
}

Request to_wire(const Problem& p, const BufferLayout& l) {
  Request r{};
  r.magic = kMagic;
  r.op = 1;
  const int64_t d[7] = {p.batch, p.heads_q, p.heads_kv, p.seq_q, p.seq_kv, p.head_dim_qk, p.head_dim_v};
  std::copy(d, d + 7, r.dims);
  r.causal = static_cast<int32_t>(p.causal);
  r.dtype = static_cast<int32_t>(p.dtype);
  r.has_scale = p.scale.has_value();
  r.scale = p.scale.value_or(0);
  r.file_bytes = l.file_bytes;
  std::copy(l.buf, l.buf + kBuffers, r.buf);
  return r;
}

Problem from_wire(const Request& r) {
  Problem p;
  p.batch = r.dims[0];
  p.heads_q = r.dims[1];
  p.heads_kv = r.dims[2];
  p.seq_q = r.dims[3];
  p.seq_kv = r.dims[4];
  p.head_dim_qk = r.dims[5];
  p.head_dim_v = r.dims[6];
  p.causal = static_cast<Causal>(r.causal);
  p.dtype = static_cast<DType>(r.dtype);
  if (r.has_scale) p.scale = r.scale;
  return p;
}

bool send_all(int fd, const void* data, size_t n) {
  const char* c = static_cast<const char*>(data);
  while (n) {
    const ssize_t w = send(fd, c, n, MSG_NOSIGNAL);  // a dead peer is EPIPE here, never SIGPIPE
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    c += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool recv_all(int fd, void* data, size_t n) {
  char* c = static_cast<char*>(data);
  while (n) {
    const ssize_t r = recv(fd, c, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    c += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

void set_message(Reply& r, const std::string& s) {
  const size_t n = std::min(s.size(), sizeof r.msg - 1);
  std::memcpy(r.msg, s.data(), n);
  r.msg[n] = 0;
}

uint8_t canary_byte(uint64_t i) { return reinterpret_cast<const uint8_t*>(&kCanary)[i % 2]; }

std::string signal_name(int sig) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 32))
  if (const char* a = sigabbrev_np(sig)) return std::string("SIG") + a;
#endif
  return "signal " + std::to_string(sig);
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

// ---- the worker side --------------------------------------------------------------------------

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
  // [guard | region q | guard | region k | ... | region lse | guard]; inputs read-only for host
  // kernels (the ABI passes them const).
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
      const int prot = host && i < 3 ? PROT_READ : PROT_READ | PROT_WRITE;
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

// One call of the kernel on the mapped buffers. Returns device canary bytes changed.
int64_t run_once(const Variant& v, const Problem& p, const Request& rq, WorkerMapping& m) {
  const bool has_lse = v.caps().lse_base != LseBase::none;
  if (v.caps().memory == Memory::host) {
    g_control->in_kernel = 1;
    v.forward(p, m.payload[0], m.payload[1], m.payload[2], m.payload[3],
              has_lse ? reinterpret_cast<float*>(m.payload[4]) : nullptr, nullptr);
    g_control->in_kernel = 0;
    return 0;
  }
  // Device memory: the payloads go to device buffers fenced by canaries, and come back.
  std::vector<std::unique_ptr<GuardedBuffer>> b;
  for (int i = 0; i < kBuffers; ++i) {
    b.push_back(std::make_unique<GuardedBuffer>(Memory::device, rq.buf[i].payload));
    std::memcpy(b[i]->payload_host(), m.payload[i], rq.buf[i].payload);
    b[i]->upload();
  }
  g_control->in_kernel = 1;
  v.forward(p, b[0]->kernel_ptr(), b[1]->kernel_ptr(), b[2]->kernel_ptr(), b[3]->kernel_ptr(),
            has_lse ? static_cast<float*>(b[4]->kernel_ptr()) : nullptr, device::stream());
  device::synchronize();
  g_control->in_kernel = 0;
  int64_t oob = 0;
  for (int i = 0; i < kBuffers; ++i) {
    b[i]->download();
    if (i >= 3) std::memcpy(m.payload[i], b[i]->payload_host(), rq.buf[i].payload);
    oob += b[i]->damaged_guard_bytes();
  }
  return oob;
}

[[noreturn]] void worker_exit(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  _exit(code);  // no static destructors: after a kernel fault, CUDA teardown may not be safe
}

}  // namespace

double default_case_timeout_s(const Problem& p, Memory m) {
  // 60 s is hundreds of times what any campaign case takes; a huge problem given with --problem
  // gets time in proportion to its work at a pessimistic rate (1 GFLOP/s on the host, the blocked
  // replica on one core; 100 GFLOP/s on a GPU), so only a hang reaches the limit.
  return 60.0 + p.flops() / (m == Memory::host ? 1e9 : 1e11);
}

int worker_main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s %s PARENT_PID KERNEL [PLUGIN] (started by flashcheck itself)\n", argv[0], kWorkerArg);
    return kCannotTest;
  }
  // Die with the parent: a worker must never outlive the run that started it.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != static_cast<pid_t>(std::atoll(argv[2]))) worker_exit(0);
  const std::string name = argv[3], plugin = argc > 4 ? argv[4] : "";

  Reply ready{};
  ready.magic = kMagic;
  std::vector<std::shared_ptr<Variant>> loaded;  // keeps the plugin library loaded
  std::shared_ptr<Variant> v;
  try {
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
    void* c = mmap(nullptr, page_size(), PROT_READ | PROT_WRITE, MAP_SHARED, kShmFd, 0);
    if (c == MAP_FAILED) throw std::runtime_error(std::string("cannot map the control page: ") + std::strerror(errno));
    g_control = static_cast<Control*>(c);
  } catch (const std::exception& e) {
    ready.status = kSetupError;
    set_message(ready, e.what());
    send_all(kSockFd, &ready, sizeof ready);
    worker_exit(0);
  }
  install_fault_handlers();
  if (!send_all(kSockFd, &ready, sizeof ready)) worker_exit(0);

  WorkerMapping m;
  for (;;) {
    Request rq;
    if (!recv_all(kSockFd, &rq, sizeof rq) || rq.magic != kMagic) worker_exit(0);  // the parent is done
    Reply rp{};
    rp.magic = kMagic;
    try {
      m.map(rq, v->caps().memory == Memory::host);
      rp.oob_bytes = run_once(*v, from_wire(rq), rq, m);
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

// ---- the parent side --------------------------------------------------------------------------

struct KernelWorker::Impl {
  std::string name, plugin;
  Memory memory;
  LseBase lse_base;
  IsolationOptions opt;
  int shm = -1;
  Control* control = nullptr;
  pid_t pid = -1;
  int sock = -1, out = -1;
  int64_t starts = 0;
  size_t forwarded = 0, dropped = 0;
  bool line_start = true;

  ~Impl() {
    stop();
    if (control) munmap(control, page_size());
    if (shm >= 0) close(shm);
  }

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

  // The kernel's stdout and stderr, forwarded to flashcheck's stderr (stdout carries the reports
  // and `--json -`) with the kernel's name on each line, at most output_limit bytes per case.
  void forward(const char* s, size_t n) {
    std::string chunk;
    for (size_t i = 0; i < n; ++i) {
      if (forwarded >= opt.output_limit) {
        dropped += n - i;
        break;
      }
      if (line_start) chunk += "[" + name + "] ";
      chunk += s[i];
      line_start = s[i] == '\n';
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
      std::fprintf(stderr, "[%s] ... %zu more bytes of the kernel's output not shown (limit %zu per case)\n", name.c_str(),
                   dropped, opt.output_limit);
    forwarded = dropped = 0;
  }

  void spawn() {
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
                            const_cast<char*>(parent.c_str()), const_cast<char*>(name.c_str())};
    if (!plugin.empty()) args.push_back(const_cast<char*>(plugin.c_str()));
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

  Wait wait_reply(Reply& r, double timeout_s, const std::function<void(double)>& waiting) {
    const auto t0 = std::chrono::steady_clock::now();
    size_t got = 0;
    double next_beat = 1;
    for (;;) {
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
        const ssize_t n = recv(sock, reinterpret_cast<char*>(&r) + got, sizeof r - got, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) return Wait::closed;
        if (n > 0 && (got += static_cast<size_t>(n)) == sizeof r) return r.magic == kMagic ? Wait::reply : Wait::closed;
      }
    }
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

  void stop() {
    if (pid > 0) reap(2.0);  // closing the socket asks it to exit
  }

  // After an unexpected end: what the case's verdict says.
  AbnormalEnd describe(int status, const BufferLayout* l, const char* when) const {
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
        return {"out_of_bounds", access + " at byte " + std::to_string(off - size) + " past the end of " + kBufferName[b] + tail, false};
      if (off < 0)
        return {"out_of_bounds", access + " " + std::to_string(-off) + " bytes before the start of " + kBufferName[b] + tail, false};
      return {"kernel_crashed", "crashed (" + sname + "): " + access + " at byte " + std::to_string(off) + " of input " +
                                    kBufferName[b] + " (inputs are read-only)",
              false};
    }
    std::string d = "crashed (" + sname + ")" + when;
    if (fault) {
      char a[64];
      std::snprintf(a, sizeof a, ": fault at address 0x%llx, outside every buffer", static_cast<unsigned long long>(control->addr));
      d += a;
    }
    return {"kernel_crashed", d, false};
  }

  // Starts the worker if none runs. Empty on success, else the run that says why it could not.
  std::optional<IsolatedRun> ensure_started(const std::function<void(double)>& waiting) {
    if (pid > 0) {
      int st;
      if (waitpid(pid, &st, WNOHANG) == 0) return std::nullopt;  // alive
      pid = -1;  // ended between cases (after a device kernel's error): start afresh
      if (sock >= 0) close(sock);
      if (out >= 0) close(out);
      sock = out = -1;
    }
    reset_control();
    spawn();
    Reply r{};
    IsolatedRun run;
    switch (wait_reply(r, opt.startup_timeout_s, waiting)) {
      case Wait::reply:
        if (r.status == kOk) return std::nullopt;
        run.error = "the worker process could not load the kernel: " + std::string(r.msg, strnlen(r.msg, sizeof r.msg));
        reap(2.0);
        break;
      case Wait::closed:
        run.abnormal = describe(reap(5.0), nullptr, " while the worker process was loading the kernel");
        break;
      case Wait::timeout:
        kill(-pid, SIGKILL);
        reap(5.0);
        run.abnormal = AbnormalEnd{"kernel_crashed",
                                   "timed out after " + seconds_text(opt.startup_timeout_s) + " s loading the kernel", true};
        break;
    }
    end_output();
    return run;
  }
};

KernelWorker::KernelWorker(const Variant& v, std::string plugin, IsolationOptions opt) : impl_(std::make_unique<Impl>()) {
  impl_->name = v.name();
  impl_->plugin = std::move(plugin);
  impl_->memory = v.caps().memory;
  impl_->lse_base = v.caps().lse_base;
  impl_->opt = std::move(opt);
  impl_->open_shm();
}

KernelWorker::~KernelWorker() = default;

int64_t KernelWorker::starts() const { return impl_->starts; }

double KernelWorker::timeout_for(const Problem& p) const {
  return impl_->opt.timeout_s ? *impl_->opt.timeout_s : default_case_timeout_s(p, impl_->memory);
}

IsolatedRun KernelWorker::run(const Problem& p, const Inputs& in, const std::function<void(double)>& waiting) {
  validate(p);
  Impl& w = *impl_;
  const auto t0 = std::chrono::steady_clock::now();
  auto finish = [&](IsolatedRun r) {
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
  };
  if (auto failed = w.ensure_started(waiting)) return finish(std::move(*failed));

  const BufferLayout l = layout_for(p);
  if (ftruncate(w.shm, static_cast<off_t>(l.file_bytes)) != 0)
    throw std::runtime_error("cannot size the shared buffers to " + std::to_string(l.file_bytes) + " bytes: " + std::strerror(errno));
  void* mm = mmap(nullptr, l.file_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, w.shm, 0);
  if (mm == MAP_FAILED) throw std::runtime_error(std::string("cannot map the shared buffers: ") + std::strerror(errno));
  struct Unmap {
    void* p;
    size_t n;
    ~Unmap() { munmap(p, n); }
  } unmap{mm, l.file_bytes};
  uint8_t* base = static_cast<uint8_t*>(mm);

  // Stage: canaries in each region's slack before the payload (an underrun that stays inside the
  // page changes them), inputs encoded, outputs poisoned.
  for (int i = 0; i < kBuffers; ++i) {
    uint8_t* r = base + l.buf[i].file_off;
    for (uint64_t j = 0; j < l.buf[i].region - l.buf[i].payload; ++j) r[j] = canary_byte(j);
  }
  encode(p.dtype, in.q.data(), p.q_elems(), base + l.payload_off(0));
  encode(p.dtype, in.k.data(), p.k_elems(), base + l.payload_off(1));
  encode(p.dtype, in.v.data(), p.v_elems(), base + l.payload_off(2));
  const uint32_t ob = poison_bits(p.dtype), lb = poison_bits(DType::f32);
  const size_t es = static_cast<size_t>(dtype_bytes(p.dtype));
  for (int64_t i = 0; i < p.o_elems(); ++i) std::memcpy(base + l.payload_off(3) + static_cast<size_t>(i) * es, &ob, es);
  for (int64_t i = 0; i < p.lse_elems(); ++i) std::memcpy(base + l.payload_off(4) + static_cast<size_t>(i) * 4, &lb, 4);

  w.reset_control();
  const Request rq = to_wire(p, l);
  const double limit = timeout_for(p);
  Reply rp{};
  const Impl::Wait got = send_all(w.sock, &rq, sizeof rq) ? w.wait_reply(rp, limit, waiting) : Impl::Wait::closed;
  IsolatedRun out;
  if (got == Impl::Wait::timeout) {
    kill(-w.pid, SIGKILL);
    w.reap(5.0);
    out.abnormal = AbnormalEnd{"kernel_crashed", "timed out after " + seconds_text(limit) + " s", true};
  } else if (got == Impl::Wait::closed) {
    out.abnormal = w.describe(w.reap(5.0), &l, "");
  } else if (rp.status != kOk) {
    out.error = std::string(rp.msg, strnlen(rp.msg, sizeof rp.msg));
    if (rp.exiting) w.reap(5.0);
  } else {
    HarnessResult h;
    h.o.resize(static_cast<size_t>(p.o_elems()));
    decode(p.dtype, base + l.payload_off(3), p.o_elems(), h.o.data());
    if (w.lse_base != LseBase::none) {
      std::vector<float> lse(static_cast<size_t>(p.lse_elems()));
      std::memcpy(lse.data(), base + l.payload_off(4), lse.size() * 4);
      h.lse = std::move(lse);
    }
    h.oob_writes = rp.oob_bytes;
    for (int i : {3, 4}) {  // outputs' slack: an underrun that stayed inside the first page
      const uint8_t* r = base + l.buf[i].file_off;
      for (uint64_t j = 0; j < l.buf[i].region - l.buf[i].payload; ++j) h.oob_writes += r[j] != canary_byte(j);
    }
    out.result = std::move(h);
  }
  w.end_output();
  return finish(std::move(out));
}

}  // namespace flashcheck
