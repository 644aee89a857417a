// What flashcheck says when CUDA cannot be used, tested on machines without a GPU: the mapping from
// what the CUDA runtime reports (and whether the driver's library loads) to the message.
#include "runner/device.h"

#include <gtest/gtest.h>

#include <random>

#include "testing/test_seed.h"

namespace flashcheck::device {
namespace {

// A driver version as CUDA encodes it (1000 * major + 10 * minor), and as a message prints it.
struct Version {
  int code;
  std::string text;
};
Version draw_version(std::mt19937_64& gen) {
  const int major = std::uniform_int_distribution<int>(9, 13)(gen), minor = std::uniform_int_distribution<int>(0, 9)(gen);
  return {1000 * major + 10 * minor, std::to_string(major) + "." + std::to_string(minor)};
}

TEST(DeviceMessages, NoDriverSaysSoNotThatItIsTooOld) {
  // What a static CUDA runtime reports on a machine without the NVIDIA driver: "insufficient
  // driver", driver version 0; and libcuda.so.1 does not load.
  std::mt19937_64 gen(flashcheck::testing::seed_for(601));
  CudaProbe p;
  p.error = 35;
  p.error_name = "cudaErrorInsufficientDriver";
  p.error_string = "CUDA driver version is insufficient for CUDA runtime version";
  p.runtime_version = draw_version(gen).code;
  p.libcuda_loads = false;
  EXPECT_EQ(describe_unusable_cuda(p), "no NVIDIA driver found (libcuda.so.1 not loadable)");
  for (int error : {35, 100, 3, 999}) {  // whatever the runtime says, without libcuda there is no driver
    p.error = error;
    EXPECT_EQ(describe_unusable_cuda(p), "no NVIDIA driver found (libcuda.so.1 not loadable)") << error;
  }
  p.error = 35;
  p.libcuda_loads = true;  // a library without a working driver under it
  EXPECT_NE(describe_unusable_cuda(p).find("no NVIDIA driver found"), std::string::npos) << describe_unusable_cuda(p);
  EXPECT_EQ(describe_unusable_cuda(p).find("insufficient"), std::string::npos);
}

TEST(DeviceMessages, AnOldDriverNamesBothVersions) {
  std::mt19937_64 gen(flashcheck::testing::seed_for(602));
  const Version driver = draw_version(gen), runtime = draw_version(gen);
  CudaProbe p;
  p.error = 35;
  p.driver_version = driver.code;
  p.runtime_version = runtime.code;
  const std::string m = describe_unusable_cuda(p);
  EXPECT_NE(m.find("the NVIDIA driver (CUDA " + driver.text + ") is older"), std::string::npos) << m;
  EXPECT_NE(m.find("(" + runtime.text + "): update the driver"), std::string::npos) << m;
}

TEST(DeviceMessages, OtherErrorsKeepTheRuntimesWords) {
  CudaProbe p;
  p.error = 100;
  EXPECT_EQ(describe_unusable_cuda(p), "no NVIDIA GPU on this machine (the driver sees none)");
  p.error = 999;
  p.error_name = "cudaErrorUnknown";
  p.error_string = "unknown error";
  EXPECT_EQ(describe_unusable_cuda(p), "no usable GPU: unknown error (cudaErrorUnknown)");
}

TEST(DeviceMessages, LibcudaProbeAnswersOnAnyMachine) {
  // The probe loads and unloads the library and never throws; a second call agrees with the first.
  const bool once = libcuda_loads();
  EXPECT_EQ(libcuda_loads(), once);
  std::printf("libcuda.so.1 %s on this machine\n", once ? "loads" : "does not load");
}

}  // namespace
}  // namespace flashcheck::device
