#include "server/app/process_setup.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace sgemm {
namespace {

TEST(ParseDeviceList, AllOrEmptyMeansEveryDevice) {
  for (const char* text : {"all", ""}) {
    auto d = parse_device_list(text);
    ASSERT_TRUE(d.ok()) << text;
    EXPECT_TRUE(d->empty()) << text;
  }
}

TEST(ParseDeviceList, CommaListKeepsOrder) {
  auto d = parse_device_list("3,0,12");
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(*d, (std::vector<int>{3, 0, 12}));
}

TEST(ParseDeviceList, BadItemIsNamed) {
  for (const char* text : {"0,x", "1,-2", "0,,1", "2a", "0 ,1"}) {
    auto d = parse_device_list(text);
    ASSERT_FALSE(d.ok()) << text;
    EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument) << text;
    EXPECT_NE(d.status().message().find("--devices"), std::string::npos) << d.status().message();
  }
}

TEST(OpenProcessLogs, WithoutDirOnlyTheRequestLog) {
  auto logs = open_process_logs(LogOptions{});
  ASSERT_TRUE(logs.ok()) << logs.status().to_string();
  ASSERT_NE(logs->log, nullptr);
  EXPECT_EQ(logs->timing_log, nullptr);
  EXPECT_EQ(logs->log->level(), spdlog::level::info);
}

TEST(OpenProcessLogs, DirGetsBothFilesWrittenAtOnce) {
  std::string tmpl = (std::filesystem::temp_directory_path() / "sgemm-logs-XXXXXX").string();
  ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
  LogOptions o;
  o.dir = tmpl + "/nested";
  o.level = "debug";
  auto logs = open_process_logs(o);
  ASSERT_TRUE(logs.ok()) << logs.status().to_string();
  ASSERT_NE(logs->timing_log, nullptr);
  logs->log->debug("a debug line");
  logs->timing_log->info("{}", "{\"t\":1}");
  // Flushed as written: the files hold the lines without a flush or a close.
  auto read = [](const std::string& path) {
    std::ifstream f(path);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  };
  EXPECT_NE(read(o.dir + "/sgemm-server.log").find("a debug line"), std::string::npos);
  EXPECT_EQ(read(o.dir + "/timings.jsonl"), "{\"t\":1}\n");
  std::filesystem::remove_all(tmpl);
}

TEST(OpenProcessLogs, UnusableDirNamesTheFlag) {
  LogOptions o;
  o.dir = "/proc/self/no-such-dir";
  auto logs = open_process_logs(o);
  ASSERT_FALSE(logs.ok());
  EXPECT_EQ(logs.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(logs.status().message().find("--log-dir"), std::string::npos) << logs.status().message();
}

TEST(RaiseOpenFilesLimit, NeverLowersIt) {
  const auto [before, after] = raise_open_files_limit();
  EXPECT_GE(after, before);
  const auto [again_before, again_after] = raise_open_files_limit();
  EXPECT_EQ(again_before, after);  // already at the hard limit
  EXPECT_EQ(again_after, after);
}

}  // namespace
}  // namespace sgemm
