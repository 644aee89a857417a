// The harness's copies to and from the device are ordered with the kernels' stream: a kernel sees
// the bytes staged for it, and nothing staged lands on top of what it wrote. A plain cudaMemcpy
// from pageable memory may return before its DMA lands, on the legacy stream, which the kernels'
// non-blocking stream does not wait for: a poisoned output could then arrive after the kernel had
// written it (every LSE of a correct kernel reported unwritten, 1 case in 300, under load; see
// runner/device.cpp). A stream-ordered write of the buffer's last bytes stands in for a kernel.
// Without a GPU: SKIPPED.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "runner/device.h"

#if FLASHCHECK_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace flashcheck {
namespace {

TEST(DeviceCopies, AreOrderedWithTheKernelsStream) {
  if (auto why = device::unavailable()) GTEST_SKIP() << *why;
#if FLASHCHECK_HAVE_CUDA
  // Large enough that the copy is staged in many pieces: the last piece's DMA is the one that
  // could still be in flight when the copy returns.
  constexpr size_t kBytes = size_t{256} << 20, kTail = 4096;
  std::vector<uint8_t> host(kBytes), back(kBytes);
  void* d = device::alloc(kBytes);
  int late = 0;
  for (int rep = 1; rep <= 20; ++rep) {
    const auto poison = static_cast<uint8_t>(0x80 + rep), written = static_cast<uint8_t>(rep);
    std::fill(host.begin(), host.end(), poison);
    device::to_device(d, host.data(), kBytes);
    ASSERT_EQ(cudaMemsetAsync(static_cast<uint8_t*>(d) + kBytes - kTail, written, kTail,
                              static_cast<cudaStream_t>(device::stream())),
              cudaSuccess);
    device::synchronize();
    device::to_host(back.data(), d, kBytes);
    int64_t stale = 0;
    for (size_t i = kBytes - kTail; i < kBytes; ++i) stale += back[i] != written;
    if (stale) {
      ++late;
      std::printf("repeat %d: %lld of the %zu bytes written on the stream hold the upload's bytes\n", rep,
                  static_cast<long long>(stale), kTail);
    }
    EXPECT_EQ(back[0], poison) << "repeat " << rep << ": the upload itself did not arrive";
  }
  device::free(d);
  EXPECT_EQ(late, 0) << "an upload landed after a write ordered after it";
#endif
}

}  // namespace
}  // namespace flashcheck
