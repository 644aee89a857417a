// A kernel buffer in host or device memory, fenced by canaries: [canary | payload | canary].
// RAII: device memory is freed however the run ends.
#pragma once
#include <cstdint>
#include <cstring>
#include <vector>

#include "reference/conventions.h"
#include "runner/device.h"

namespace flashcheck {

// Bytes of canary before and after every buffer. 64 KiB: a kernel that misses a whole tile's
// stride (e.g. 128 rows x 128 columns of bf16 = 32 KiB) still lands in a canary, not in memory
// nobody checks. Host kernels run isolated get guard pages instead (runner/isolation.h), which
// fault on the first byte past the end however far the write goes.
inline constexpr size_t kGuardBytes = size_t{64} << 10;
// The guard actually used: kGuardBytes, or FLASHCHECK_GUARD_BYTES (a multiple of 256, at most
// 2^30; 0 for none). 0 is for runs under compute-sanitizer memcheck: a read past a tensor's end
// that no output shows (a prefetch past the last step) lands in the canary and is invisible; with
// buffers that end where their data does, memcheck names it. Malformed values throw
// std::invalid_argument; the command line checks it before anything runs (bad input, exit 125).
size_t guard_bytes();
// The canary: 0x7FCA repeated — a NaN read as bf16, as f16 and (0x7FCA7FCA) as f32, distinct from
// the poison; a kernel that reads past its inputs pulls NaN into its output and fails visibly.
inline constexpr uint16_t kCanary = 0x7FCA;

class GuardedBuffer {
 public:
  GuardedBuffer(Memory mem, size_t payload) : mem_(mem), payload_(payload), guard_(guard_bytes()), host_(payload + 2 * guard_) {
    // Byte by byte, so a buffer of an odd byte count (fp8 inputs of an odd head dim) is fenced to
    // its last byte: filling whole pairs left that byte 0, and the check counted it as overwritten.
    for (size_t i = 0; i < host_.size(); ++i) host_[i] = reinterpret_cast<const uint8_t*>(&kCanary)[i % 2];
    if (mem_ == Memory::device) dev_ = static_cast<uint8_t*>(device::alloc(host_.size()));
  }
  ~GuardedBuffer() {
    if (dev_) device::free(dev_);
  }
  GuardedBuffer(const GuardedBuffer&) = delete;
  GuardedBuffer& operator=(const GuardedBuffer&) = delete;

  uint8_t* payload_host() { return host_.data() + guard_; }
  size_t payload_bytes() const { return payload_; }
  void* kernel_ptr() { return (mem_ == Memory::device ? dev_ : host_.data()) + guard_; }
  void upload() {
    if (mem_ == Memory::device) device::to_device(dev_, host_.data(), host_.size());
  }
  void download() {
    if (mem_ == Memory::device) device::to_host(host_.data(), dev_, host_.size());
  }
  int64_t damaged_guard_bytes() const {
    int64_t bad = 0;
    for (size_t i = 0; i < guard_; ++i) {
      const uint8_t want = reinterpret_cast<const uint8_t*>(&kCanary)[i % 2];
      bad += host_[i] != want;
      bad += host_[guard_ + payload_ + i] != reinterpret_cast<const uint8_t*>(&kCanary)[(payload_ + i) % 2];
    }
    return bad;
  }

 private:
  Memory mem_;
  size_t payload_;
  size_t guard_;
  std::vector<uint8_t> host_;
  uint8_t* dev_ = nullptr;
};

}  // namespace flashcheck
