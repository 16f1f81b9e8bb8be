// DeviceHealth and SGEMM_FAULT_INJECT parsing (server/devices/device_health.h).
#include "server/devices/device_health.h"

#include <gtest/gtest.h>

namespace sgemm {
namespace {

TEST(DeviceHealth, ADeviceIsMarkedOnceAndKeepsItsFirstReason) {
  DeviceHealth h(3);
  EXPECT_EQ(h.healthy_count(), 3);
  EXPECT_TRUE(h.mark_unhealthy(1, "sticky CUDA error cudaErrorIllegalAddress"));
  EXPECT_FALSE(h.mark_unhealthy(1, "later"));
  EXPECT_FALSE(h.healthy(1));
  EXPECT_TRUE(h.healthy(0));
  EXPECT_EQ(h.reason(1), "sticky CUDA error cudaErrorIllegalAddress");
  EXPECT_EQ(h.reason(0), "");
  EXPECT_EQ(h.healthy_count(), 2);
}

TEST(DeviceHealth, StickyErrorsAreTheOnesThatLoseTheContext) {
  for (cudaError_t e : {cudaErrorIllegalAddress, cudaErrorLaunchFailure, cudaErrorAssert, cudaErrorECCUncorrectable})
    EXPECT_TRUE(is_sticky_cuda_error(e)) << cudaGetErrorName(e);
  for (cudaError_t e : {cudaSuccess, cudaErrorNotReady, cudaErrorMemoryAllocation, cudaErrorInvalidValue})
    EXPECT_FALSE(is_sticky_cuda_error(e)) << cudaGetErrorName(e);
}

TEST(FaultInjection, ParsesTheHooksAndNamesWhatItCannotRead) {
  auto f = FaultInjection::parse("trap:1,fail:0,hang-collective");
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->trap_device, 1);
  EXPECT_EQ(f->fail_device, 0);
  EXPECT_TRUE(f->hang_collective);
  EXPECT_EQ(f->describe(), "trap:1,fail:0,hang-collective");
  auto none = FaultInjection::parse("");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->any());
  for (const char* bad : {"trap", "trap:", "trap:x", "fail:-1", "explode"}) {
    auto r = FaultInjection::parse(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find(bad), std::string::npos) << r.status().message();
  }
}

}  // namespace
}  // namespace sgemm
