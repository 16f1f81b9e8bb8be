#include "server/service/request_report.h"

#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

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

// timings.jsonl lists every concrete kernel with its launches (and reads back);
// the trace's compute slice and metadata carry the list, and each kernel slice
// is named by its own launch's row (the report's kernel where the engine did
// not say which).
TEST(RequestReport, TimingsAndTraceListEveryKernelRowAndEachKernelSliceNamesItsOwn) {
  RequestFacts f = facts();
  f.received_ms = 10;
  GemmReport r;
  r.backend = "cuda";
  r.kernel_rows = {{"simt_tma_128x256x32", 2}, {"simt_cpasync_64x128x16", 1}};
  r.kernel_row = most_launched_row(r.kernel_rows);
  DeviceTiming d;
  d.device = 0;
  d.name = "GPU";
  const int rows[] = {0, 0, 1, -1};  // the last: a kernel step the engine did not label
  for (int i = 0; i < 4; ++i) {
    Step st;
    st.kind = StepKind::kKernel;
    st.start_ms = 12 + i;
    st.end_ms = 13 + i;
    st.row_begin = 16 * i;
    st.row_end = 16 * (i + 1);
    st.k_end = 16;
    st.kernel_row = rows[i];
    d.steps.push_back(st);
  }
  r.devices.push_back(d);

  const TimingRecord t = timing_record_of(f, r);
  EXPECT_EQ(t.kernel, "simt_tma_128x256x32");
  ASSERT_EQ(t.kernel_rows.size(), 2u);
  EXPECT_EQ(t.kernel_rows[1].name, "simt_cpasync_64x128x16");
  EXPECT_EQ(t.kernel_rows[1].launches, 1);
  const std::string line = timing_record_json(t);
  const auto j = nlohmann::json::parse(line);
  ASSERT_TRUE(j.contains("kernel_rows")) << line;
  EXPECT_EQ(j["kernel_rows"], nlohmann::json::parse(R"([{"name":"simt_tma_128x256x32","launches":2},)"
                                                    R"({"name":"simt_cpasync_64x128x16","launches":1}])"));
  StatusOr<TimingRecord> back = parse_timing_record(line);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  ASSERT_EQ(back->kernel_rows.size(), 2u);
  EXPECT_EQ(back->kernel_rows[0].name, "simt_tma_128x256x32");
  EXPECT_EQ(back->kernel_rows[0].launches, 2);
  // A record without the list (an older server's line) still parses.
  EXPECT_FALSE(nlohmann::json::parse(timing_record_json(timing_record_of(f, GemmReport{}))).contains("kernel_rows"));

  const auto doc = nlohmann::json::parse(chrome_trace_json(f, r));
  EXPECT_EQ(doc["otherData"]["kernel_rows"], j["kernel_rows"]);
  std::vector<std::string> slices;
  for (const auto& e : doc["traceEvents"]) {
    if (e.value("cat", "") == "kernel") slices.push_back(e["name"].get<std::string>());
    if (e["name"] == "compute") {
      EXPECT_EQ(e["args"]["kernel_rows"], j["kernel_rows"]);
    }
  }
  EXPECT_EQ(slices, (std::vector<std::string>{"simt_tma_128x256x32", "simt_tma_128x256x32", "simt_cpasync_64x128x16",
                                              "simt_tma_128x256x32"}));
}

}  // namespace
}  // namespace sgemm
