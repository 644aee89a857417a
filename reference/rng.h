// A portable counter-based PRNG (Philox4x32-10) with its own uniform and normal transforms.
// std:: distributions differ between standard libraries; these give the same bits everywhere,
// so a seed names the same golden inputs on every machine.
#pragma once
#include <array>
#include <cstdint>

namespace flashcheck {

// Philox4x32 with 10 rounds (Salmon et al., SC'11): a bijection of the 128-bit counter keyed by
// the 64-bit key. Integer-only, so bit-exact on any platform.
std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> ctr, std::array<uint32_t, 2> key);

// Independent streams: stream id and element index select the counter; the seed is the key.
class CounterRng {
 public:
  CounterRng(uint64_t seed, uint64_t stream) : seed_(seed), stream_(stream) {}
  // Uniform double in (0, 1) from 53 random bits, for element `index`, draw `attempt`.
  double uniform(uint64_t index, uint32_t attempt = 0) const;
  // Standard normal for element `index` (Marsaglia's polar method; only +,-,*,/,sqrt and the
  // project's own log, so the result is the same bits wherever IEEE double arithmetic is).
  double normal(uint64_t index) const;

 private:
  std::array<uint32_t, 4> block(uint64_t index, uint32_t attempt) const;
  uint64_t seed_, stream_;
};

// log(x) for x > 0 using exact frexp and a fixed atanh series: deterministic, ~1 ulp.
double portable_log(double x);

}  // namespace flashcheck
