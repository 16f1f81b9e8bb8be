#include "server/service/request_report.h"

#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>

namespace sgemm {
namespace {

RequestFacts facts() {
  RequestFacts f;
  f.request_id = std::string(1, '7');  // GCC 12 -O3 flags the literal assignment falsely (-Wrestrict, PR105329)
  f.request.shape = {64, 32, 16};
  f.compute_start_ms = 12;
  f.compute_end_ms = 40;
  f.summary_ms = 45;
  return f;
}

TEST(RequestReport, QueueTimeCountsFromTheEndOfTheUploadWhenComputingWaitedForIt) {
  RequestFacts f = facts();
  f.received_ms = 10;  // submitted_ms -1: handed to the pool when the upload ended
  EXPECT_DOUBLE_EQ(timing_record_of(f, GemmReport{}).queue_ms, 2.0);
}

TEST(RequestReport, AnEarlyStartsQueueTimeCountsFromItsHandOverNotTheLaterEndOfTheUpload) {
  RequestFacts f = facts();
  f.submitted_ms = 11;  // computing started while A was arriving
  f.received_ms = 30;   // the upload ended during compute
  const TimingRecord t = timing_record_of(f, GemmReport{});
  EXPECT_DOUBLE_EQ(t.queue_ms, 1.0);
  EXPECT_DOUBLE_EQ(t.receive_ms, 30.0);
  EXPECT_DOUBLE_EQ(t.compute_ms, 28.0);
  EXPECT_NE(chrome_trace_json(f, GemmReport{}).find("\"queue\""), std::string::npos);
}

TEST(RequestReport, ProcessesAreOrderedWithTheTraceFormatsSortIndexEvent) {
  RequestFacts f = facts();
  f.received_ms = 10;
  f.first_send_ms = 20;
  f.bytes_out = 64 * 32 * 4;
  GemmReport r;
  for (int d = 0; d < 2; ++d) {
    DeviceTiming t;
    t.device = d;
    t.name = "GPU";
    r.devices.push_back(t);
  }
  const auto doc = nlohmann::json::parse(chrome_trace_json(f, r));
  // Chrome's trace-event format: {"name": "process_sort_index", "ph": "M", "pid": P, "args": {"sort_index": N}}.
  std::map<int, int> index;
  for (const auto& e : doc["traceEvents"]) {
    if (e["name"] != "process_sort_index") continue;
    EXPECT_EQ(e["ph"], "M");
    ASSERT_TRUE(e["args"].contains("sort_index")) << e.dump();
    ASSERT_TRUE(e["args"]["sort_index"].is_number_integer()) << e.dump();
    EXPECT_FALSE(e["args"].contains("name")) << e.dump();
    index[e["pid"].get<int>()] = e["args"]["sort_index"].get<int>();
  }
  // The service first, then the devices in order.
  EXPECT_EQ(index, (std::map<int, int>{{0, 0}, {1, 1}, {2, 2}}));
  // The send slice carries the request's bytes of C.
  bool send = false;
  for (const auto& e : doc["traceEvents"])
    if (e["name"] == "send") {
      send = true;
      EXPECT_EQ(e["args"]["bytes"], 64 * 32 * 4);
    }
  EXPECT_TRUE(send);
}

}  // namespace
}  // namespace sgemm
