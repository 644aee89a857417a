// Host emulation of the GPU oracle's CUDA use (see emu.h): fibers, block and warp collectives, the
// FP64 mma, and a runtime on host memory. x86-64 only (the fiber switch is a few instructions).
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <map>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "cuda_runtime.h"

// Saves the callee-saved registers and the stack pointer of the running context in *save and
// resumes the context whose stack pointer is `load` (System V x86-64 ABI).
extern "C" void fco_emu_switch(void** save, void* load);
asm(R"(
  .text
  .globl fco_emu_switch
  .type fco_emu_switch, @function
fco_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size fco_emu_switch, .-fco_emu_switch
  .section .note.GNU-stack,"",@progbits
  .text
)");

namespace fco_emu {
namespace {

constexpr size_t kStack = size_t{256} << 10;  // per emulated thread
constexpr unsigned kMaxThreads = 1024;

struct Fiber {
  void* sp = nullptr;
  Dim tid{};
  bool done = false;
  uint64_t warp_calls = 0;  // collectives this lane took part in: selects the slot buffer
};

struct Warp {
  unsigned arrived = 0;
  uint64_t gen = 0;
  uint64_t bits[2][32]{};
  double a[2][32]{}, b[2][32]{};
};

struct Block {
  unsigned n = 0, cur = 0;
  Fiber fibers[kMaxThreads];
  Warp warps[kMaxThreads / 32];
  void* sched_sp = nullptr;
  const std::function<void()>* body = nullptr;
  Dim bid{}, grid{};
  unsigned arrived = 0;
  uint64_t gen = 0;
  int or_acc = 0, or_result = 0;
  char* stacks = nullptr;
  void* smem = nullptr;
};

Block g;
std::mutex g_grid_mutex;

void yield() { fco_emu_switch(&g.fibers[g.cur].sp, g.sched_sp); }

[[noreturn]] void trampoline() {
  (*g.body)();
  g.fibers[g.cur].done = true;
  for (;;) yield();
}

void block_barrier() {
  const uint64_t mine = g.gen;
  if (++g.arrived == g.n) {
    g.arrived = 0;
    ++g.gen;
    return;
  }
  while (g.gen == mine) yield();
}

// Write your slot, meet the warp, read: the slots alternate between two buffers, so a lane that
// runs ahead into the next collective cannot overwrite what a slower lane has yet to read.
Warp& warp_arrive(unsigned& parity) {
  Fiber& f = g.fibers[g.cur];
  parity = static_cast<unsigned>(f.warp_calls++ & 1);
  return g.warps[f.tid.x / 32];
}
void warp_wait(Warp& w) {
  const uint64_t mine = w.gen;
  if (++w.arrived == 32) {
    w.arrived = 0;
    ++w.gen;
    return;
  }
  while (w.gen == mine) yield();
}

// Device allocations: host pages with a PROT_NONE page right after the end (reads past the end
// fault), NaN bytes inside (unwritten memory is not silently zero).
struct Mapping {
  void* base;
  size_t len;
};
std::map<void*, Mapping> g_maps;
std::mutex g_map_mutex;

void* guarded_alloc(size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t body = (bytes + 15) / 16 * 16, pages = (body + page - 1) / page;
  const size_t len = (pages + 1) * page;
  void* base = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) return nullptr;
  char* guard = static_cast<char*>(base) + pages * page;
  mprotect(guard, page, PROT_NONE);
  char* p = guard - body;
  std::memset(p, 0xff, body);
  std::lock_guard<std::mutex> lock(g_map_mutex);
  g_maps[p] = {base, len};
  return p;
}

}  // namespace

const Dim& thread_idx() { return g.fibers[g.cur].tid; }
const Dim& block_idx() { return g.bid; }
const Dim& grid_dim() { return g.grid; }
void syncthreads() { block_barrier(); }

int syncthreads_or(int predicate) {
  const uint64_t mine = g.gen;
  g.or_acc |= predicate != 0;
  if (++g.arrived == g.n) {  // the last to arrive publishes; nobody can start the next one before
    g.or_result = g.or_acc;  // every waiter has read it, since that needs all of them
    g.or_acc = 0;
    g.arrived = 0;
    ++g.gen;
    return g.or_result;
  }
  while (g.gen == mine) yield();
  return g.or_result;
}

uint64_t shfl_xor_bits(uint64_t bits, int lane_mask) {
  unsigned par = 0;
  Warp& w = warp_arrive(par);
  const unsigned lane = g.fibers[g.cur].tid.x & 31;
  w.bits[par][lane] = bits;
  warp_wait(w);
  return w.bits[par][(lane ^ static_cast<unsigned>(lane_mask)) & 31];
}

void dmma(double& c0, double& c1, double a, double b) {
  unsigned par = 0;
  Warp& w = warp_arrive(par);
  const unsigned lane = g.fibers[g.cur].tid.x & 31;
  w.a[par][lane] = a;
  w.b[par][lane] = b;
  warp_wait(w);
  // Lane 4g + t holds A[g][t] and B[t][g]; it owns C[g][2t] and C[g][2t + 1].
  const unsigned gr = lane >> 2, t = lane & 3;
  double c[2] = {c0, c1};
  for (unsigned v = 0; v < 2; ++v) {
    const unsigned n = 2 * t + v;
    for (unsigned k = 0; k < 4; ++k) c[v] = std::fma(w.a[par][4 * gr + k], w.b[par][4 * n + k], c[v]);
  }
  c0 = c[0];
  c1 = c[1];
}

