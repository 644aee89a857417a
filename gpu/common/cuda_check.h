// Every CUDA call and launch is checked: an error is an exception naming the call, file and line.
#pragma once
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace flashcheck {

[[noreturn]] inline void cuda_fail(cudaError_t e, const char* what, const char* file, int line) {
  throw std::runtime_error(std::string("CUDA error ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ") in " +
                           what + " at " + file + ":" + std::to_string(line));
}

}  // namespace flashcheck

#define FC_CUDA_CHECK(expr)                                                              \
  do {                                                                                   \
    cudaError_t fc_err_ = (expr);                                                        \
    if (fc_err_ != cudaSuccess) ::flashcheck::cuda_fail(fc_err_, #expr, __FILE__, __LINE__); \
  } while (0)

// After a <<<...>>> launch: configuration errors surface from cudaGetLastError, named by the kernel.
#define FC_CHECK_LAUNCH(name)                                                                    \
  do {                                                                                           \
    cudaError_t fc_err_ = cudaGetLastError();                                                    \
    if (fc_err_ != cudaSuccess) ::flashcheck::cuda_fail(fc_err_, "launch of " name, __FILE__, __LINE__); \
  } while (0)
