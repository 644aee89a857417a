// The perturbed build's run-time settings (gpu/common/perturb.h), parsed from the environment of the
// process that launches: plain C++, no CUDA, so that a CPU test checks the parsing
// (runner/perturb_settings_test.cpp).
//   FLASHCHECK_PERTURB_SEED  decimal below 2^32, default 1: runs with the same seed perturb the
//                            same case the same way (each launch mixes it with the problem's
//                            shape); another seed, another interleaving
//   FLASHCHECK_PERTURB       comma-separated mechanisms, default `all`: track, poison, stretch,
//                            delay, or `all` / `none`
// A malformed value is refused by name (std::invalid_argument; the launch fails with it).
#pragma once
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace flashcheck::kernels::perturb {

enum Mechanism : uint32_t { kTrack = 1u, kPoison = 2u, kStretch = 4u, kDelay = 8u, kAllMechanisms = 15u };

struct Settings {
  uint32_t seed = 1;
  uint32_t mechanisms = kAllMechanisms;
};

inline uint32_t mechanisms_from(const std::string& text) {
  uint32_t m = 0;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string w = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (w == "all") m |= kAllMechanisms;
    else if (w == "none") m |= 0;
    else if (w == "track") m |= kTrack;
    else if (w == "poison") m |= kPoison;
    else if (w == "stretch") m |= kStretch;
    else if (w == "delay") m |= kDelay;
    else
      throw std::invalid_argument("FLASHCHECK_PERTURB: unknown mechanism '" + w.substr(0, 40) +
                                  "' (a comma-separated list of track, poison, stretch, delay, all, none)");
    if (comma == std::string::npos) return m;
    start = comma + 1;
  }
}

inline uint32_t seed_from(const std::string& t) {
  if (t.empty() || t.size() > 10 || t.find_first_not_of("0123456789") != std::string::npos ||
      std::strtoull(t.c_str(), nullptr, 10) > 0xffffffffull)
    throw std::invalid_argument("FLASHCHECK_PERTURB_SEED: '" + t.substr(0, 40) + "' is not a decimal number below 2^32");
  return static_cast<uint32_t>(std::strtoull(t.c_str(), nullptr, 10));
}

inline Settings settings_from_env() {
  Settings s;
  if (const char* v = std::getenv("FLASHCHECK_PERTURB_SEED")) s.seed = seed_from(v);
  if (const char* v = std::getenv("FLASHCHECK_PERTURB")) s.mechanisms = mechanisms_from(v);
  return s;
}

}  // namespace flashcheck::kernels::perturb
