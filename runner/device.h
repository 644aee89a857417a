// The little of the CUDA runtime the harness needs, behind plain functions so that host-only
// builds link (they answer "no GPU").
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace flashcheck::device {

// Why no GPU can be used here (built without CUDA, no device, driver error), or empty.
std::optional<std::string> unavailable();
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
std::string name();  // the GPU's name, for reports
int compute_capability();  // major·10 + minor of device 0 (90 for Hopper)
// Times `launch` (which enqueues work on stream()) with CUDA events: milliseconds on the device.
float time_ms(const std::function<void()>& launch);

}  // namespace flashcheck::device
