// Caller memory that cannot hurt the server: a region whose owner shrinks it
// under the server (ftruncate) costs the requests that touch it, never the
// process (region_guard.h); layouts the engine cannot index are refused
// before any data moves (region_operands.h).
#include "server/service/region_guard.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstring>
#include <thread>

#include "server/service/region_operands.h"
#include "server/service/region_registry.h"
#include "tests/server/engine/fake_engine_base.h"

namespace sgemm {
namespace {

class NullEngine final : public testing::FakeEngineBase {
 public:
  EngineInfo info() const override { return {}; }
  HostAllocator& host_allocator() override { return alloc_; }
  Status validate(const GemmRequest&) const override { return Status::Ok(); }
  StatusOr<GemmReport> run(const GemmJob&) override { return GemmReport{}; }

 private:
  AlignedHostAllocator alloc_;
};

// A shared-memory object its test can shrink, unlinked at the end.
class ShmObject {
 public:
  explicit ShmObject(int64_t bytes) {
    static std::atomic<int> n{0};
    name_ = "/sgemm-guard-" + std::to_string(getpid()) + "-" + std::to_string(n++);
    fd_ = shm_open(name_.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    EXPECT_GE(fd_, 0) << strerror(errno);
    EXPECT_EQ(ftruncate(fd_, bytes), 0);
    EXPECT_EQ(fchmod(fd_, 0600), 0);
  }
  ~ShmObject() {
    close(fd_);
    shm_unlink(name_.c_str());
  }
  const std::string& name() const { return name_; }
  int fd() const { return fd_; }
  // Removes the name at once (the descriptor stays usable): for a process
  // that may die before the destructor runs.
  void unlink() { shm_unlink(name_.c_str()); }
  void resize(int64_t bytes) { ASSERT_EQ(ftruncate(fd_, bytes), 0) << strerror(errno); }

 private:
  std::string name_;
  int fd_ = -1;
};

RegionCaller unix_caller() {
  RegionCaller c;
  c.unix_socket = true;
  c.connection = 1;
  c.cred = {getuid(), getgid(), getpid()};
  return c;
}

// Sums the region's bytes on another thread, as an engine worker reads them.
int64_t sum_on_another_thread(const MappedRegion& r) {
  int64_t sum = -1;
  std::thread t([&] {
    const volatile unsigned char* p = reinterpret_cast<const unsigned char*>(r.data());
    int64_t s = 0;
    for (int64_t i = 0; i < r.bytes(); i += 512) s += p[i];
    sum = s;
  });
  t.join();
  return sum;
}

TEST(RegionGuard, ShrunkRegionIsRefusedAndItsFaultsAreContained) {
  NullEngine engine;
  RegionRegistry reg(engine, {1 << 20});
  constexpr int64_t kBytes = 64 << 10;
  ShmObject obj(kBytes);
  {
    void* p = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, obj.fd(), 0);
    ASSERT_NE(p, MAP_FAILED);
    std::memset(p, 1, kBytes);
    munmap(p, kBytes);
  }
  ASSERT_TRUE(reg.register_region(unix_caller(), "r", obj.name(), 0).ok());
  auto held = reg.acquire(unix_caller(), "r");
  ASSERT_TRUE(held.ok()) << held.status().to_string();
  const MappedRegion& r = **held;
  EXPECT_TRUE(r.check_intact().ok());
  EXPECT_EQ(sum_on_another_thread(r), kBytes / 512);  // every sampled byte is 1

  // The owner shrinks it: fstat sees it before any fault.
  obj.resize(0);
  Status st = r.check_intact();
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("region 'r'"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("now has 0"), std::string::npos) << st.message();
  EXPECT_EQ(reg.acquire(unix_caller(), "r").status().code(), StatusCode::kFailedPrecondition);

  // A read past the new end, on a thread that is not the test's: SIGBUS is
  // absorbed, the pages read as zeros, and the region is marked lost.
  EXPECT_EQ(sum_on_another_thread(r), 0);
  // Writes land in private zero pages too (the engine writing C).
  copy_matrix(reinterpret_cast<float*>(r.data()), 16, reinterpret_cast<const float*>(r.data()) + 1024, 16, 8, 16);
  obj.resize(kBytes);  // even grown back, the use that faulted stays void
  st = r.check_intact();
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("lost its pages"), std::string::npos) << st.message();
  EXPECT_EQ(reg.acquire(unix_caller(), "r").status().code(), StatusCode::kFailedPrecondition);

