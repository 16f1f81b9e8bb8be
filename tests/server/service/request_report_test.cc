#include "server/service/request_report.h"

#include <gtest/gtest.h>

namespace sgemm {
namespace {

RequestFacts facts() {
  RequestFacts f;
  f.request_id = "7";
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

}  // namespace
}  // namespace sgemm
