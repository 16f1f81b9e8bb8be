#include "server/service/host_memory.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

namespace sgemm {
namespace {

namespace fs = std::filesystem;

// A fake /sys/fs/cgroup in a temporary directory.
class FakeCgroups : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "sgemm-cgroup-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  void write(const std::string& rel, const std::string& text) {
    const fs::path p = fs::path(root_) / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  std::string root_;
};

TEST_F(FakeCgroups, V2ReadsMemoryMaxOfTheProcessCgroup) {
  write("system.slice/sgemm.service/memory.max", "8589934592\n");
  const auto l = cgroup_memory_limit(root_, "0::/system.slice/sgemm.service\n");
  ASSERT_TRUE(l.has_value());
  EXPECT_EQ(l->bytes, int64_t{8} << 30);
  EXPECT_NE(l->source.find("cgroup v2"), std::string::npos) << l->source;
  EXPECT_NE(l->source.find("sgemm.service/memory.max"), std::string::npos) << l->source;
}

TEST_F(FakeCgroups, V2TakesTheTightestAncestor) {
  write("kubepods/memory.max", "4294967296\n");
  write("kubepods/pod1/memory.max", "max\n");
  write("kubepods/pod1/ctr/memory.max", "6442450944\n");
  const auto l = cgroup_memory_limit(root_, "0::/kubepods/pod1/ctr\n");
  ASSERT_TRUE(l.has_value());
  EXPECT_EQ(l->bytes, int64_t{4} << 30);
  EXPECT_NE(l->source.find("kubepods/memory.max"), std::string::npos) << l->source;
}

TEST_F(FakeCgroups, V2InsideAContainerNamespaceReadsTheRootFile) {
  // docker run --memory 2g: the container sees its own cgroup as "/".
  write("memory.max", "2147483648\n");
  const auto l = cgroup_memory_limit(root_, "0::/\n");
  ASSERT_TRUE(l.has_value());
  EXPECT_EQ(l->bytes, int64_t{2} << 30);
}

TEST_F(FakeCgroups, V2MaxEverywhereIsNoLimit) {
  write("user.slice/memory.max", "max\n");
  EXPECT_FALSE(cgroup_memory_limit(root_, "0::/user.slice\n").has_value());
  // No file at all (the host's root cgroup has no memory.max).
  EXPECT_FALSE(cgroup_memory_limit(root_, "0::/\n").has_value());
}

TEST_F(FakeCgroups, V1ReadsLimitInBytesAndIgnoresItsUnlimitedValue) {
  write("memory/docker/abc/memory.limit_in_bytes", "1073741824\n");
  write("memory/memory.limit_in_bytes", "9223372036854771712\n");
  const std::string self = "12:pids:/docker/abc\n4:memory:/docker/abc\n1:name=systemd:/docker/abc\n0::/\n";
  const auto l = cgroup_memory_limit(root_, self);
  ASSERT_TRUE(l.has_value());
  EXPECT_EQ(l->bytes, int64_t{1} << 30);
  EXPECT_NE(l->source.find("cgroup v1"), std::string::npos) << l->source;
  // Unlimited only: no limit.
  fs::remove(fs::path(root_) / "memory/docker/abc/memory.limit_in_bytes");
  EXPECT_FALSE(cgroup_memory_limit(root_, self).has_value());
}

TEST_F(FakeCgroups, V1HostPathAbsentInTheContainerFallsBackToTheMountRoot) {
  // The memory line names the host's path, but the container's mount shows its own cgroup at the root.
  write("memory/memory.limit_in_bytes", "3221225472\n");
  const auto l = cgroup_memory_limit(root_, "4:cpu,memory:/process_api/68672c\n");
  ASSERT_TRUE(l.has_value());
  EXPECT_EQ(l->bytes, int64_t{3} << 30);
}

TEST_F(FakeCgroups, GarbageIsNoLimit) {
  write("memory.max", "lots\n");
  EXPECT_FALSE(cgroup_memory_limit(root_, "0::/\n").has_value());
  EXPECT_FALSE(cgroup_memory_limit(root_, "not a cgroup line\n").has_value());
  EXPECT_FALSE(cgroup_memory_limit(root_, "").has_value());
}

TEST(HostMemoryLimit, IsPositiveAndNamesItsSource) {
  const MemoryLimit l = host_memory_limit();
  EXPECT_GT(l.bytes, 0);
  EXPECT_FALSE(l.source.empty());
}

}  // namespace
}  // namespace sgemm
