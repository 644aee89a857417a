// The seed of this test run (printed by the test main; FLASHCHECK_SEED pins it).
#pragma once
#include <cstdint>

namespace flashcheck::testing {
uint64_t seed();
// A distinct, reproducible seed for one test: mixes the run seed with a per-test salt.
inline uint64_t seed_for(uint64_t salt) { return seed() * 0x9E3779B97F4A7C15ULL + salt * 0xBF58476D1CE4E5B9ULL + 1; }
}  // namespace flashcheck::testing
