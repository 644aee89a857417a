// cp.async (sm_80+): global -> shared copies that bypass registers, so the next K/V tile streams in
// while the current one is computed on.
#pragma once
#include <cstdint>

namespace flashcheck::kernels {

// Copies 16 bytes, or writes 16 zero bytes when `valid` is false (src-size 0 reads nothing, so
// padding rows past seq_kv or dims past head_dim never touch memory outside the tensors).
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, bool valid) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(valid ? 16 : 0));
}
// The same to a shared address already converted (smem_u32): loops that step one base by
// immediates keep no generic pointer per copy.
__device__ __forceinline__ void cp_async_16(uint32_t smem, const void* gmem, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(gmem), "r"(valid ? 16 : 0));
}
// The same to a shared address already converted, known to be in bounds.
__device__ __forceinline__ void cp_async_16(uint32_t smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem), "l"(gmem));
}
// Copies 16 bytes that are known to be in bounds (no src-size operand, no predicate to compute).
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}
// Copies 4 bytes (one fp32: a row's LSE or D), or writes 4 zero bytes when `valid` is false. Only
// .ca takes sizes under 16.
__device__ __forceinline__ void cp_async_4(void* smem, const void* gmem, bool valid) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(gmem), "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

}  // namespace flashcheck::kernels
