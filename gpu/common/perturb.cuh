// Device side of the perturbed build (gpu/common/perturb.h says what and why). Empty unless
// compiled with -DFLASHCHECK_PERTURB.
//
// State lives in a small area at the end of the launch's dynamic shared memory (the launcher asks
// for kExtraSmem more bytes), found from any function through %dynamic_smem_size: the hooks sit
// inside the kernels' own primitives (wgmma commit/wait, the mbarrier arrive that releases a slot),
// so a mutant that makes a wait shallower or moves a release is seen by the very call it changed.
//
// Who writes what, so the instrumentation adds no race of its own:
//  * thread 0 fills the area before the kernel's first __syncthreads; afterwards it is read only,
//    except for
//  * one tracker and one draw counter per warp, written by all its lanes alike (the same value to
//    the same word, in one instruction, after a __syncwarp), so the lanes of a warp, and the four
//    warps of a warpgroup, which pass the same hooks in step, agree on every count and decision.
// The hooks sit between wgmma instructions, so they branch nowhere: ptxas serialises every wgmma of
// a kernel (C7520) when it must re-fence registers on a divergent path, and a serialised wgmma
// would close the very windows this build is about. Decisions are selects; a violation is only
// noted in the tracker and reported after the main loop (flush), by atomicCAS into a device buffer
// (the first one wins), which the host reads after the launch (perturb_host.h) and throws, failing
// the case with the message.
#pragma once
#ifdef FLASHCHECK_PERTURB
#include <cstdint>

#include "gpu/common/perturb.h"

