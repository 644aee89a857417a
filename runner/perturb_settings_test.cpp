// The perturbed build's run-time settings (gpu/common/perturb_settings.h): the mechanisms and the
// seed a run asks for, and every malformed value refused by name, never read as something else.
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <stdexcept>
#include <string>

#include "gpu/common/perturb_settings.h"
#include "testing/test_seed.h"

namespace flashcheck::kernels::perturb {
namespace {

std::string refusal(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(PerturbSettings, MechanismsAreACommaSeparatedList) {
  EXPECT_EQ(mechanisms_from("all"), kAllMechanisms);
  EXPECT_EQ(mechanisms_from("none"), 0u);
  EXPECT_EQ(mechanisms_from("track"), kTrack);
  EXPECT_EQ(mechanisms_from("poison,stretch,delay"), kPoison | kStretch | kDelay);
  EXPECT_EQ(mechanisms_from("delay,track,delay"), kDelay | kTrack);
  for (const char* bad : {"", "tracker", "track,", ",poison", "Track", "poison stretch", "all;rm"}) {
    const std::string why = refusal([&] { mechanisms_from(bad); });
    EXPECT_NE(why.find("FLASHCHECK_PERTURB: unknown mechanism"), std::string::npos) << "'" << bad << "': " << why;
  }
}

TEST(PerturbSettings, SeedIsADecimalNumberBelow2To32) {
  const uint32_t s = static_cast<uint32_t>(flashcheck::testing::seed_for(93));
  EXPECT_EQ(seed_from(std::to_string(s)), s);
  EXPECT_EQ(seed_from("0"), 0u);
  EXPECT_EQ(seed_from("4294967295"), 4294967295u);
  for (const char* bad : {"", "-1", "+5", " 5", "0x10", "4294967296", "99999999999999999999", "1e3", "7 "}) {
    const std::string why = refusal([&] { seed_from(bad); });
    EXPECT_NE(why.find("FLASHCHECK_PERTURB_SEED:"), std::string::npos) << "'" << bad << "': " << why;
  }
}

TEST(PerturbSettings, ReadFromTheEnvironmentWithDefaults) {
  unsetenv("FLASHCHECK_PERTURB_SEED");
  unsetenv("FLASHCHECK_PERTURB");
  Settings d = settings_from_env();
  EXPECT_EQ(d.seed, 1u);
  EXPECT_EQ(d.mechanisms, kAllMechanisms);
  const uint32_t s = static_cast<uint32_t>(flashcheck::testing::seed_for(94));
  setenv("FLASHCHECK_PERTURB_SEED", std::to_string(s).c_str(), 1);
  setenv("FLASHCHECK_PERTURB", "poison,delay", 1);
  Settings e = settings_from_env();
  EXPECT_EQ(e.seed, s);
  EXPECT_EQ(e.mechanisms, kPoison | kDelay);
  setenv("FLASHCHECK_PERTURB", "posion", 1);
  EXPECT_NE(refusal([] { settings_from_env(); }).find("'posion'"), std::string::npos);
  unsetenv("FLASHCHECK_PERTURB_SEED");
  unsetenv("FLASHCHECK_PERTURB");
}

}  // namespace
}  // namespace flashcheck::kernels::perturb
