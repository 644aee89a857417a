// What the GPU oracle's tests share (gpu_oracle_test.cpp, gpu_oracle_backward_test.cpp,
// gpu_replica_test.cpp), each built twice: against a device (skipped without one) and against the
// host emulation of CUDA (FLASHCHECK_GPU_ORACLE_EMULATED: every CUDA thread a fiber, so fewer,
// smaller cases).
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "reference/gpu_oracle.h"

#define REQUIRE_GPU()                                                                              \
  do {                                                                                             \
    if (auto why_ = ::flashcheck::gpu_oracle_unavailable()) GTEST_SKIP() << "GPU oracle unavailable: " << *why_; \
  } while (0)

namespace flashcheck::gpu_oracle_test {

#ifdef FLASHCHECK_GPU_ORACLE_EMULATED
inline constexpr bool kEmulated = true;
#else
inline constexpr bool kEmulated = false;
#endif

// Fewer, smaller cases: on the host emulation, or on a device under a sanitizer
// (FLASHCHECK_GPU_TEST_SMALL=1).
inline bool small() {
  static const bool s = kEmulated || std::getenv("FLASHCHECK_GPU_TEST_SMALL") != nullptr;
  return s;
}
inline int cases(int on_device, int emulated) { return small() ? emulated : on_device; }

// p with every length (and a window's bounds) times `factor`, so that a small generated problem
// spans several of the oracle's 64-row and 64-key tiles; validity is the caller's to check.
inline Problem stretched(Problem p, int64_t factor) {
  auto mul = [factor](std::vector<int64_t>& v) {
    for (int64_t& x : v) x *= factor;
  };
  p.seq_q *= factor, p.seq_kv *= factor;
  mul(p.seqlens_q), mul(p.seqlens_kv), mul(p.seqused_kv);
  if (p.window.left > 0) p.window.left *= factor;
  if (p.window.right > 0) p.window.right *= factor;
  return p;
}

// Runs f, which must throw T, and returns its message ("" and a test failure when it does not).
template <typename T, typename F>
std::string thrown_message(F&& f, const char* what) {
  try {
    f();
  } catch (const T& e) {
    return e.what();
  }
  ADD_FAILURE() << what << " was taken";
  return "";
}

}  // namespace flashcheck::gpu_oracle_test
