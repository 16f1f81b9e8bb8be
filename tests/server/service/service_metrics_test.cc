// The /metrics endpoint's device gauges, as a scrape reads them.
#include "server/service/service_metrics.h"

#include <gtest/gtest.h>

#include "tests/e2e/metrics_scrape.h"

namespace sgemm {
namespace {

using testing::first_key;
using testing::samples;
using testing::scrape;
using testing::value;

LoadGauges two_devices() {
  LoadGauges g;
  DeviceGauge serving;
  serving.label = "0";
  serving.name = "GPU A";
  serving.memory_bytes = int64_t{80} << 30;
  serving.memory_used = 123456789;
  DeviceGauge faulted;
  faulted.label = "1";
  faulted.name = "GPU B";
  faulted.healthy = false;
  faulted.memory_bytes = int64_t{80} << 30;
  g.devices = {serving, faulted};
  return g;
}

TEST(ServiceMetrics, EachDeviceInServiceReportsItsMemoryInUse) {
  auto m = ServiceMetrics::start("127.0.0.1:0", BuildInfo{"test", "abc"}, two_devices);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const auto g = samples(scrape((*m)->port()));
  ASSERT_FALSE(g.empty());
  EXPECT_EQ(value(g, R"(sgemm_device_memory_used_bytes{device="0",name="GPU A"})"), 123456789.0);
  // The faulted device keeps its health and size samples, and has no use sample.
  EXPECT_EQ(value(g, R"(sgemm_device_healthy{device="1",name="GPU B"})"), 0.0);
  EXPECT_TRUE(g.count(R"(sgemm_device_memory_bytes{device="1",name="GPU B"})"));
  EXPECT_FALSE(g.count(R"(sgemm_device_memory_used_bytes{device="1",name="GPU B"})"));
}

TEST(ServiceMetrics, NoUseSampleWhereNoDeviceKnowsIt) {
  auto host_only = [] {
    LoadGauges g;
    DeviceGauge cpu;
    cpu.label = "cpu";
    cpu.name = "cpu";
    g.devices = {cpu};
    return g;
  };
  auto m = ServiceMetrics::start("127.0.0.1:0", BuildInfo{"test", "abc"}, host_only);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const auto g = samples(scrape((*m)->port()));
  ASSERT_FALSE(g.empty());
  EXPECT_TRUE(first_key(g, "sgemm_device_memory_used_bytes").empty());
  EXPECT_FALSE(first_key(g, "sgemm_device_healthy{").empty());
}

// sgemm_kernel_launches_total{row}: a request's launches by row, counted once
// per launch: a request that shared its launch with others counts nothing
// itself, the shared launch counts its kernels once (record_launch).
TEST(ServiceMetrics, KernelLaunchesAreCountedByRowOncePerLaunch) {
  auto m = ServiceMetrics::start("127.0.0.1:0", BuildInfo{"test", "abc"}, two_devices);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  TimingRecord t;
  t.kernel_rows = {{"simt_tma_128x256x32", 7}, {"cublas_sgemm", 1}};
  (*m)->record(StatusCode::kOk, "", 0, 0, &t);
  (*m)->record(StatusCode::kOk, "", 0, 0, &t);
  TimingRecord shared;  // one of 4 requests of a coalesced launch
  shared.kernel_rows = {{"cublas_sgemm_grouped", 1}};
  for (int i = 0; i < 4; ++i) (*m)->record(StatusCode::kOk, "", 0, 0, &shared, /*count_kernels=*/false);
  (*m)->record_launch(4, shared.kernel_rows);
  (*m)->record(StatusCode::kInternal, "", 0, 0, nullptr);  // a failure counts no kernels
  const auto g = samples(scrape((*m)->port()));
  EXPECT_EQ(value(g, R"(sgemm_kernel_launches_total{row="simt_tma_128x256x32"})"), 14.0);
  EXPECT_EQ(value(g, R"(sgemm_kernel_launches_total{row="cublas_sgemm"})"), 2.0);
  EXPECT_EQ(value(g, R"(sgemm_kernel_launches_total{row="cublas_sgemm_grouped"})"), 1.0);
}

}  // namespace
}  // namespace sgemm