  // The slot goes back with the region; a fresh registration is sound.
  held = Status::Ok();
  std::atomic<bool> released{false};
  ASSERT_TRUE(reg.unregister_region(unix_caller(), "r", [&](int) { released = true; }).ok());
  EXPECT_TRUE(released);
  ASSERT_TRUE(reg.register_region(unix_caller(), "r2", obj.name(), 0).ok());
  auto again = reg.acquire(unix_caller(), "r2");
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_TRUE((*again)->check_intact().ok());
}

// A SIGBUS outside every guarded range keeps its default action: the guard
// hides no bug of the server's own.
TEST(RegionGuardDeathTest, UnguardedFaultStillEndsTheProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // The child runs this test again from the start and dies by the fault:
  // its object must leave no name behind in /dev/shm.
  ShmObject obj(8192);
  obj.unlink();
  EXPECT_EXIT(
      {
        // Install the guard with one unrelated range, then fault elsewhere.
        static char unrelated[4096];
        (void)guard_caller_memory(unrelated, sizeof unrelated);
        void* p = mmap(nullptr, 8192, PROT_READ, MAP_SHARED, obj.fd(), 0);
        if (p == MAP_FAILED) _exit(3);
        if (ftruncate(obj.fd(), 0) != 0) _exit(4);
        const volatile char* c = static_cast<const char*>(p);
        (void)c[100];
        _exit(0);
      },
      // The default action kills with SIGBUS; under a sanitizer, its own
      // handler (the one installed before the guard) reports the fault and exits.
      [](int status) { return WIFSIGNALED(status) ? WTERMSIG(status) == SIGBUS : WEXITSTATUS(status) != 0; }, "");
}

TEST(RegionLayout, LeadingDimensionsBeyondTheEngineAndOverflowingSpansAreRefused) {
  NullEngine engine;
  RegionRegistry reg(engine, {1 << 20});
  ShmObject obj(64 << 10);
  ASSERT_TRUE(reg.register_region(unix_caller(), "r", obj.name(), 0).ok());
  GemmRequest req;
  req.shape = {1, 8, 8};  // A of one row: its ld never moves the span
  RegionOperands ops;
  ops.a = RegionRef{"r", 0, int64_t{1} << 31};
  ops.b = RegionRef{"r", 4096, 0};
  auto b = bind_region_operands(reg, unix_caller(), req, ops, INT32_MAX);
  EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(b.status().message().find("header.a_region.ld 2147483648"), std::string::npos) << b.status().message();
  ops.a->ld = INT32_MAX;  // the largest the engine takes: a one-row A fits
  b = bind_region_operands(reg, unix_caller(), req, ops, INT32_MAX);
  EXPECT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ(b->lda, INT32_MAX);

  // Spans that overflow int64 are refused, not wrapped into the region.
  for (int64_t ld : {INT64_MAX, INT64_MAX / 4 + 1, int64_t{1} << 62}) {
    auto l = check_region_layout("PutMatrix header.region", "r", 64 << 10, 3, 8, 0, ld, INT64_MAX);
    EXPECT_EQ(l.status().code(), StatusCode::kInvalidArgument) << ld;
    EXPECT_NE(l.status().message().find("overruns region 'r'"), std::string::npos) << l.status().message();
  }
  auto l = check_region_layout("f", "r", 64 << 10, 3, 8, INT64_MAX - 3, 0, INT64_MAX);  // offset near the top
  EXPECT_EQ(l.status().code(), StatusCode::kInvalidArgument);
  l = check_region_layout("f", "r", 64 << 10, 3, 8, 0, -8, INT64_MAX);
  EXPECT_EQ(l.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(l.status().message().find("f.ld -8"), std::string::npos) << l.status().message();
}

TEST(RegionQuota, AClientsRegionsCountTogetherAndNeedTheMultiplyRight) {
  NullEngine engine;
  RegionRegistry reg(engine, {1 << 20});
  ShmObject a(64 << 10), b(64 << 10), c(4096);
  RegionCaller alice = unix_caller(), alice_other_conn = unix_caller(), viewer = unix_caller();
  alice.client = alice_other_conn.client = "alice";
  alice.max_region_bytes = alice_other_conn.max_region_bytes = 100 << 10;
  alice_other_conn.connection = 2;
  viewer.client = "viewer";
  viewer.may_register = false;
  EXPECT_EQ(reg.register_region(viewer, "v", c.name(), 0).status().code(), StatusCode::kPermissionDenied);
  ASSERT_TRUE(reg.register_region(alice, "a", a.name(), 0).ok());
  auto over = reg.register_region(alice_other_conn, "b", b.name(), 0);  // another connection, the same client
  EXPECT_EQ(over.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(over.status().message().find("max_region_bytes"), std::string::npos) << over.status().message();
  EXPECT_TRUE(reg.register_region(alice_other_conn, "c", c.name(), 0).ok());  // 68 KiB of 100
  reg.drop_connection(1);                                                     // "a" goes: its bytes come back
  EXPECT_TRUE(reg.register_region(alice_other_conn, "b", b.name(), 0).ok());
}

// Each region keeps a descriptor: the registry takes at most a quarter of the
// open-files limit, so registrations cannot starve the listeners of descriptors.
TEST(RegionQuota, RegistrationsStayWithinAQuarterOfTheDescriptorLimit) {
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  rlimit low = saved;
  low.rlim_cur = 256;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  NullEngine engine;
  RegionRegistry reg(engine, {int64_t{1} << 30});
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &saved), 0);
  EXPECT_EQ(reg.max_regions(), 64);
  ShmObject obj(4096);
  int registered = 0;
  Status last;
  for (int i = 0; i < 80; ++i) {
    std::string name = std::to_string(i);  // (GCC 12 warns falsely on "r" + to_string)
    name.insert(0, "region-");
    auto r = reg.register_region(unix_caller(), name, obj.name(), 0);
    if (!r.ok()) {
      last = r.status();
      break;
    }
    ++registered;
  }
  EXPECT_EQ(registered, 64);
  EXPECT_EQ(last.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(last.message().find("open-files limit"), std::string::npos) << last.message();
}

}  // namespace
}  // namespace sgemm
