// Warpgroup MMA (sm_90a): shared-memory matrix descriptors, the fence / commit / wait protocol,
// and the generated wgmma.mma_async wrappers. Written from the PTX ISA ("Asynchronous Warpgroup
// Level Matrix Multiply-Accumulate").
//
// Accumulator layout of one m64nN tile (fp32, N/2 registers per thread of the 128-thread
// warpgroup): warp w of the group owns rows 16w..16w+15; d[4j + e] holds
//   row 16w + lane/4 + 8·(e >> 1),   column 8j + 2·(lane % 4) + (e & 1).
// The 16-bit A fragment of one k16 slice from registers (4 registers, 2 values each) uses the same
// rows and columns 2·(lane % 4) + {0,1} and 8 + 2·(lane % 4) + {0,1}, so the accumulator registers
// d[8k .. 8k+7] of S = Q·Kᵀ, rounded pairwise, are exactly the A fragment of P for keys 16k..16k+15:
// P·V needs no data movement between the two GEMMs (unlike fp8, where the layouts differ).
#pragma once
#include <cstdint>

#ifdef FLASHCHECK_PERTURB
#include "gpu/common/perturb.cuh"  // the perturbed build's group tracker sees every commit and wait
#endif

namespace flashcheck::kernels::wgmma {

#include "gpu/wgmma_f16/wgmma_ops.inc"

// Shared-memory matrix descriptor for a tile stored in 128-byte swizzled rows (what TMA writes
// with CU_TENSOR_MAP_SWIZZLE_128B: 16-byte chunk c of row r at chunk c ^ (r % 8), the pattern
// anchored at 1024-byte boundaries). Bits: 0-13 start address >> 4, 16-29 leading byte offset >> 4,
// 32-45 stride byte offset >> 4, 49-51 base offset (0: every tile starts 1024-byte aligned, and
// the k-step advance below stays inside one 128-byte row, so the pattern phase never moves),
// 62-63 swizzle mode (1 = 128 B).
//  * K-major operand (Q as A, K as B of S = Q·Kᵀ): rows of 64 elements, 8-row groups 1024 bytes
//    apart (SBO); LBO is unused. The k16 slice k of a 64-column block starts 32·k bytes into the
//    row: the hardware applies the swizzle to the final address, so adding to the start works.
//  * MN-major operand (V as B of P·V, "transposed"): each 128-byte row is 64 consecutive N (head
//    dim) values of one key; 8-key groups are SBO = 1024 bytes apart and the 64-wide N blocks are
//    LBO bytes apart (the size of one block of the V tile).
__device__ __forceinline__ uint64_t make_desc(uint32_t smem_addr, uint32_t lbo_bytes, uint32_t sbo_bytes) {
  const uint64_t lo = ((smem_addr & 0x3FFFFu) >> 4) | ((lbo_bytes >> 4) << 16);
  const uint64_t hi = (sbo_bytes >> 4) | (1u << 30);  // bit 62: 128-byte swizzle
  return lo | (hi << 32);
}
// The same descriptor for a start address `bytes` further on (bytes a multiple of 16 and small
// enough not to carry out of the 14-bit address field: shared memory is < 256 KB).
__device__ __forceinline__ uint64_t desc_add(uint64_t desc, uint32_t bytes) { return desc + (bytes >> 4); }

// Orders this thread's register writes (accumulators, A fragments) before the wgmma that reads
// them; required before the first wgmma of a batch.
__device__ __forceinline__ void fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#ifdef FLASHCHECK_PERTURB
  perturb::on_commit();
#endif
}
// Waits until at most N committed groups of this warpgroup are still pending.
template <int N>
__device__ __forceinline__ void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#ifdef FLASHCHECK_PERTURB
  perturb::on_wait(N);
#endif
}

// The compiler sees a wgmma's accumulators as written when the instruction is issued, not when
// wait() returns. Passing each register through an empty asm after wait() makes every later read
// depend on a point after the wait (and every earlier write stay before the next issue), so no
// read is hoisted above the wait and no register is reused while the tensor cores still own it.
template <int N>
__device__ __forceinline__ void fence_operands(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void fence_operands(uint32_t (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

}  // namespace flashcheck::kernels::wgmma
