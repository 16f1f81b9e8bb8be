// End to end: callers that try to crash, stall, fool or spy on the server
// (docs/security.md). Each test runs an attack against the real server and
// asserts that the server survives, that the attack gets a clear status, and
// that a normal request from another client still completes correctly (fp64
// reference) while or right after it runs.
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <random>
#include <thread>

#include "client/sgemm_client.h"
#include "common/reference_gemm.h"
#include "sgemm/v1/sgemm.grpc.pb.h"
#include "tests/e2e/server_process.h"

namespace sgemm {
namespace {

namespace v1 = ::sgemm::v1;
using testing::ServerProcess;
using Clock = std::chrono::steady_clock;

uint64_t fresh_seed() { return (uint64_t(std::random_device{}()) << 32) | std::random_device{}(); }

// One normal request from a fresh client over TCP: an odd shape, checked
// against the fp64 reference. Returns its latency as the client saw it.
double normal_request_ms(const ServerProcess& server) {
  auto client = Client::connect(server.tcp_address());
  const GemmShape s{33, 17, 65};
  const uint64_t seed = fresh_seed();
  std::vector<float> a(std::size_t(s.m * s.k)), b(std::size_t(s.k * s.n));
  fill_random(a, seed);
  fill_random(b, seed + 1);
  MultiplyOptions opt;
  opt.alpha = 0.5f;
  opt.timeout = std::chrono::milliseconds(20000);
  const auto t0 = Clock::now();
  auto res = client->multiply(s, a.data(), b.data(), nullptr, opt);
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  EXPECT_TRUE(res.ok()) << res.status().to_string();
  if (!res.ok()) return ms;
  auto v = verify_gemm(s.m, s.n, s.k, opt.alpha, a.data(), b.data(), 0.0f, nullptr, res->c.data(),
                       rows_to_verify(s.m, s.n, s.k, seed));
  EXPECT_TRUE(v.passed(kSgemmTolerance)) << "max rel error " << v.max_rel_error;
  return ms;
}

// The server answers, computes correctly and quickly. The bound is loose: the
// machines that run this suite are shared (the first request of a fresh
// client also pays for its connection).
void expect_server_serves(const ServerProcess& server, const char* what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(kill(server.pid(), 0), 0) << "the server process is gone: " << server.log();
  const double ms = normal_request_ms(server);
  EXPECT_LT(ms, 1000.0) << "a normal request took " << ms << " ms";
  std::printf("[ info ] %s: a normal request took %.1f ms\n", what, ms);
}

// A region as an attacker makes it: its own shared-memory object, kept open
// (the library's regions unlink theirs), registered over the Unix socket on a
// channel of its own, which it keeps open so the registration lasts.
class OwnedRegion final : public Region {
 public:
  OwnedRegion(const std::string& unix_address, int64_t bytes) : bytes_(bytes) {
    static std::atomic<int> n{0};
    name_ = "/sgemm-attack-" + std::to_string(getpid()) + "-" + std::to_string(n++);
    fd_ = shm_open(name_.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    EXPECT_GE(fd_, 0) << strerror(errno);
    EXPECT_EQ(ftruncate(fd_, bytes), 0);
    data_ = mmap(nullptr, std::size_t(bytes), PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    EXPECT_NE(data_, MAP_FAILED);
    stub_ = v1::Sgemm::NewStub(grpc::CreateChannel(unix_address, grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    v1::RegisterRegionRequest req;
    req.set_name(name_);
    req.set_shm_name(name_);
    v1::RegisterRegionResponse resp;
    const grpc::Status st = stub_->RegisterRegion(&ctx, req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
  }
  ~OwnedRegion() override {
    (void)unregister();
    munmap(data_, std::size_t(bytes_));
    close(fd_);
    shm_unlink(name_.c_str());
  }
  const std::string& name() const override { return name_; }
  void* data() const override { return data_; }
  int64_t bytes() const override { return bytes_; }
  StatusOr<int> unregister() override {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    v1::UnregisterRegionRequest req;
    req.set_name(name_);
    v1::UnregisterRegionResponse resp;
    const grpc::Status st = stub_->UnregisterRegion(&ctx, req, &resp);
    if (!st.ok()) return Internal(st.error_message());
    return int(resp.waited_requests());
  }
  // The attack: the object shrinks to nothing under the server. The test's own
  // mapping is not touched after this.
  void shrink() { ASSERT_EQ(ftruncate(fd_, 0), 0) << strerror(errno); }

 private:
  std::string name_;
  int fd_ = -1;
  void* data_ = nullptr;
  int64_t bytes_ = 0;
  std::unique_ptr<v1::Sgemm::Stub> stub_;
};

class CallerAttacks : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new ServerProcess();
    ASSERT_TRUE(server_->running()) << server_->log();
  }
  static void TearDownTestSuite() {
    EXPECT_EQ(server_->stop(), 0) << "server did not exit cleanly on SIGTERM";
    delete server_;
  }
  static std::vector<v1::RegionInfo> list_regions() {
    auto stub = v1::Sgemm::NewStub(grpc::CreateChannel(server_->unix_address(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    v1::ListRegionsRequest req;
    v1::ListRegionsResponse resp;
    EXPECT_TRUE(stub->ListRegions(&ctx, req, &resp).ok());
    return {resp.regions().begin(), resp.regions().end()};
  }
  static ServerProcess* server_;
};
ServerProcess* CallerAttacks::server_ = nullptr;

// The owner of a region shrinks it (ftruncate) and then names it: the
// server used to die of SIGBUS on the first access.
TEST_F(CallerAttacks, ShrunkRegionIsRefusedNotFatal) {
  auto client = Client::connect(server_->unix_address());
  const GemmShape s{64, 48, 80};
  const int64_t a_bytes = 4 * s.m * s.k, b_bytes = 4 * s.k * s.n;
  auto owned = std::make_unique<OwnedRegion>(server_->unix_address(), a_bytes + b_bytes + (1 << 16));
  const Region* r = owned.get();
  const uint64_t seed = fresh_seed();
  std::vector<float> a(std::size_t(s.m * s.k)), b(std::size_t(s.k * s.n));
  fill_random(a, seed);
  fill_random(b, seed + 1);
  std::memcpy(r->floats(), a.data(), std::size_t(a_bytes));
  std::memcpy(r->floats() + s.m * s.k, b.data(), std::size_t(b_bytes));
  const RegionMatrix ra{r, 0, 0}, rb{r, a_bytes, 0};
  auto ok = client->multiply_regions(s, ra, rb, std::nullopt, std::nullopt, {});
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();

  owned->shrink();
  auto res = client->multiply_regions(s, ra, rb, std::nullopt, std::nullopt, {});
  EXPECT_EQ(res.status().code(), StatusCode::kFailedPrecondition) << res.status().to_string();
  EXPECT_NE(res.status().message().find(r->name()), std::string::npos) << res.status().to_string();
  auto put = client->put_region(s.m, s.k, ra);
  EXPECT_EQ(put.status().code(), StatusCode::kFailedPrecondition) << put.status().to_string();
  expect_server_serves(*server_, "after a shrunk region was named");
}

// The owner shrinks the region while the engine reads it: the request fails
// (or, when the product won the race, is correct), the server lives on.
TEST_F(CallerAttacks, RegionShrunkDuringComputeFailsOnlyItsRequest) {
  auto client = Client::connect(server_->unix_address());
  auto info = client->info();
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  const int64_t n = info->backend == "cpu" ? 1024 : 8192;
  const GemmShape s{n, n, n};
  int failed = 0;
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto owned = std::make_unique<OwnedRegion>(server_->unix_address(), 8 * n * n);
    const Region* r = owned.get();
    const uint64_t seed = fresh_seed();
    std::vector<float> a(std::size_t(n * n)), b(std::size_t(n * n));
    fill_random(a, seed);
    fill_random(b, seed + 1);
    std::memcpy(r->floats(), a.data(), a.size() * 4);
    std::memcpy(r->floats() + n * n, b.data(), b.size() * 4);
    const RegionMatrix ra{r, 0, 0}, rb{r, 4 * n * n, 0};
    auto running = std::async(std::launch::async,
                              [&] { return client->multiply_regions(s, ra, rb, std::nullopt, std::nullopt, {}); });
    bool held = false;
    const auto give_up = Clock::now() + std::chrono::seconds(30);
    while (!held && Clock::now() < give_up &&
           running.wait_for(std::chrono::milliseconds(0)) != std::future_status::ready)
      for (const auto& ri : list_regions())
        if (ri.name() == r->name() && ri.requests_using() > 0) held = true;
    owned->shrink();
    auto res = running.get();
    if (res.ok()) {  // the product was done before the truncation
      expect_server_serves(*server_, "a product that finished before its region shrank");
      continue;
    }
    ++failed;
    EXPECT_EQ(res.status().code(), StatusCode::kFailedPrecondition) << res.status().to_string();
    EXPECT_NE(res.status().message().find(r->name()), std::string::npos) << res.status().to_string();
    expect_server_serves(*server_, "after a region shrank under a running product");
    if (held) break;
  }
  std::printf("[ info ] %d of the attempts failed their request (the rest finished first)\n", failed);
}

// A one-row operand with a leading dimension past 2^31 passes the span check
// (its ld never moves the span) but not the engine's integer: it used to run
// with OpenBLAS refusing on stderr and the request answering OK with C unwritten.
TEST_F(CallerAttacks, LeadingDimensionPastTheEnginesIntegerIsRefused) {
  auto client = Client::connect(server_->unix_address());
  const GemmShape s{1, 8, 16};
  auto region = client->create_region(1 << 16);
  ASSERT_TRUE(region.ok()) << region.status().to_string();
  const Region* r = region->get();
  std::memset(r->data(), 0, 1 << 16);
  const RegionMatrix ra{r, 0, int64_t{1} << 31}, rb{r, 4096, 0}, rc{r, 8192, 0};
  auto res = client->multiply_regions(s, ra, rb, std::nullopt, rc, {});
  EXPECT_EQ(res.status().code(), StatusCode::kInvalidArgument) << res.status().to_string();
  EXPECT_NE(res.status().message().find("header.a_region.ld"), std::string::npos) << res.status().to_string();
  const RegionMatrix wide_c{r, 8192, int64_t{1} << 32};
  res = client->multiply_regions(s, RegionMatrix{r, 0, 0}, rb, std::nullopt, wide_c, {});
  EXPECT_EQ(res.status().code(), StatusCode::kInvalidArgument) << res.status().to_string();
  EXPECT_NE(res.status().message().find("header.out_region.ld"), std::string::npos) << res.status().to_string();
  auto put = client->put_region(1, 16, RegionMatrix{r, 0, int64_t{1} << 31});
  EXPECT_EQ(put.status().code(), StatusCode::kInvalidArgument) << put.status().to_string();
  expect_server_serves(*server_, "after leading dimensions past 2^31");
}

}  // namespace
}  // namespace sgemm
