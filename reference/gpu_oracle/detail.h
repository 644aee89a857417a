// Knobs and measurements of the GPU oracle that tests and benchmarks use; not part of its contract.
#pragma once
#include <cstdint>

namespace flashcheck::gpu_oracle_detail {

// Where the time of the calling thread's last naive_attention_gpu / dtype_baseline_gpu call went.
struct Timing {
  double total_ms = 0;   // wall clock of the whole call
  double result_alloc_ms = 0;  // host: allocating (zero-filling) the result vectors
  double pack_ms = 0;    // host: gather rows, pad, narrow to the input dtype
  double alloc_ms = 0;   // device buffers
  double h2d_ms = 0;     // uploads (pageable memory)
  double kernel_ms = 0;  // CUDA events around the kernels of every piece, summed
  double d2h_ms = 0;     // downloads into the result
  int pieces = 0;
  int64_t score_blocks = 0;  // key tiles × row tiles the scores kernel was launched over, all pieces
  int64_t device_bytes = 0;  // device memory the call held at its peak
};
Timing last_timing();

// Device memory a call may use; 0 (the default) means free memory less a margin, capped at 16 GiB
// so that pieces stay cheap to allocate. Tests set a small budget to force many pieces.
void set_memory_budget(int64_t bytes);
// Free memory on the current device (cudaMemGetInfo), 0 without one.
int64_t free_device_bytes();

// The device's own ceilings, measured with synthetic kernels (for the benchmark's verdict on
// FP64 tensor cores against plain FP64 FMA): TFLOP/s counting 2 per multiply-add; fp32 counts a
// separate multiply and add (the baseline's unfused arithmetic) as 2; GB/s of a device copy.
struct Ceilings {
  double dfma_tflops = 0, dmma_tflops = 0, fp32_mul_add_tflops = 0, copy_gbs = 0;
};
Ceilings measure_ceilings();

}  // namespace flashcheck::gpu_oracle_detail
