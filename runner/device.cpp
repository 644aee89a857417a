#include "runner/device.h"

#include <dlfcn.h>

#include <stdexcept>

#if FLASHCHECK_HAVE_CUDA
#include "gpu/common/cuda_check.h"
#include "gpu/common/poison_smem.h"
#endif

namespace flashcheck::device {

namespace {
// The runtime API's codes for the two cases worth their own words (cudaError_t, stable across
// CUDA versions; checked against the header where CUDA is built).
constexpr int kInsufficientDriver = 35, kNoDevice = 100;

std::string cuda_version(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }
}  // namespace

std::string describe_unusable_cuda(const CudaProbe& p) {
  if (!p.libcuda_loads) return "no NVIDIA driver found (libcuda.so.1 not loadable)";
  if (p.error == kInsufficientDriver && p.driver_version == 0)
    return "no NVIDIA driver found (libcuda.so.1 loads but reports no driver version)";
  if (p.error == kInsufficientDriver)
    return "the NVIDIA driver (CUDA " + cuda_version(p.driver_version) + ") is older than the CUDA runtime flashcheck was built with (" +
           cuda_version(p.runtime_version) + "): update the driver";
  if (p.error == kNoDevice) return "no NVIDIA GPU on this machine (the driver sees none)";
  return "no usable GPU: " + p.error_string + (p.error_name.empty() ? std::string() : " (" + p.error_name + ")");
}

bool libcuda_loads() {
  void* h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (!h) return false;
  dlclose(h);
  return true;
}

#if FLASHCHECK_HAVE_CUDA
static_assert(cudaErrorInsufficientDriver == kInsufficientDriver && cudaErrorNoDevice == kNoDevice);

std::optional<std::string> unavailable() {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    CudaProbe p;
    p.error = static_cast<int>(e);
    p.error_name = cudaGetErrorName(e);
    p.error_string = cudaGetErrorString(e);
    (void)cudaDriverGetVersion(&p.driver_version);
    (void)cudaRuntimeGetVersion(&p.runtime_version);
    p.libcuda_loads = libcuda_loads();
    return describe_unusable_cuda(p);
  }
  if (n == 0) return std::string("no GPU on this machine");
  return std::nullopt;
}
int count() {
  if (unavailable()) return 0;
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}
void* alloc(size_t bytes) {
  void* p = nullptr;
  FC_CUDA_CHECK(cudaMalloc(&p, bytes));
  return p;
}
void free(void* p) { FC_CUDA_CHECK(cudaFree(p)); }
// Copies go on the kernels' stream and are waited for. A plain cudaMemcpy from pageable memory
// runs on the legacy default stream and may return once the bytes are staged, before the DMA has
// landed; the kernels' stream is non-blocking, so it does not wait for the legacy stream, and a
// kernel could write an output before the poison uploaded for it arrived on top (measured on an
// H200 under 13 campaigns at once: every LSE of a correct kernel reported unwritten, 1 case in 300,
// not reproduced in a quiet process).
void to_device(void* dst, const void* src, size_t bytes) {
  const auto s = static_cast<cudaStream_t>(stream());
  FC_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s));
  FC_CUDA_CHECK(cudaStreamSynchronize(s));
}
void to_host(void* dst, const void* src, size_t bytes) {
  const auto s = static_cast<cudaStream_t>(stream());
  FC_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s));
  FC_CUDA_CHECK(cudaStreamSynchronize(s));
}
void* stream() {
  static cudaStream_t s = [] {
    cudaStream_t st;
    FC_CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    return st;
  }();
  return s;
}
void synchronize() { FC_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream()))); }
void poison_shared_memory() { kernels::poison_shared_memory(stream()); }
uint32_t probe_shared_memory() { return kernels::probe_shared_memory(stream()); }
std::string name() {
  cudaDeviceProp prop{};
  FC_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  return prop.name;
}
int compute_capability() {
  int major = 0, minor = 0;
  FC_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
  FC_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0));
  return major * 10 + minor;
}
float time_ms(const std::function<void()>& launch) {
  cudaEvent_t a, b;
  FC_CUDA_CHECK(cudaEventCreate(&a));
  FC_CUDA_CHECK(cudaEventCreate(&b));
  const auto s = static_cast<cudaStream_t>(stream());
  FC_CUDA_CHECK(cudaEventRecord(a, s));
  launch();
  FC_CUDA_CHECK(cudaEventRecord(b, s));
  FC_CUDA_CHECK(cudaEventSynchronize(b));
  float ms = 0;
  FC_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  FC_CUDA_CHECK(cudaEventDestroy(a));
  FC_CUDA_CHECK(cudaEventDestroy(b));
  return ms;
}
#else
[[noreturn]] static void none() { throw std::runtime_error("flashcheck was built without CUDA"); }
float time_ms(const std::function<void()>&) { none(); }
std::optional<std::string> unavailable() { return std::string("flashcheck was built without CUDA"); }
void* alloc(size_t) { none(); }
void free(void*) {}
void to_device(void*, const void*, size_t) { none(); }
void to_host(void*, const void*, size_t) { none(); }
void* stream() { return nullptr; }
void synchronize() {}
void poison_shared_memory() { none(); }
uint32_t probe_shared_memory() { none(); }
std::string name() { return "none"; }
int count() { return 0; }
int compute_capability() { return 0; }
#endif

}  // namespace flashcheck::device