void* dynamic_smem() { return g.smem; }

void run_grid(unsigned blocks, unsigned threads, size_t smem_bytes, const std::function<void()>& body) {
  std::lock_guard<std::mutex> lock(g_grid_mutex);
  if (threads == 0 || threads > kMaxThreads || threads % 32 != 0)
    throw std::runtime_error("emulation: blocks must have a multiple of 32 threads, at most 1024");
  if (!g.stacks) {
    void* s = mmap(nullptr, kStack * kMaxThreads, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (s == MAP_FAILED) throw std::runtime_error("emulation: no memory for fiber stacks");
    g.stacks = static_cast<char*>(s);
  }
  void* smem = smem_bytes ? guarded_alloc(smem_bytes) : nullptr;
  g.smem = smem;
  g.body = &body;
  g.n = threads;
  g.grid = {blocks, 1, 1};
  for (unsigned b = 0; b < blocks; ++b) {
    g.bid = {b, 0, 0};
    g.arrived = 0;
    g.or_acc = 0;
    if (smem) std::memset(smem, 0xff, smem_bytes);  // shared memory starts as garbage: NaN bytes
    for (unsigned w = 0; w < threads / 32; ++w) g.warps[w].arrived = 0;
    for (unsigned i = 0; i < threads; ++i) {
      Fiber& f = g.fibers[i];
      f = Fiber{};
      f.tid = {i, 0, 0};
      // A fresh stack whose first switch "returns" into the trampoline with the ABI's alignment.
      auto* top = reinterpret_cast<uintptr_t*>(g.stacks + (i + 1) * kStack);
      *--top = 0;                                          // the trampoline's (unused) return address
      *--top = reinterpret_cast<uintptr_t>(&trampoline);  // where fco_emu_switch's ret goes
      for (int r = 0; r < 6; ++r) *--top = 0;              // rbp rbx r12 r13 r14 r15
      f.sp = top;
    }
    for (;;) {
      bool any = false;
      for (unsigned i = 0; i < threads; ++i) {
        if (g.fibers[i].done) continue;
        any = true;
        g.cur = i;
        fco_emu_switch(&g.sched_sp, g.fibers[i].sp);
      }
      if (!any) break;
    }
  }
  if (smem) cudaFree(smem);
}

}  // namespace fco_emu

// ── runtime ─────────────────────────────────────────────────────────────────────────────────────
struct fco_emu_stream {};
struct fco_emu_event {
  std::chrono::steady_clock::time_point t;
};

const char* cudaGetErrorName(cudaError_t e) { return e == cudaSuccess ? "cudaSuccess" : "cudaErrorEmulated"; }
const char* cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "emulated error"; }
cudaError_t cudaGetLastError() { return cudaSuccess; }
cudaError_t cudaGetDeviceCount(int* n) {
  *n = 1;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* d) {
  *d = 0;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int) {
  *v = a == cudaDevAttrComputeCapabilityMajor ? 9 : a == cudaDevAttrComputeCapabilityMinor ? 0 : 4;
  return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int* v) {
  *v = 13000;
  return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int* v) {
  *v = 13000;
  return cudaSuccess;
}
cudaError_t cudaMalloc(void** p, size_t bytes) {
  *p = fco_emu::guarded_alloc(bytes);
  return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFree(void* p) {
  if (!p) return cudaSuccess;
  std::lock_guard<std::mutex> lock(fco_emu::g_map_mutex);
  auto it = fco_emu::g_maps.find(p);
  if (it == fco_emu::g_maps.end()) return cudaErrorMemoryAllocation;
  munmap(it->second.base, it->second.len);
  fco_emu::g_maps.erase(it);
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  *free_bytes = size_t{8} << 30;
  *total_bytes = size_t{16} << 30;
  return cudaSuccess;
}
cudaError_t cudaMemset(void* p, int value, size_t bytes) {
  std::memset(p, value, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t) { return cudaMemset(p, value, bytes); }
// Host memory is what the emulated device reads: locking it changes nothing. FCO_EMU_REFUSE_HOST_REGISTER
// makes it fail as a driver with no room (or memory locked already) does, so that tests reach the
// callers' pageable way.
cudaError_t cudaHostRegister(void* p, size_t bytes, unsigned) {
  if (std::getenv("FCO_EMU_REFUSE_HOST_REGISTER")) return cudaErrorHostMemoryAlreadyRegistered;
  return p && bytes ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaHostUnregister(void* p) { return p ? cudaSuccess : cudaErrorMemoryAllocation; }
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind, cudaStream_t) {
  std::memcpy(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                              cudaMemcpyKind, cudaStream_t) {
  if (width > dpitch || width > spitch) return cudaErrorMemoryAllocation;
  for (size_t r = 0; r < height; ++r)
    std::memcpy(static_cast<char*>(dst) + r * dpitch, static_cast<const char*>(src) + r * spitch, width);
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) {
  *s = new fco_emu_stream;
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  delete s;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
cudaError_t cudaEventCreate(cudaEvent_t* e) {
  *e = new fco_emu_event;
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) {
  e->t = std::chrono::steady_clock::now();
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
  *ms = std::chrono::duration<float, std::milli>(b->t - a->t).count();
  return cudaSuccess;
}
