// Synchronisation between the producer warp and the consumer warpgroups (sm_90): shared-memory
// mbarriers that TMA copies complete by transaction bytes, and named CTA barriers for the
// consumers' ping-pong and epilogues. Written from the PTX ISA (mbarrier, bar.sync/bar.arrive).
#pragma once
#include <cstdint>

#ifdef FLASHCHECK_PERTURB
#include "gpu/common/perturb.cuh"  // the perturbed build checks every release against the wgmma groups
#endif

namespace flashcheck::kernels::sync {

__device__ __forceinline__ uint32_t smem_addr(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

// An mbarrier completes a phase when `count` arrivals have happened and every byte announced with
// expect_tx has landed. Phases alternate parity 0, 1, 0, ...: a waiter names the parity of the
// phase it needs, i.e. (number of earlier completions it has consumed) & 1.
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
// Makes the initialised barriers visible to the async proxy (TMA) before anyone uses them; the
// block-wide __syncthreads that follows makes them visible to the other threads.
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// The producer's arrival: counts as one arrival and announces `bytes` of TMA traffic.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}
// A consumer's arrival (release: its earlier reads of the slot are ordered before the arrival).
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
#ifdef FLASHCHECK_PERTURB
  kernels::perturb::on_arrive(bar);
#endif
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
__device__ __forceinline__ bool mbar_try_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n.reg .pred p;\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(smem_addr(bar)), "r"(parity)
      : "memory");
  return done != 0;
}
// Blocks until the phase of parity `parity` has completed (try_wait suspends the thread for a
// hardware-chosen time between polls, so this loop does not spin hot).
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  while (!mbar_try_wait(bar, parity)) {
  }
}

// Named CTA barriers 1..15 (0 is __syncthreads). sync waits until `count` threads have arrived
// at barrier `id` (itself included); arrive adds this thread's arrival without waiting. count is
// a multiple of 32 and every warp takes part whole.
__device__ __forceinline__ void named_sync(uint32_t id, uint32_t count) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
__device__ __forceinline__ void named_arrive(uint32_t id, uint32_t count) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

// Orders this thread's generic-proxy writes to shared memory before later async-proxy accesses
// (TMA, wgmma operand reads) that a barrier orders after it.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// Register budget per warpgroup (sm_90a). Needs a register cap at kernel entry
// (__launch_bounds__(threads, 1)); every warp of the warpgroup executes it.
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

}  // namespace flashcheck::kernels::sync
