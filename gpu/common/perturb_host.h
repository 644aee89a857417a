// Host side of the perturbed build (gpu/common/perturb.h): the run-time settings, a launch's Config,
// and the report read back after the launch. Empty unless compiled with -DFLASHCHECK_PERTURB.
//
// Settings: gpu/common/perturb_settings.h.
#pragma once
#ifdef FLASHCHECK_PERTURB
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "gpu/common/cuda_check.h"
#include "gpu/common/params.h"
#include "gpu/common/perturb.h"
#include "gpu/common/perturb_settings.h"

namespace flashcheck::kernels::perturb {

inline uint32_t mix_host(uint32_t x) {  // the device's mix (perturb.cuh)
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  return x ^ (x >> 16);
}

// Before a launch: the Config for it, and its report buffer zeroed on `stream`.
inline Config begin(const FwdParams& p, cudaStream_t stream) {
  static const Settings s = settings_from_env();  // a throw here is rethrown by every later launch
  static uint32_t* report = [] {
    void* d = nullptr;
    FC_CUDA_CHECK(cudaMalloc(&d, kReportWords * sizeof(uint32_t)));
    return static_cast<uint32_t*>(d);
  }();
  FC_CUDA_CHECK(cudaMemsetAsync(report, 0, kReportWords * sizeof(uint32_t), stream));
  uint32_t h = s.seed;
  for (int x : {p.batch, p.heads_q, p.heads_kv, p.seq_q, p.seq_kv, p.head_dim_qk, p.head_dim_v, p.causal})
    h = mix_host(h ^ static_cast<uint32_t>(x) * 0x9e3779b1u);
  return Config{h, s.mechanisms, report};
}

inline std::string resource_name(uint32_t r) {
  if (r == kResS) return "the S accumulators";
  if (r == kResO) return "the O accumulators";
  if (r == kResP) return "the P fragments (P·V's A operand)";
  const uint32_t slot = r - kResSlot0;
  return std::string((slot & 1) ? "V" : "K") + " ring slot " + std::to_string(slot / 2);
}

// After a launch: waits for it and throws if the tracker saw the async-proxy protocol broken.
inline void end(const Config& c, cudaStream_t stream, const char* kernel) {
  uint32_t r[kReportWords] = {};
  FC_CUDA_CHECK(cudaMemcpyAsync(r, c.report, sizeof r, cudaMemcpyDeviceToHost, stream));
  FC_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (r[kRepViolation] == kNoViolation) return;
  const std::string who = std::string(kernel) + " (perturbed build): consumer warpgroup " + std::to_string(r[kRepWarpgroup]) +
                          " of block (" + std::to_string(r[kRepBlockX]) + "," + std::to_string(r[kRepBlockY]) + "," +
                          std::to_string(r[kRepBlockZ]) + ") ";
  const std::string pending = " while wgmma group " + std::to_string(static_cast<int>(r[kRepGroup])) +
                              ", which uses it, may still run (groups below " + std::to_string(static_cast<int>(r[kRepDone])) +
                              " are known complete)";
  if (r[kRepViolation] == kEarlyRelease)
    throw std::runtime_error(who + "released " + resource_name(r[kRepResource]) + pending +
                             ": a slot may be released only after the wgmma.wait_group that covers its last reader");
  throw std::runtime_error(who + "touched " + resource_name(r[kRepResource]) + pending +
                           ": registers of a wgmma are undefined until the wgmma.wait_group that covers it");
}

}  // namespace flashcheck::kernels::perturb
#endif
