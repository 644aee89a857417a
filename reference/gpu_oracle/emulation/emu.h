// Host emulation of the CUDA features the GPU oracle's kernels use, so that the very same kernel
// and host code (f64_kernels.cu, baseline_kernels.cu, host.cpp) run on machines without a GPU:
// each block runs its threads as fibers on one OS thread, switching at __syncthreads, shuffles and
// the warp-wide FP64 mma, whose fragment layout is emulated from the PTX ISA's description of
// mma.m8n8k4 .f64 (lane = 4·g + t holds A[g][t], B[t][g], C[g][2t], C[g][2t+1]). Device memory is
// host memory with a guard page after every allocation, filled with NaN bytes like fresh device
// memory would hold garbage. Only the kernels' semantics are emulated, not their speed.
#pragma once
#include <math.h>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static  // one block runs at a time: a static local is the block's shared array
#define __align__(n) __attribute__((aligned(n)))

struct float4 {
  float x, y, z, w;
};
struct double2 {
  double x, y;
};
struct uint2 {
  unsigned x, y;
};
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
inline double2 make_double2(double a, double b) { return {a, b}; }
template <typename T>
inline T __ldg(const T* p) {
  return *p;
}
inline float __uint_as_float(unsigned u) { return std::bit_cast<float>(u); }
inline double __longlong_as_double(long long v) { return std::bit_cast<double>(v); }
// One rounding per operation (volatile: nothing may fuse or keep extra precision).
inline float __fadd_rn(float a, float b) {
  volatile float r = a + b;
  return r;
}
inline float __fsub_rn(float a, float b) {
  volatile float r = a - b;
  return r;
}
inline float __fmul_rn(float a, float b) {
  volatile float r = a * b;
  return r;
}
inline float __fdiv_rn(float a, float b) {
  volatile float r = a / b;
  return r;
}
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }  // one rounding, as the device's FFMA
inline double __dadd_rn(double a, double b) {
  volatile double r = a + b;
  return r;
}
inline double __dmul_rn(double a, double b) {
  volatile double r = a * b;
  return r;
}
inline double __ddiv_rn(double a, double b) {
  volatile double r = a / b;
  return r;
}

namespace fco_emu {

struct Dim {
  unsigned x = 0, y = 0, z = 0;
};
const Dim& thread_idx();
const Dim& block_idx();
const Dim& grid_dim();
void syncthreads();
int syncthreads_or(int predicate);
uint64_t shfl_xor_bits(uint64_t bits, int lane_mask);
void dmma(double& c0, double& c1, double a, double b);
void* dynamic_smem();
void run_grid(unsigned blocks, unsigned threads, size_t smem_bytes, const std::function<void()>& body);

template <typename Kernel, typename Stream, typename... Args>
void launch(Kernel kernel, unsigned blocks, unsigned threads, size_t smem_bytes, Stream, Args... args) {
  run_grid(blocks, threads, smem_bytes, [&] { kernel(args...); });
}

}  // namespace fco_emu

#define threadIdx (::fco_emu::thread_idx())
#define blockIdx (::fco_emu::block_idx())
#define gridDim (::fco_emu::grid_dim())
// Atomic as it stands: a fiber runs until it syncs, so no other thread interleaves a read-modify-write.
inline unsigned long long atomicMin(unsigned long long* at, unsigned long long v) {
  const unsigned long long old = *at;
  if (v < old) *at = v;
  return old;
}
inline void __syncthreads() { fco_emu::syncthreads(); }
inline int __syncthreads_or(int predicate) { return fco_emu::syncthreads_or(predicate); }
template <typename T>
T __shfl_xor_sync(unsigned, T v, int lane_mask) {
  static_assert(sizeof(T) <= 8, "shuffles move at most 8 bytes here");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof v);
  bits = fco_emu::shfl_xor_bits(bits, lane_mask);
  T r;
  std::memcpy(&r, &bits, sizeof r);
  return r;
}

namespace flashcheck::gpu_oracle {
using ::fco_emu::dmma;
template <typename T>
T* dynamic_smem() {
  return static_cast<T*>(::fco_emu::dynamic_smem());
}
}  // namespace flashcheck::gpu_oracle
