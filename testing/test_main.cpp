// Test main shared by every flashcheck test binary. Every randomized test draws from seeds chosen
// here and printed first, so a failure reproduces with one command:
//   FLASHCHECK_SEED=<s> RC_PARAMS="seed=<s>" ctest -R <test>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

#include "testing/test_seed.h"

namespace flashcheck::testing {
uint64_t g_seed = 0;
uint64_t seed() { return g_seed; }
}  // namespace flashcheck::testing

int main(int argc, char** argv) {
  using flashcheck::testing::g_seed;
  if (const char* s = std::getenv("FLASHCHECK_SEED")) {
    g_seed = std::strtoull(s, nullptr, 0);
  } else {
    g_seed = (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
  }
  // RapidCheck reads RC_PARAMS lazily on first use: give it a seed derived from ours unless the
  // caller pinned one (RapidCheck's own "reproduce=" lines keep working either way).
  const char* rc = std::getenv("RC_PARAMS");
  std::string rc_params = rc ? rc : "";
  if (rc_params.find("seed=") == std::string::npos && rc_params.find("reproduce=") == std::string::npos) {
    rc_params += (rc_params.empty() ? "" : " ") + std::string("seed=") + std::to_string(g_seed & 0x7fffffffffffffffULL);
    setenv("RC_PARAMS", rc_params.c_str(), 1);
  }
  std::printf("flashcheck test seed: FLASHCHECK_SEED=%llu RC_PARAMS=\"%s\"\n",
              static_cast<unsigned long long>(g_seed), rc_params.c_str());
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
