#include "server/service/rate_limited_log.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>

#include <algorithm>
#include <sstream>
#include <thread>

namespace sgemm {
namespace {

TEST(RateLimitedLog, LetsAFewLinesThroughPerSecondAndCountsTheRest) {
  std::ostringstream out;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
  sink->set_pattern("%v");
  RateLimitedLog log(std::make_shared<spdlog::logger>("t", sink), 5);
  for (int i = 0; i < 1000; ++i) log.log(spdlog::level::warn, "line " + std::to_string(i));
  const std::string text = out.str();
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 5);
  std::this_thread::sleep_for(std::chrono::milliseconds(1050));
  log.log(spdlog::level::warn, "after");
  EXPECT_NE(out.str().find("995 similar log lines suppressed"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("after"), std::string::npos);
}

}  // namespace
}  // namespace sgemm
