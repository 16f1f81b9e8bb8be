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

}  // namespace
}  // namespace sgemm