namespace flashcheck::kernels::perturb {

constexpr int kMaxWarps = 16, kMaxGuards = 2 * kMaxStages;

// One warp's view of its warpgroup's wgmma groups: groups are numbered in commit order; every group
// below `done` has completed; use[r] is the group that last used resource r (the group open when
// the wgmma was issued), -1 if none. The first violation seen is kept for flush().
struct Tracker {
  int committed, done;
  int use[kResources];
  uint32_t bad, bad_resource;
  int bad_group, bad_done;
};
// A ring slot and the barrier its consumers arrive on to release it (shared-window addresses).
// Unused entries never match (~0u).
struct Guard {
  uint32_t bar, slot, resource;
};
struct Area {
  Config cfg;
  uint32_t draws[kMaxWarps];
  Tracker track[kMaxWarps];
  Guard guards[kMaxGuards];
};
constexpr unsigned kAreaBytes = (sizeof(Area) + 15) / 16 * 16;
// What a launcher adds to its dynamic shared memory: the area, and room to align it to 16 bytes
// below the end (the kernels' own sizes need not be multiples of 16).
constexpr unsigned kExtraSmem = kAreaBytes + 16;

// Random decisions, per site kind.
enum Site : uint32_t { kSiteStretch = 1, kSiteProducer = 2, kSiteTurn = 3, kSiteFull = 4, kSiteWarp = 5 };

__device__ __forceinline__ uint32_t mix(uint32_t x) {  // a 32-bit finaliser (xorshift-multiply)
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  return x ^ (x >> 16);
}

__device__ __forceinline__ Area* area() {
  extern __shared__ uint8_t fc_perturb_dynamic_smem[];  // every extern __shared__ array starts at the same address
  uint32_t bytes;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(bytes));
  const uintptr_t end = reinterpret_cast<uintptr_t>(fc_perturb_dynamic_smem) + bytes;
  return reinterpret_cast<Area*>((end - kAreaBytes) & ~uintptr_t{15});
}
__device__ __forceinline__ uint32_t smem_u32(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ bool on(uint32_t mechanism) { return (area()->cfg.mechanisms & mechanism) != 0; }

// Thread 0, before the kernel's first __syncthreads.
__device__ __forceinline__ void init(const Config& c) {
  Area* a = area();
  a->cfg = c;
  for (int w = 0; w < kMaxWarps; ++w) {
    a->draws[w] = 0;
    Tracker& t = a->track[w];
    t.committed = t.done = 0;
    for (int r = 0; r < kResources; ++r) t.use[r] = -1;
    t.bad = t.bad_resource = 0;
    t.bad_group = t.bad_done = 0;
  }
  for (int g = 0; g < kMaxGuards; ++g) a->guards[g] = Guard{~0u, ~0u, 0};
}
// Thread 0, before the kernel's first __syncthreads: `slot` is released by arrivals on `bar`.
__device__ __forceinline__ void guard(int i, const void* bar, const void* slot, uint32_t resource) {
  area()->guards[i] = Guard{smem_u32(bar), smem_u32(slot), resource};
}

// The next random word of this warp's sequence, the same in every lane. `group` says who must
// agree: the warp index for a warp's own decision, the warpgroup index for a decision all four
// warps of a warpgroup must share (they draw in step). Every lane of the warp calls it.
__device__ __forceinline__ uint32_t draw_warp(uint32_t site, uint32_t group) {
  __syncwarp();
  uint32_t& counter = area()->draws[threadIdx.x / 32];
  const uint32_t n = counter;
  __syncwarp();
  counter = n + 1;
  const uint32_t block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  return mix(area()->cfg.seed ^ mix(block * 0x9e3779b1u + group) ^ mix(site * 0x85ebca6bu + n));
}
// The same for code run by one thread of its warp (wgmma_f16's producer).
__device__ __forceinline__ uint32_t draw_thread(uint32_t site) {
  const uint32_t n = area()->draws[threadIdx.x / 32]++;
  const uint32_t block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  return mix(area()->cfg.seed ^ mix(block * 0x9e3779b1u + 0xabcdu + threadIdx.x / 32) ^ mix(site * 0x85ebca6bu + n));
}

// A sleep of up to max_ns in one draw of four (0 otherwise, and when kDelay is off): a seeded,
// warp-uniform reshuffle of who runs when.
__device__ __forceinline__ void delay_warp(uint32_t site, uint32_t max_ns) {
  const uint32_t x = draw_warp(site, threadIdx.x / 32);
  __nanosleep(on(kDelay) && (x & 3) == 0 ? (x >> 8) % max_ns : 0u);
}
__device__ __forceinline__ void delay_thread(uint32_t site, uint32_t max_ns) {
  const uint32_t x = draw_thread(site);
  __nanosleep(on(kDelay) && (x & 3) == 0 ? (x >> 8) % max_ns : 0u);
}

// Generic-proxy writes to shared memory that the async proxy (TMA, wgmma) touches next.
__device__ __forceinline__ void fence_async_shared() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// ---- the wgmma group tracker (consumer warps; every lane, in step) ---------------------------

__device__ __forceinline__ Tracker& tracker() {
  __syncwarp();
  return area()->track[threadIdx.x / 32];
}
// Keeps the first violation: `bad` decides by select, not by branch.
__device__ __forceinline__ void note(Tracker& t, bool bad, Violation v, uint32_t resource, int group) {
  const bool first = bad && t.bad == kNoViolation;
  const int done = t.done;
  __syncwarp();
  t.bad = first ? static_cast<uint32_t>(v) : t.bad;
  t.bad_resource = first ? resource : t.bad_resource;
  t.bad_group = first ? group : t.bad_group;
  t.bad_done = first ? done : t.bad_done;
}

// wgmma.commit_group: the open group is closed.
__device__ __forceinline__ void on_commit() {
  Tracker& t = tracker();
  const int c = t.committed;
  __syncwarp();
  t.committed = c + 1;
}
// wgmma.wait_group n: every group but the newest n has completed.
__device__ __forceinline__ void on_wait(int n) {
  Tracker& t = tracker();
  const int d = max(t.done, t.committed - n);
  __syncwarp();
  t.done = d;
}
// A wgmma was issued that reads or writes `resource`: it belongs to the open group.
__device__ __forceinline__ void on_use(uint32_t resource) {
  Tracker& t = tracker();
  const int c = t.committed;
  __syncwarp();
  t.use[resource] = c;
}
// ... that reads the tile at shared address `addr` (a wgmma descriptor's start address): if that is
// a guarded ring slot, the slot is in use.
__device__ __forceinline__ void on_use_smem(uint32_t addr) {
  Tracker& t = tracker();
  const Area* a = area();
  const int c = t.committed;
#pragma unroll
  for (int i = 0; i < kMaxGuards; ++i) {
    const uint32_t r = a->guards[i].resource;
    const int u = a->guards[i].slot == addr ? c : t.use[r];
    __syncwarp();
    t.use[r] = u;
  }
}
// Registers of `resource` are read or written by ordinary instructions: its last wgmma must have
// completed (PTX: accessing them before the wait_group covering it is undefined behaviour).
__device__ __forceinline__ void on_access(uint32_t resource) {
  Tracker& t = tracker();
  note(t, t.use[resource] >= t.done, kEarlyAccess, resource, t.use[resource]);
}
// An arrival on mbarrier `bar`: if it releases a guarded slot, every wgmma that read the slot must
// have completed, or the producer may overwrite what they still read.
__device__ __forceinline__ void on_arrive(const void* bar) {
  Tracker& t = tracker();
  const Area* a = area();
  const uint32_t b = smem_u32(bar);
#pragma unroll
  for (int i = 0; i < kMaxGuards; ++i) {
    const uint32_t r = a->guards[i].resource;
    note(t, a->guards[i].bar == b && t.use[r] >= t.done, kEarlyRelease, r, t.use[r]);
  }
}
// After the last wgmma of the warp (the kernel's end): a violation the warp noted goes to the
// report, if tracking is on. Divergence is harmless here.
__device__ __forceinline__ void flush() {
  Tracker& t = tracker();
  if (t.bad == kNoViolation || !on(kTrack) || (threadIdx.x & 31) != 0) return;
  uint32_t* r = area()->cfg.report;
  if (atomicCAS(&r[kRepViolation], 0u, t.bad) != 0u) return;  // an earlier one is kept
  r[kRepResource] = t.bad_resource;
  r[kRepBlockX] = blockIdx.x;
  r[kRepBlockY] = blockIdx.y;
  r[kRepBlockZ] = blockIdx.z;
  r[kRepWarpgroup] = threadIdx.x / 128;
  r[kRepGroup] = static_cast<uint32_t>(t.bad_group);
  r[kRepDone] = static_cast<uint32_t>(t.bad_done);
}

// ---- poisoning ---------------------------------------------------------------------------------

// All-ones 16-byte stores (0xFFFF is NaN in bf16 and f16, 0xFFFFFFFF in f32).
__device__ __forceinline__ void poison16(void* p) { *reinterpret_cast<uint4*>(p) = make_uint4(~0u, ~0u, ~0u, ~0u); }

}  // namespace flashcheck::kernels::perturb
#endif
