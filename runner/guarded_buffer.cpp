#include "runner/guarded_buffer.h"

#include <cstdlib>
#include <stdexcept>
#include <string>

namespace flashcheck {

size_t guard_bytes() {
  const char* text = std::getenv("FLASHCHECK_GUARD_BYTES");
  if (!text || !*text) return kGuardBytes;
  const std::string s(text);
  const bool digits = s.size() <= 10 && s.find_first_not_of("0123456789") == std::string::npos;
  const unsigned long long v = digits ? std::stoull(s) : 0;
  // Multiples of 256 keep every kernel pointer as aligned as the allocation (vector and TMA loads).
  if (!digits || v > (1ull << 30) || v % 256 != 0)
    throw std::invalid_argument("FLASHCHECK_GUARD_BYTES=" + s +
                                ": the canary guard around kernel buffers must be a multiple of 256 bytes from 0 to 2^30");
  return static_cast<size_t>(v);
}

}  // namespace flashcheck
