// The little of the CUDA runtime the harness needs, behind plain functions so that host-only
// builds link (they answer "no GPU").
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace flashcheck::device {

// Why no GPU can be used here (built without CUDA, no NVIDIA driver, a driver older than the
// runtime, no device), or empty.
std::optional<std::string> unavailable();

// What the CUDA runtime said when asked for devices, and what lies under it.
struct CudaProbe {
  int error = 0;  // the cudaError_t of cudaGetDeviceCount (0: success)
  std::string error_name, error_string;
  int driver_version = 0, runtime_version = 0;  // as cudaDriverGetVersion/cudaRuntimeGetVersion give them (0: none)
  bool libcuda_loads = true;                    // whether the driver's library, libcuda.so.1, can be loaded
};
// Why CUDA cannot be used, in words that say what to fix: the runtime's own words for a missing
// driver ("CUDA driver version is insufficient for CUDA runtime version") send a user to update a
// driver that is not installed. Apart from the CUDA calls, so it is tested without a GPU.
std::string describe_unusable_cuda(const CudaProbe& p);
// Whether libcuda.so.1 (the NVIDIA driver's user-space library) can be loaded in this process.
bool libcuda_loads();
void* alloc(size_t bytes);
void free(void* p);
void to_device(void* dst, const void* src, size_t bytes);
void to_host(void* dst, const void* src, size_t bytes);
void* stream();  // a stream for launches, created once per process
void synchronize();
// Fills every SM's shared memory with NaN words on stream() (gpu/common/poison_smem.h): run before
// each checked launch, so a kernel that computes with a stage it never loaded shows NaN.
void poison_shared_memory();
// The AND of every shared-memory word a launch of the same geometry finds (0xFFFFFFFF after the
// above): the test that the poisoning reaches every SM.
uint32_t probe_shared_memory();
// GPUs the CUDA runtime sees here (CUDA_VISIBLE_DEVICES honoured); 0 when none can be used.
int count();
std::string name();  // the GPU's name, for reports
int compute_capability();  // major·10 + minor of device 0 (90 for Hopper)
// Times `launch` (which enqueues work on stream()) with CUDA events: milliseconds on the device.
float time_ms(const std::function<void()>& launch);

}  // namespace flashcheck::device
