// The GPU oracle's own CUDA error check (deliberately not gpu/cuda_check.h: the oracle shares no code
// with the kernels it judges). Every runtime call and every launch goes through it; a failure is a
// std::runtime_error naming the call, the file and the line.
#pragma once
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace flashcheck::gpu_oracle {

[[noreturn]] inline void cuda_failed(cudaError_t e, const char* call, const char* file, int line) {
  throw std::runtime_error(std::string("GPU oracle: ") + call + " failed with " + cudaGetErrorName(e) + " (" +
                           cudaGetErrorString(e) + ") at " + file + ":" + std::to_string(line));
}

}  // namespace flashcheck::gpu_oracle

#define FCO_CUDA(call)                                                                          \
  do {                                                                                          \
    const cudaError_t fco_err_ = (call);                                                        \
    if (fco_err_ != cudaSuccess) ::flashcheck::gpu_oracle::cuda_failed(fco_err_, #call, __FILE__, __LINE__); \
  } while (0)

// After a <<<...>>> launch: a bad configuration shows in cudaGetLastError, not in the launch itself.
#define FCO_LAUNCHED(kernel_name) FCO_CUDA(cudaGetLastError())
