// The one JSON writer of timings (common/timing_record.h): every field
// round-trips, the client's section is there only when set, and CLI extras
// are merged at the top level.
#include "common/timing_record.h"

#include <gtest/gtest.h>

namespace sgemm {
namespace {

TimingRecord sample() {
  TimingRecord r;
  r.request_id = "42";
  r.time = 1763800000.5;
  r.shape = {300, 200, 100};
  r.has_c = true;
  r.backend = "cuda";
  r.kernel = "pingpong";
  r.precision = "fp32";
  r.split = "rows";
  r.plan = "two GPUs";
  r.receive_ms = 1.5;
  r.queue_ms = 0.25;
  r.compute_ms = 3.0;
  r.send_ms = 0.75;
  r.total_ms = 5.5;
  r.bytes_in = 4 * (300 * 100 + 100 * 200 + 300 * 200);
  r.bytes_out = 4 * 300 * 200;
  r.devices.push_back({0, "GPU A", 0, 150, 0, 100, 1.0, 0.5, 2.0, 0.25, 0.125, 4.0, 0.5, 0.0625, 0.03125});
  r.devices.push_back({1, "GPU B", 150, 300, 0, 100, 1.5, 0.0, 2.5, 0.0, 0.25, 0.0, 0.5, 0.0, 0.0});
  return r;
}

TEST(TimingRecord, RoundTripsEveryField) {
  const TimingRecord r = sample();
  const std::string line = timing_record_json(r);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  EXPECT_NE(line.find("\"schema\":\"sgemm.timing/1\""), std::string::npos) << line;
  EXPECT_EQ(line.find("\"client\""), std::string::npos) << line;
  auto back = parse_timing_record(line);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->request_id, "42");
  EXPECT_EQ(back->shape.m, 300);
  EXPECT_EQ(back->shape.k, 100);
  EXPECT_TRUE(back->has_c);
  EXPECT_EQ(back->split, "rows");
  EXPECT_DOUBLE_EQ(back->send_ms, 0.75);
  EXPECT_EQ(back->bytes_in, r.bytes_in);
  ASSERT_EQ(back->devices.size(), 2u);
  const DeviceTimingRecord& d = back->devices[0];
  EXPECT_EQ(d.name, "GPU A");
  EXPECT_EQ(d.row_end, 150);
  EXPECT_DOUBLE_EQ(d.copy_in_wait_ms, 0.5);
  EXPECT_DOUBLE_EQ(d.kernel_wait_ms, 0.25);
  EXPECT_DOUBLE_EQ(d.reduce_ms, 0.125);
  EXPECT_DOUBLE_EQ(d.reduce_wait_ms, 4.0);
  EXPECT_DOUBLE_EQ(d.copy_out_wait_ms, 0.0625);
  EXPECT_DOUBLE_EQ(d.order_wait_ms, 0.03125);
  EXPECT_FALSE(back->client.has_value());
}

TEST(TimingRecord, EngineHostStepsRoundTripInOrderAndAreAbsentWhenEmpty) {
  TimingRecord r = sample();
  EXPECT_EQ(timing_record_json(r).find("engine_host_ms"), std::string::npos);
  r.engine_host_ms = {{"plan", 0.004}, {"lanes", 0.002}, {"issue", 0.03}, {"drain", 0.06}, {"free", 0.001}};
  const std::string line = timing_record_json(r);
  EXPECT_NE(line.find(R"("engine_host_ms":{"plan":0.004,"lanes":0.002,"issue":0.03,"drain":0.06,"free":0.001})"),
            std::string::npos)
      << line;
  auto back = parse_timing_record(line);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->engine_host_ms, r.engine_host_ms) << "every step, in the order written";
}

TEST(TimingRecord, ClientSectionAndExtras) {
  TimingRecord r = sample();
  r.client = ClientTimingRecord{7.0, 2, 100, 200, {7.0, 8.0}};
  const std::string line = timing_record_json(r, R"({"seed": 5, "verify": {"passed": true}})");
  auto back = parse_timing_record(line);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  ASSERT_TRUE(back->client.has_value());
  EXPECT_EQ(back->client->attempts, 2);
  EXPECT_EQ(back->client->bytes_received, 200);
  EXPECT_EQ(back->client->total_ms_all.size(), 2u);
  EXPECT_NE(line.find("\"seed\":5"), std::string::npos) << line;
  EXPECT_NE(line.find("\"verify\":{\"passed\":true}"), std::string::npos) << line;
}

TEST(TimingRecord, RefusesOtherJson) {
  EXPECT_FALSE(parse_timing_record("{}").ok());
  EXPECT_FALSE(parse_timing_record("not json").ok());
  EXPECT_FALSE(parse_timing_record(R"({"schema":"sgemm.timing/1"})").ok());
}

}  // namespace
}  // namespace sgemm
