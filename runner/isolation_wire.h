// What flashcheck and its worker processes (runner/isolation.h) say to each other: the requests,
// the replies, the shared control page and the layout of the buffers in the shared memfd. Internal
// to runner/isolation.cpp (the parent) and runner/isolation_worker.cpp (the worker); both are the
// same binary, so the structs need no versioning.
#pragma once
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

#include "reference/problem.h"
#include "runner/staged_problem.h"

namespace flashcheck::wire {

constexpr uint32_t kMagic = 0xFC150002u;
// Address space (not memory) left PROT_NONE around every buffer in the worker: a write anywhere in
// the 4 MiB past a buffer faults, far beyond any canary.
constexpr size_t kGuardRegion = size_t{4} << 20;
constexpr int kSockFd = 3, kShmFd = 4;  // where the worker finds its control socket and the memfd
// Every buffer of a launch (runner/staged_problem.h: the five tensors, then the side tensors), in
// that order; a buffer the problem does not use has an empty payload and reaches the kernel as null.
constexpr int kBuffers = kStagedBuffers;
// The exit code of a worker that unloaded its plugin and ran every exit handler: anything else
// after an unload request (a destructor's _exit(0) included) is the plugin's doing.
constexpr int kUnloadedExit = 97;

// argv[2] of the worker: what it is started for.
constexpr const char* kModeKernel = "kernel";      // serve one kernel's cases
constexpr const char* kModeDescribe = "describe";  // load a plugin, send its kernels' descriptions, end

enum Op : uint32_t { kRun = 1, kSupports = 2, kUnload = 3, kBackward = 4 };
// Control::in_kernel while the worker is inside a call of the kernel: which one (a fault or a hang
// in the backward is the backward's verdict, the forward's outputs still judged).
enum InKernel : int32_t { kNotInKernel = 0, kInForward = 1, kInBackward = 2 };
enum Status : int32_t { kOk = 0, kKernelError = 1, kSetupError = 2 };

struct WireBuffer {
  uint64_t file_off, region, payload;  // region: whole pages; the payload ends where the region ends
};

// A request is this header followed by `problem_bytes` of the problem's one-line form, which
// parse_problem reads back exactly: the wire follows the problem model (its variants, however
// long their line) without a second copy of its fields. A run also carries the tensors' strides
// and the paged cache's size (`shape`): the worker builds the kernel's arguments from them and the
// buffers, never from inputs of its own.
struct Request {
  uint32_t magic;
  uint32_t op;
  uint64_t file_bytes;
  WireBuffer buf[kBuffers];
  LaunchShape shape;
  uint32_t backward_calls;  // kBackward: how many times the backward is called
  uint32_t deterministic;   // kBackward: BackwardArgs::deterministic
  uint64_t problem_bytes;
};
constexpr uint64_t kMaxProblemBytes = uint64_t{1} << 24;

struct Reply {
  uint32_t magic;
  int32_t status;
  int32_t exiting;    // the worker ends after this reply (a device kernel failed: CUDA errors are sticky)
  int32_t supported;  // kSupports: the kernel takes the problem (else msg says why not)
  int64_t oob_bytes;  // device canary bytes changed
  uint64_t payload_bytes;  // bytes that follow the reply (a described plugin's JSON)
  char msg[2000];
  // kBackward, once the forward returned (status kOk): how the backward's calls went.
  int32_t backward_status;  // kOk, or kKernelError with backward_msg saying why
  int32_t nondeterministic; // the calls differed: backward_msg says where
  int64_t backward_oob_bytes;  // device canary bytes the backward's calls changed
  char backward_msg[2000];
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

inline size_t page_size() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }

inline uint64_t round_up(uint64_t x, uint64_t to) { return (x + to - 1) / to * to; }

inline BufferLayout layout_for(const Staging& s) {
  const uint64_t page = page_size();
  BufferLayout l;
  uint64_t off = page;  // the control page comes first
  for (int i = 0; i < kBuffers; ++i) {
    const uint64_t payload = s.bytes(i);
    const uint64_t region = round_up(std::max<uint64_t>(payload, 1), page);
    l.buf[i] = {off, region, payload};
    off += region;
  }
  l.file_bytes = off;
  return l;
}

// The bytes of one request: header and problem line (a run's buffers and shape with it).
inline std::string request(Op op, const Problem& p, const BufferLayout* l = nullptr, const LaunchShape* shape = nullptr,
                           uint32_t backward_calls = 0, bool deterministic = false) {
  Request r{};
  r.backward_calls = backward_calls;
  r.deterministic = deterministic;
  r.magic = kMagic;
  r.op = op;
  const std::string line = to_string(p);
  r.problem_bytes = line.size();
  if (l) {
    r.file_bytes = l->file_bytes;
    std::copy(l->buf, l->buf + kBuffers, r.buf);
  }
  if (shape) r.shape = *shape;
  return std::string(reinterpret_cast<const char*>(&r), sizeof r) + line;
}

inline bool send_all(int fd, const void* data, size_t n) {
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

inline bool recv_all(int fd, void* data, size_t n) {
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

inline bool send_all(int fd, const std::string& bytes) { return send_all(fd, bytes.data(), bytes.size()); }

inline void set_message(Reply& r, const std::string& s) {
  size_t n = std::min(s.size(), sizeof r.msg - 1);
  // Cut at a character boundary: never inside a UTF-8 sequence (continuation bytes are 10xxxxxx).
  if (n < s.size())
    while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0u) == 0x80u) --n;
  std::memcpy(r.msg, s.data(), n);
  r.msg[n] = 0;
}

inline std::string message_of(const Reply& r) { return std::string(r.msg, strnlen(r.msg, sizeof r.msg)); }

inline void set_text(char (&to)[2000], const std::string& s) {
  Reply r{};
  set_message(r, s);
  std::memcpy(to, r.msg, sizeof to);
}
inline std::string text_of(const char (&from)[2000]) { return std::string(from, strnlen(from, sizeof from)); }

}  // namespace flashcheck::wire
