// End to end: callers that try to crash, stall, fool or spy on the server
// (docs/security.md). Each test runs an attack against the real server and
// asserts that the server survives, that the attack gets a clear status, and
// that a normal request from another client still completes correctly (fp64
// reference) while or right after it runs, and that its resident set comes
// back after it (attack_checks.h).
#include <fcntl.h>
#include <grp.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "client/sgemm_client.h"
#include "common/reference_gemm.h"
#include "sgemm/v1/sgemm.grpc.pb.h"
#include "tests/e2e/attack_checks.h"
#include "tests/e2e/raw_h2_client.h"
#include "tests/e2e/server_process.h"

namespace sgemm {
namespace {

namespace v1 = ::sgemm::v1;
using testing::ServerProcess;
using Clock = std::chrono::steady_clock;

using testing::fresh_seed;

// The server is alive and a normal request from a fresh client over TCP
// completes correctly (attack_checks.h). `token`: the normal client's, with
// --auth-tokens.
void expect_server_serves(const ServerProcess& server, const char* what, const std::string& token = "") {
  ClientOptions options;
  options.token = token;
  testing::expect_served(server, what, options);
}

// A region as an attacker makes it: its own shared-memory object, kept open
// (the library's regions unlink theirs), registered over the Unix socket on a
// channel of its own, which it keeps open so the registration lasts.
class OwnedRegion final : public Region {
 public:
  // `mode`: the object's file mode (0666: every local user may open it).
  OwnedRegion(const std::string& unix_address, int64_t bytes, mode_t mode = 0600) : bytes_(bytes) {
    static std::atomic<int> n{0};
    name_ = "/sgemm-attack-" + std::to_string(getpid()) + "-" + std::to_string(n++);
    fd_ = shm_open(name_.c_str(), O_RDWR | O_CREAT | O_EXCL, mode);
    EXPECT_GE(fd_, 0) << strerror(errno);
    EXPECT_EQ(fchmod(fd_, mode), 0);  // whatever the umask
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
// server used to die of SIGBUS on the first access. The attack is repeated
// (a fresh region each round, shrunk, then named in a Multiply and a
// PutMatrix) while another client's normal requests run beside it.
TEST_F(CallerAttacks, ShrunkRegionIsRefusedNotFatal) {
  auto client = Client::connect(server_->unix_address());
  expect_server_serves(*server_, "before a shrunk region");
  const int64_t rss_start = testing::rss_bytes(server_->pid());
  const GemmShape s{64, 48, 80};
  const int64_t a_bytes = 4 * s.m * s.k, b_bytes = 4 * s.k * s.n;
  const uint64_t seed = fresh_seed();
  std::vector<float> a(std::size_t(s.m * s.k)), b(std::size_t(s.k * s.n));
  fill_random(a, seed);
  fill_random(b, seed + 1);
  // A region of the attacker's, filled with A and B.
  const auto filled_region = [&] {
    auto owned = std::make_unique<OwnedRegion>(server_->unix_address(), a_bytes + b_bytes + (1 << 16));
    std::memcpy(owned->floats(), a.data(), std::size_t(a_bytes));
    std::memcpy(owned->floats() + s.m * s.k, b.data(), std::size_t(b_bytes));
    return owned;
  };
  {  // whole, the region serves
    auto owned = filled_region();
    auto ok = client->multiply_regions(s, RegionMatrix{owned.get(), 0, 0}, RegionMatrix{owned.get(), a_bytes, 0},
                                       std::nullopt, std::nullopt, {});
    ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  }
  auto normal = Client::connect(server_->tcp_address());
  testing::attack_beside_traffic(
      *normal,
      [&] {
        auto owned = filled_region();
        const Region* r = owned.get();
        const RegionMatrix ra{r, 0, 0}, rb{r, a_bytes, 0};
        owned->shrink();
        auto res = client->multiply_regions(s, ra, rb, std::nullopt, std::nullopt, {});
        EXPECT_EQ(res.status().code(), StatusCode::kFailedPrecondition) << res.status().to_string();
        EXPECT_NE(res.status().message().find(r->name()), std::string::npos) << res.status().to_string();
        auto put = client->put_region(s.m, s.k, ra);
        EXPECT_EQ(put.status().code(), StatusCode::kFailedPrecondition) << put.status().to_string();
      },
      "beside shrunk regions named in products and puts");
  expect_server_serves(*server_, "after a shrunk region was named");
  testing::expect_rss_back(server_->pid(), rss_start, "after a shrunk region was named");
}

// The owner shrinks the region while the engine reads it: the request fails
// (or, when the product won the race, is correct), the server lives on.
TEST_F(CallerAttacks, RegionShrunkDuringComputeFailsOnlyItsRequest) {
  auto client = Client::connect(server_->unix_address());
  auto info = client->info();
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  const int64_t n = info->backend == "cpu" ? 1024 : 8192;
  const GemmShape s{n, n, n};
  expect_server_serves(*server_, "before regions shrink under running products");
  const int64_t rss_start = testing::rss_bytes(server_->pid());
  auto normal = Client::connect(server_->tcp_address());
  testing::NormalTrafficThread traffic(*normal);
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
  testing::expect_traffic_served(traffic.stop(), "beside regions shrunk under running products");
  std::printf("[ info ] %d of the attempts failed their request (the rest finished first)\n", failed);
  testing::expect_rss_back(server_->pid(), rss_start, "after regions shrank under running products");
}

// A one-row operand with a leading dimension past 2^31 passes the span check
// (its ld never moves the span) but not the engine's integer: it used to run
// with OpenBLAS refusing on stderr and the request answering OK with C
// unwritten. The refused requests are repeated while another client's
// normal requests run beside them.
TEST_F(CallerAttacks, LeadingDimensionPastTheEnginesIntegerIsRefused) {
  auto client = Client::connect(server_->unix_address());
  expect_server_serves(*server_, "before leading dimensions past 2^31");
  const int64_t rss_start = testing::rss_bytes(server_->pid());
  const GemmShape s{1, 8, 16};
  auto region = client->create_region(1 << 16);
  ASSERT_TRUE(region.ok()) << region.status().to_string();
  const Region* r = region->get();
  std::memset(r->data(), 0, 1 << 16);
  const RegionMatrix ra{r, 0, int64_t{1} << 31}, rb{r, 4096, 0}, rc{r, 8192, 0};
  const RegionMatrix wide_c{r, 8192, int64_t{1} << 32};
  auto normal = Client::connect(server_->tcp_address());
  testing::attack_beside_traffic(
      *normal,
      [&] {
        auto res = client->multiply_regions(s, ra, rb, std::nullopt, rc, {});
        EXPECT_EQ(res.status().code(), StatusCode::kInvalidArgument) << res.status().to_string();
        EXPECT_NE(res.status().message().find("header.a_region.ld"), std::string::npos) << res.status().to_string();
        res = client->multiply_regions(s, RegionMatrix{r, 0, 0}, rb, std::nullopt, wide_c, {});
        EXPECT_EQ(res.status().code(), StatusCode::kInvalidArgument) << res.status().to_string();
        EXPECT_NE(res.status().message().find("header.out_region.ld"), std::string::npos) << res.status().to_string();
        auto put = client->put_region(1, 16, RegionMatrix{r, 0, int64_t{1} << 31});
        EXPECT_EQ(put.status().code(), StatusCode::kInvalidArgument) << put.status().to_string();
      },
      "beside leading dimensions past 2^31");
  expect_server_serves(*server_, "after leading dimensions past 2^31");
  ASSERT_TRUE((*region)->unregister().ok());
  testing::expect_rss_back(server_->pid(), rss_start, "after leading dimensions past 2^31");
}

// ---- Memory held in proportion to data received ---------------------------

v1::MultiplyRequest header_msg(int64_t m, int64_t n, int64_t k) {
  v1::MultiplyRequest r;
  r.mutable_header()->set_m(m);
  r.mutable_header()->set_n(n);
  r.mutable_header()->set_k(k);
  return r;
}

template <typename Request>
Request chunk_msg(v1::Matrix m, int64_t offset, int64_t count) {
  Request r;
  r.mutable_chunk()->set_matrix(m);
  r.mutable_chunk()->set_offset(offset);
  std::vector<float> v(std::size_t(count), 0.25f);
  r.mutable_chunk()->set_data(reinterpret_cast<const char*>(v.data()), v.size() * 4);
  return r;
}

// How long a trickler may hold its memory: its 2 s grace and the watchdog's
// look, with room for a loaded machine; far below the 40 s its trickle lasts.
constexpr double kTrickleHeldBoundS = 10.0;

// A server whose budget two tricklers could hold whole: 64 MiB of host
// memory, 2 s of --idle-timeout (the grace before the upload rate counts).
class MemoryAttacks : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new ServerProcess({"--idle-timeout", "2", "--host-memory-bytes", std::to_string(64 << 20)});
    ASSERT_TRUE(server_->running()) << server_->log();
  }
  static void TearDownTestSuite() {
    EXPECT_EQ(server_->stop(), 0) << "server did not exit cleanly on SIGTERM";
    delete server_;
  }
  static ServerProcess* server_;
};
ServerProcess* MemoryAttacks::server_ = nullptr;

// The report's attack: a header and a 4-byte chunk reserve the whole
// footprint, and 4 bytes every few hundred ms count as progress. Now the
// upload must keep --min-upload-rate once its grace is over: the trickler
// loses its memory, which comes back whole.
TEST_F(MemoryAttacks, TricklerLosesItsMemoryAfterTheGrace) {
  auto client = Client::connect(server_->tcp_address());
  constexpr int64_t n = 2048;  // A, B and C: 48 MiB of the 64
  auto stub = v1::Sgemm::NewStub(grpc::CreateChannel(server_->tcp_address(), grpc::InsecureChannelCredentials()));
  expect_server_serves(*server_, "before the trickler");  // the first request's one-time costs are paid
  testing::expect_released(*client, "before the trickler");
  const int64_t rss_start = testing::rss_bytes(server_->pid());
  grpc::ClientContext ctx;
  auto stream = stub->Multiply(&ctx);
  ASSERT_TRUE(stream->Write(header_msg(n, n, n)));
  ASSERT_TRUE(stream->Write(chunk_msg<v1::MultiplyRequest>(v1::MATRIX_A, 0, 1)));
  const auto t0 = Clock::now();
  auto held = testing::info_when(*client, [](const ServerInfo& i) { return i.host_bytes_in_use > 0; });
  EXPECT_EQ(held.host_bytes_in_use, 3 * 4 * n * n) << "the trickler's footprint was never reserved";
  // Trickle on: one element every 200 ms, until the server ends the stream
  // (a write may still succeed after it did: the test stops once the memory is back).
  std::atomic<bool> stop{false};
  auto trickler = std::async(std::launch::async, [&] {
    for (int64_t off = 1; off < 200 && !stop; ++off) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      if (!stream->Write(chunk_msg<v1::MultiplyRequest>(v1::MATRIX_A, off, 1))) break;
    }
    stream->WritesDone();
    v1::MultiplyResponse resp;
    while (stream->Read(&resp)) {
    }
    return stream->Finish();
  });
  // While it holds its memory, a normal request fits beside it.
  expect_server_serves(*server_, "beside a trickler within its grace");
  auto back = testing::info_when(*client, [](const ServerInfo& i) { return i.host_bytes_in_use == 0; });
  const double held_s = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_EQ(back.host_bytes_in_use, 0);
  stop = true;
  const grpc::Status st = trickler.get();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << st.error_message();
  EXPECT_NE(st.error_message().find("--min-upload-rate"), std::string::npos) << st.error_message();
  // 2 s of grace, then the watchdog's next look (every 200 ms here): about
  // 2.2 s. The bound is what the rule needs: the trickle keeps going for 40 s,
  // so memory back within 10 s was taken by the grace, not by the trickle's
  // end (and a loaded machine can add seconds to the watchdog's look).
  EXPECT_LT(held_s, kTrickleHeldBoundS) << "the trickler held its memory " << held_s << " s";
  std::printf("[ info ] the trickler held %lld bytes for %.2f s\n", (long long)(3 * 4 * n * n), held_s);
  testing::expect_released(*client, "after the trickler was dropped");
  testing::expect_rss_back(server_->pid(), rss_start, "after the trickler was dropped");
  // The whole budget serves a normal request of the same size again.
  const GemmShape s{n, n, n};
  const uint64_t seed = fresh_seed();
  std::vector<float> a(std::size_t(n * n)), b(std::size_t(n * n));
  fill_random(a, seed);
  fill_random(b, seed + 1);
  MultiplyOptions opt;
  opt.timeout = std::chrono::milliseconds(120000);
  auto res = client->multiply(s, a.data(), b.data(), nullptr, opt);
  ASSERT_TRUE(res.ok()) << res.status().to_string();
  auto v = verify_gemm(n, n, n, 1.0f, a.data(), b.data(), 0.0f, nullptr, res->c.data(), rows_to_verify(n, n, n, seed));
  EXPECT_TRUE(v.passed(kSgemmTolerance)) << "max rel error " << v.max_rel_error;
}

// The same against a PutMatrix: its first chunk reserves the resident budget
// and the matrix's host memory; a trickle loses both after the grace.
TEST_F(MemoryAttacks, TricklingPutLosesItsMemoryAfterTheGrace) {
  auto client = Client::connect(server_->tcp_address());
  constexpr int64_t rows = 2048, cols = 2048;  // 16 MiB
  auto stub = v1::Sgemm::NewStub(grpc::CreateChannel(server_->tcp_address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  v1::PutMatrixResponse resp;
  auto w = stub->PutMatrix(&ctx, &resp);
  v1::PutMatrixRequest h;
  h.mutable_header()->set_rows(rows);
  h.mutable_header()->set_cols(cols);
  const int64_t rss_start = testing::rss_bytes(server_->pid());
  ASSERT_TRUE(w->Write(h));
  ASSERT_TRUE(w->Write(chunk_msg<v1::PutMatrixRequest>(v1::MATRIX_UNSPECIFIED, 0, 1)));
  const auto t0 = Clock::now();
  auto held = testing::info_when(*client, [](const ServerInfo& i) { return i.host_bytes_in_use > 0; });
  EXPECT_EQ(held.host_bytes_in_use, 4 * rows * cols);
  EXPECT_EQ(held.resident_bytes_in_use, 4 * rows * cols);
  std::atomic<bool> stop{false};
  auto trickler = std::async(std::launch::async, [&] {
    for (int64_t off = 1; off < 200 && !stop; ++off) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      if (!w->Write(chunk_msg<v1::PutMatrixRequest>(v1::MATRIX_UNSPECIFIED, off, 1))) break;
    }
    w->WritesDone();
    return w->Finish();
  });
  expect_server_serves(*server_, "beside a trickling put within its grace");
  auto back = testing::info_when(
      *client, [](const ServerInfo& i) { return i.host_bytes_in_use == 0 && i.resident_bytes_in_use == 0; });
  const double held_s = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_EQ(back.host_bytes_in_use, 0);
  EXPECT_EQ(back.resident_bytes_in_use, 0);
  EXPECT_LT(held_s, kTrickleHeldBoundS) << "the trickling put held its memory " << held_s << " s";
  stop = true;
  const grpc::Status st = trickler.get();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << st.error_message();
  EXPECT_NE(st.error_message().find("--min-upload-rate"), std::string::npos) << st.error_message();
  std::printf("[ info ] the trickling put held %lld bytes for %.2f s\n", (long long)(4 * rows * cols), held_s);
  testing::expect_rss_back(server_->pid(), rss_start, "after the trickling put was dropped");
}

// The outer-product bomb: a header of m = n = 32768, k = 1 (256 KiB of A and
// B for 4 GiB of C); the status it gets, naming the flag.
grpc::Status send_output_bomb(v1::Sgemm::Stub& stub) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(ServerProcess::kEventWaitMs));
  auto stream = stub.Multiply(&ctx);
  (void)stream->Write(header_msg(32768, 32768, 1));
  stream->WritesDone();
  v1::MultiplyResponse resp;
  while (stream->Read(&resp)) {
  }
  return stream->Finish();
}

// 256 KiB of upload (m = n = 32768, k = 1) asked the server to compute and
// hold 4 GiB; it is refused at the header, before any memory is reserved,
// again and again while another client's normal requests run beside it.
TEST_F(MemoryAttacks, OutputsAreBoundedByTheirInputs) {
  auto client = Client::connect(server_->tcp_address());
  expect_server_serves(*server_, "before the outer product");
  const int64_t rss_start = testing::rss_bytes(server_->pid());
  auto stub = v1::Sgemm::NewStub(grpc::CreateChannel(server_->tcp_address(), grpc::InsecureChannelCredentials()));
  auto normal = Client::connect(server_->tcp_address());
  testing::attack_beside_traffic(
      *normal,
      [&] {
        const grpc::Status st = send_output_bomb(*stub);
        EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
        EXPECT_NE(st.error_message().find("--max-output-ratio"), std::string::npos) << st.error_message();
      },
      "beside outer-product bombs");
  testing::expect_released(*client, "after the refused outer products");
  // An outer product within the bound (C of 256 MiB at most, or 64x its inputs) is computed.
  const GemmShape s{300, 200, 1};
  const uint64_t seed = fresh_seed();
  std::vector<float> a(300), b(200);
  fill_random(a, seed);
  fill_random(b, seed + 1);
  auto res = client->multiply(s, a.data(), b.data(), nullptr, {});
  ASSERT_TRUE(res.ok()) << res.status().to_string();
  EXPECT_TRUE(verify_gemm(300, 200, 1, 1.0f, a.data(), b.data(), 0.0f, nullptr, res->c.data()).passed(kSgemmTolerance));
  testing::expect_rss_back(server_->pid(), rss_start, "after the outer products");
}

// Sixteen concurrent puts of one client, each within its resident quota
// alone, used to pass the header check together (8x the quota). The quota
// is charged when a put reserves its room: at most the quota is ever held.
TEST(ResidentQuotaAttack, ConcurrentPutsCannotTogetherExceedTheQuota) {
  const std::string dir = testing::make_temp_dir();
  const std::string file = dir + "/tokens.json";
  constexpr int64_t kRows = 64, kCols = 64, kBytes = kRows * kCols * 4;  // 16 KiB each
  std::ofstream(file) << R"({"clients": [{"name": "dave", "token": "dave-token-0123456789abcdef",
                                          "max_resident_bytes": )"
                      << 2 * kBytes << R"(},
                                         {"name": "erin", "token": "erin-token-0123456789abcdef"}]})";
  ServerProcess server({"--auth-tokens", file});
  ASSERT_TRUE(server.running()) << server.log();
  expect_server_serves(server, "before sixteen concurrent puts", "dave-token-0123456789abcdef");
  const int64_t rss_start = testing::rss_bytes(server.pid());
  ClientOptions eo;
  eo.token = "erin-token-0123456789abcdef";
  auto erin = Client::connect(server.tcp_address(), eo);
  testing::NormalTrafficThread traffic(*erin);  // another client, beside the puts
  auto stub = v1::Sgemm::NewStub(grpc::CreateChannel(server.tcp_address(), grpc::InsecureChannelCredentials()));
  struct Put {
    grpc::ClientContext ctx;
    v1::PutMatrixResponse resp;
    std::unique_ptr<grpc::ClientWriter<v1::PutMatrixRequest>> w;
  };
  std::vector<std::unique_ptr<Put>> puts;
  for (int i = 0; i < 16; ++i) {  // every header and first chunk before any put completes
    auto p = std::make_unique<Put>();
    p->ctx.AddMetadata("authorization", "Bearer dave-token-0123456789abcdef");
    p->w = stub->PutMatrix(&p->ctx, &p->resp);
    v1::PutMatrixRequest h;
    h.mutable_header()->set_rows(kRows);
    h.mutable_header()->set_cols(kCols);
    ASSERT_TRUE(p->w->Write(h));
    (void)p->w->Write(chunk_msg<v1::PutMatrixRequest>(v1::MATRIX_UNSPECIFIED, 0, 16));
    puts.push_back(std::move(p));
  }
  int stored = 0, denied = 0;
  for (auto& p : puts) {
    (void)p->w->Write(chunk_msg<v1::PutMatrixRequest>(v1::MATRIX_UNSPECIFIED, 16, kRows * kCols - 16));
    p->w->WritesDone();
    const grpc::Status st = p->w->Finish();
    if (st.ok())
      ++stored;
    else if (st.error_code() == grpc::StatusCode::PERMISSION_DENIED)
      ++denied;
    else
      ADD_FAILURE() << st.error_message();
  }
  testing::expect_traffic_served(traffic.stop(), "beside sixteen concurrent puts");
  EXPECT_EQ(stored, 2);
  EXPECT_EQ(denied, 14);
  ClientOptions o;
  o.token = "dave-token-0123456789abcdef";
  auto client = Client::connect(server.tcp_address(), o);
  auto info = client->info();
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  EXPECT_EQ(info->resident_bytes_in_use, 2 * kBytes);
  expect_server_serves(server, "after sixteen concurrent puts", o.token);
  testing::expect_rss_back(server.pid(), rss_start, "after sixteen concurrent puts");
}

// ---- Smaller ones: forged log lines, regions under quotas, reflection --------

// A region the server never registered, under a name chosen to forge a log line.
class NamedOnly final : public Region {
 public:
  explicit NamedOnly(std::string name) : name_(std::move(name)) {}
  const std::string& name() const override { return name_; }
  void* data() const override { return nullptr; }
  int64_t bytes() const override { return 0; }
  StatusOr<int> unregister() override { return 0; }

 private:
  std::string name_;
};

// Client strings reach the log inside error messages (a region's name here):
// a newline in one must not start a forged line, nor a quote end the field.
// The forging request is repeated while another client's normal requests run.
TEST_F(CallerAttacks, ClientStringsCannotForgeLogLines) {
  auto client = Client::connect(server_->unix_address());
  expect_server_serves(*server_, "before forged log lines");
  const int64_t rss_start = testing::rss_bytes(server_->pid());
  const std::string forged = "[2026-01-01 00:00:00.000] [sgemm] [info] request id=forged status=OK";
  const NamedOnly r("x\n" + forged + "\" error=\"none");
  auto normal = Client::connect(server_->tcp_address());
  testing::attack_beside_traffic(
      *normal,
      [&] {
        auto res = client->multiply_regions({4, 4, 4}, RegionMatrix{&r, 0, 0}, RegionMatrix{&r, 64, 0}, std::nullopt,
                                            std::nullopt, {});
        EXPECT_EQ(res.status().code(), StatusCode::kNotFound) << res.status().to_string();
      },
      "beside forged log lines");
  ASSERT_TRUE(server_->log_has("\\n" + forged)) << "the failure was not logged with its newline escaped";
  const std::string log = server_->log();
  EXPECT_EQ(log.find("\n" + forged), std::string::npos) << "a client's newline started a log line";
  EXPECT_NE(log.find("\\\" error=\\\"none"), std::string::npos) << "a client's quote was not escaped";
  expect_server_serves(*server_, "after a forged log line");
  testing::expect_rss_back(server_->pid(), rss_start, "after forged log lines");
}

// e2e-region-probe run as uid 65534 with `args`, its output collected.
struct ProbeRun {
  bool ran = false;  // it exited 0
  std::string skip;  // why the host could not run it as that user ("" when it could)
  std::string said;  // its stdout and stderr
};
ProbeRun run_probe_as_nobody(const ServerProcess& server, const std::vector<std::string>& args) {
  ProbeRun run;
  if (chmod(server.dir().c_str(), 0755) != 0) {  // the other user must reach the socket (mode 0666)
    run.said = std::string("chmod: ") + strerror(errno);
    return run;
  }
  const std::string out = server.dir() + "/probe.log";
  const int fd = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    run.said = std::string("open: ") + strerror(errno);
    return run;
  }
  // The probe beside the other binaries of a build carried to another host (as SGEMM_SERVER_BIN).
  const char* probe_env = std::getenv("SGEMM_REGION_PROBE_BIN");
  const std::string probe = probe_env ? probe_env : SGEMM_REGION_PROBE_BIN;
  std::vector<char*> argv{const_cast<char*>("e2e-region-probe")};
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = fork();  // only async-signal-safe calls in the child until exec
  if (pid == 0) {
    dup2(fd, 1);
    dup2(fd, 2);
    if (setgroups(0, nullptr) != 0 || setgid(65534) != 0 || setuid(65534) != 0) _exit(126);
    execv(probe.c_str(), argv.data());
    _exit(127);
  }
  close(fd);
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) {
    run.said = std::string("fork/waitpid: ") + strerror(errno);
    return run;
  }
  std::ifstream f(out);
  run.said.assign(std::istreambuf_iterator<char>(f), {});
  // 126: the child could not become uid 65534; 127: that user could not execute the probe
  // (a path it cannot reach): the host's setup, not the rule under test.
  if (WIFEXITED(status) && (WEXITSTATUS(status) == 126 || WEXITSTATUS(status) == 127))
    run.skip = "uid 65534 could not run " + probe + " (exit " + std::to_string(WEXITSTATUS(status)) +
               "); set SGEMM_REGION_PROBE_BIN to a copy that user can reach";
  run.ran = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  return run;
}

TEST(RegionQuotaAttack, RegionsCountAgainstTheClientAndNeedTheMultiplyRight) {
  const std::string dir = testing::make_temp_dir();
  const std::string file = dir + "/tokens.json";
  std::ofstream(file) << R"({"clients": [
      {"name": "small", "token": "small-token-0123456789abcdef", "max_region_bytes": 131072},
      {"name": "viewer", "token": "viewer-token-0123456789abcdef", "multiply": false}]})";
  ServerProcess server({"--auth-tokens", file});
  ASSERT_TRUE(server.running()) << server.log();
  ClientOptions so, vo;
  so.token = "small-token-0123456789abcdef";
  vo.token = "viewer-token-0123456789abcdef";
  auto small = Client::connect(server.unix_address(), so);
  auto viewer = Client::connect(server.unix_address(), vo);
  expect_server_serves(server, "before the region quotas", so.token);  // one-time costs paid before the baseline
  const int64_t rss_start = testing::rss_bytes(server.pid());
  auto normal = Client::connect(server.tcp_address(), so);
  testing::NormalTrafficThread traffic(*normal);  // beside the registrations and refusals
  auto denied = viewer->create_region(4096);
  EXPECT_EQ(denied.status().code(), StatusCode::kPermissionDenied) << denied.status().to_string();
  EXPECT_NE(denied.status().message().find("multiply: false"), std::string::npos) << denied.status().to_string();
  auto first = small->create_region(65536);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  auto second = small->create_region(65536);
  ASSERT_TRUE(second.ok()) << second.status().to_string();
  auto third = small->create_region(4096);  // over 128 KiB together
  EXPECT_EQ(third.status().code(), StatusCode::kPermissionDenied) << third.status().to_string();
  EXPECT_NE(third.status().message().find("max_region_bytes"), std::string::npos) << third.status().to_string();
  ASSERT_TRUE((*first)->unregister().ok());  // its bytes come back to the client
  auto again = small->create_region(65536);
  EXPECT_TRUE(again.ok()) << again.status().to_string();
  testing::expect_traffic_served(traffic.stop(), "beside the region quotas");
  expect_server_serves(server, "after the region quotas", so.token);
  ASSERT_TRUE((*second)->unregister().ok());
  if (again.ok()) {
    ASSERT_TRUE((*again)->unregister().ok());
  }
  testing::expect_rss_back(server.pid(), rss_start, "after the region quotas");
}

// Without tokens the Unix user is the account: its regions on every
// connection count against --region-bytes-per-user, so one local user cannot
// take the whole --region-bytes from the others. A second user (uid 65534,
// e2e-region-probe, when the test runs as root) still registers within its own share.
TEST(RegionQuotaAttack, WithoutTokensEachUnixUserHasItsShareOfTheRegionBudget) {
  ServerProcess server({"--region-bytes", std::to_string(1 << 20), "--region-bytes-per-user", "131072"});
  ASSERT_TRUE(server.running()) << server.log();
  auto one = Client::connect(server.unix_address());
  auto other_connection = Client::connect(server.unix_address());
  expect_server_serves(server, "before the Unix users' region shares");  // one-time costs paid before the baseline
  const int64_t rss_start = testing::rss_bytes(server.pid());
  auto normal = Client::connect(server.tcp_address());
  testing::NormalTrafficThread traffic(*normal);  // beside the registrations and refusals
  auto first = one->create_region(65536);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  auto second = other_connection->create_region(65536);
  ASSERT_TRUE(second.ok()) << second.status().to_string();
  auto third = one->create_region(4096);  // over 128 KiB, both connections together
  ASSERT_EQ(third.status().code(), StatusCode::kResourceExhausted) << third.status().to_string();
  const std::string user = "Unix user " + std::to_string(geteuid());
  EXPECT_NE(third.status().message().find(user), std::string::npos) << third.status().to_string();
  EXPECT_NE(third.status().message().find("--region-bytes-per-user"), std::string::npos) << third.status().to_string();
  std::printf("[ info ] a third region of the same user: %s\n", third.status().message().c_str());
  if (geteuid() == 0) {
    const ProbeRun probe = run_probe_as_nobody(server, {server.unix_address(), "--register", "65536", "131072"});
    if (probe.skip.empty()) {
      ASSERT_TRUE(probe.ran) << "the probe failed: " << probe.said;
      EXPECT_NE(probe.said.find("register 65536 0 "), std::string::npos)
          << "uid 65534 was refused its own share: " << probe.said;
      const std::string over = "register 131072 " + std::to_string(int(StatusCode::kResourceExhausted)) + " ";
      EXPECT_NE(probe.said.find(over), std::string::npos) << "uid 65534 got past its share: " << probe.said;
      EXPECT_NE(probe.said.find("Unix user 65534"), std::string::npos) << probe.said;
      std::printf("[ info ] uid 65534 beside it:\n%s", probe.said.c_str());
    } else {
      std::printf("[ skip ] the second user's share: %s\n", probe.skip.c_str());
    }
  } else {
    std::printf(
        "[ skip ] the second user's share needs root to run uid 65534; RegionRegistry."
        "WithoutTokensAUnixUsersRegionBytesAreCapped checks it with injected uids\n");
  }
  ASSERT_TRUE((*first)->unregister().ok());  // its bytes come back to the user
  auto again = other_connection->create_region(65536);
  EXPECT_TRUE(again.ok()) << again.status().to_string();
  testing::expect_traffic_served(traffic.stop(), "beside the Unix users' region shares");
  expect_server_serves(server, "after the Unix users' region shares");
  ASSERT_TRUE((*second)->unregister().ok());
  if (again.ok()) {
    ASSERT_TRUE((*again)->unregister().ok());
  }
  testing::expect_rss_back(server.pid(), rss_start, "after the Unix users' region shares");
}

// Without --auth-tokens, a region belongs to the Unix user that registered
// it: another local user who may open the object (mode 0666), and so passes
// the file-rights check, can neither name it in a Multiply or a PutMatrix,
// nor see it listed, nor unregister it. The other user is uid 65534, running
// e2e-region-probe; the owner (this test's uid) still multiplies from it.
TEST_F(CallerAttacks, AnotherUnixUserCannotUseSeeOrUnregisterARegion) {
  if (geteuid() != 0)
    GTEST_SKIP() << "needs root to run a second Unix user (uid 65534); the rule itself is unit-tested "
                    "(RegionRegistry.WithoutTokensARegionIsItsUnixUsers)";
  constexpr int kN = 16;
  OwnedRegion region(server_->unix_address(), 2 * kN * kN * 4, 0666);
  const uint64_t seed = fresh_seed();
  std::vector<float> a(kN * kN), b(kN * kN);
  fill_random(a, seed);
  fill_random(b, seed + 1);
  std::memcpy(region.data(), a.data(), a.size() * 4);
  std::memcpy(static_cast<char*>(region.data()) + a.size() * 4, b.data(), b.size() * 4);

  const ProbeRun probe = run_probe_as_nobody(*server_, {server_->unix_address(), region.name()});
  if (!probe.skip.empty()) GTEST_SKIP() << probe.skip;
  ASSERT_TRUE(probe.ran) << "the probe failed: " << probe.said;
  const std::string& said = probe.said;
  const auto line = [&](const std::string& what) {  // the probe's line for `what`
    std::istringstream lines(said);
    for (std::string l; std::getline(lines, l);)
      if (l.rfind(what + " ", 0) == 0) return l;
    return std::string();
  };
  EXPECT_EQ(line("list"), "list 0 0 0") << "another user sees the region: " << said;
  const std::string denied = " " + std::to_string(int(StatusCode::kPermissionDenied)) + " ";
  for (const char* what : {"multiply", "put", "unregister"}) {
    const std::string l = line(what);
    EXPECT_EQ(l.rfind(what + denied, 0), 0u) << what << " by another user was not refused: " << said;
    EXPECT_NE(l.find("belongs to Unix user 0"), std::string::npos) << l;
  }
  std::printf("[ info ] uid 65534 on the owner's region: %s\n", line("multiply").c_str());

  // The owner, on another connection of its own, still multiplies from it.
  auto owner = Client::connect(server_->unix_address());
  const GemmShape s{kN, kN, kN};
  auto res = owner->multiply_regions(s, RegionMatrix{&region, 0, 0}, RegionMatrix{&region, kN * kN * 4, 0},
                                     std::nullopt, std::nullopt, {});
  ASSERT_TRUE(res.ok()) << res.status().to_string();
  auto v =
      verify_gemm(kN, kN, kN, 1.0f, a.data(), b.data(), 0.0f, nullptr, res->c.data(), rows_to_verify(kN, kN, kN, seed));
  EXPECT_TRUE(v.passed(kSgemmTolerance)) << "max rel error " << v.max_rel_error;
  expect_server_serves(*server_, "after another user tried a region");
}

// Reflection streams take a thread each and need no token: off unless --reflection.
// A reflection call, as a generic unary call on a completion queue (its
// status is written on this thread): UNIMPLEMENTED when reflection is off.
grpc::Status call_reflection(const std::string& address) {
  grpc::GenericStub stub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::Slice empty("");  // an empty ServerReflectionRequest
  grpc::ByteBuffer request(&empty, 1), response;
  grpc::CompletionQueue cq;
  auto call =
      stub.PrepareUnaryCall(&ctx, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", request, &cq);
  call->StartCall();
  grpc::Status status;
  call->Finish(&response, &status, reinterpret_cast<void*>(1));
  void* tag = nullptr;
  bool ok = false;
  EXPECT_TRUE(cq.Next(&tag, &ok));
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  return status;
}

TEST_F(CallerAttacks, ReflectionIsOffUnlessAskedFor) {
  const grpc::Status off = call_reflection(server_->tcp_address());
  EXPECT_EQ(off.error_code(), grpc::StatusCode::UNIMPLEMENTED) << off.error_message();
  ServerProcess with({"--reflection"});
  ASSERT_TRUE(with.running()) << with.log();
  const grpc::Status on = call_reflection(with.tcp_address());
  EXPECT_NE(on.error_code(), grpc::StatusCode::UNIMPLEMENTED) << on.error_message();
}

int thread_count(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  return -1;
}

// Reflection streams, once asked for, took an OS thread each (2,000 streams:
// 2,024 threads). The transport guard counts them as any stream: a
// connection that opens 1,000 is closed past twice
// --max-streams-per-connection, the server's threads stay bounded, a normal
// request is served meanwhile, and the memory comes back.
TEST(ReflectionAttack, AThousandReflectionStreamsOnOneConnectionAreClosed) {
  ServerProcess server({"--reflection", "--max-streams-per-connection", "100"});
  ASSERT_TRUE(server.running()) << server.log();
  expect_server_serves(server, "before the reflection streams");
  const int64_t rss_start = testing::rss_bytes(server.pid());
  const int threads_start = thread_count(server.pid());
  auto normal = Client::connect(server.tcp_address());
  testing::NormalTrafficThread traffic(*normal);
  testing::RawH2Client flood;
  ASSERT_TRUE(flood.connect(server.port(), "127.0.0.2"));
  (void)flood.open_streams("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", 1000, false);
  EXPECT_TRUE(flood.wait_closed(20000)) << "a connection holding 1,000 reflection streams was not closed";
  const int threads_peak = thread_count(server.pid());
  testing::expect_traffic_served(traffic.stop(), "beside 1,000 reflection streams");
  EXPECT_TRUE(server.log_has("past 200 (twice --max-streams-per-connection")) << server.log().substr(0, 4000);
  // gRPC's sync server keeps a pool of threads: bounded well below one a stream.
  EXPECT_LT(threads_peak, threads_start + 300) << threads_start << " threads before";
  std::printf("[ info ] 1,000 reflection streams on one connection: %d threads (%d before)\n", threads_peak,
              threads_start);
  flood.close_now();
  expect_server_serves(server, "after the reflection streams");
  testing::expect_rss_back(server.pid(), rss_start, "after the reflection streams");
}

// Each reflection stream holds a thread: --reflection-streams bounds them.
// With that many held open, the next call is refused RESOURCE_EXHAUSTED (the
// server stays up and serves); once they end, reflection serves again.
TEST(ReflectionAttack, StreamsPastTheBoundAreRefused) {
  ServerProcess server({"--reflection", "--reflection-streams", "2"});
  ASSERT_TRUE(server.running()) << server.log();
  testing::RawH2Client holder;
  ASSERT_TRUE(holder.connect(server.port(), "127.0.0.2"));
  ASSERT_TRUE(holder.open_streams("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", 2, false));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  grpc::Status third;
  do {  // until both held streams have their threads
    third = call_reflection(server.tcp_address());
  } while (third.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED && std::chrono::steady_clock::now() < deadline);
  EXPECT_EQ(third.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << third.error_message();
  expect_server_serves(server, "beside two held reflection streams");
  holder.close_now();
  grpc::Status again;
  do {
    again = call_reflection(server.tcp_address());
  } while (!again.ok() && std::chrono::steady_clock::now() < deadline);
  EXPECT_TRUE(again.ok()) << again.error_code() << " " << again.error_message();
}

// One client used to fill --max-open-streams with silent streams (and
// PutMatrix streams were outside it): every other caller got UNAVAILABLE.
// With tokens each client holds at most its share of the open streams.
TEST(StreamShareAttack, OneClientCannotTakeEveryStream) {
  const std::string dir = testing::make_temp_dir();
  const std::string file = dir + "/tokens.json";
  std::ofstream(file) << R"({"clients": [{"name": "hog", "token": "hog-token-0123456789abcdef00"},
                                         {"name": "fair", "token": "fair-token-0123456789abcdef0"}]})";
  ServerProcess server({"--auth-tokens", file, "--max-open-streams", "40"});  // a share of 20 each
  ASSERT_TRUE(server.running()) << server.log();
  ClientOptions fo;
  fo.token = "fair-token-0123456789abcdef0";
  auto fair = Client::connect(server.tcp_address(), fo);
  expect_server_serves(server, "before the hog's streams", fo.token);
  const int64_t rss_start = testing::rss_bytes(server.pid());
  auto stub = v1::Sgemm::NewStub(grpc::CreateChannel(server.tcp_address(), grpc::InsecureChannelCredentials()));
  struct Held {
    grpc::ClientContext ctx;
    std::unique_ptr<grpc::ClientReaderWriter<v1::MultiplyRequest, v1::MultiplyResponse>> s;
  };
  std::vector<std::unique_ptr<Held>> held;
  for (int i = 0; i < 20; ++i) {
    auto h = std::make_unique<Held>();
    h->ctx.AddMetadata("authorization", "Bearer hog-token-0123456789abcdef00");
    h->s = stub->Multiply(&h->ctx);
    held.push_back(std::move(h));
  }
  auto seen = testing::info_when(*fair, [](const ServerInfo& i) { return i.open_streams >= 20; });
  ASSERT_GE(seen.open_streams, 20);
  // The hog's 21st stream, and a put, are refused, again and again, while the
  // other client's normal requests run; its streams so far stay. They go on a
  // connection of their own: one refused too often is closed, which must not
  // end the held streams.
  grpc::ChannelArguments own;
  own.SetInt("sgemm.test.channel", 1);
  auto over_stub =
      v1::Sgemm::NewStub(grpc::CreateCustomChannel(server.tcp_address(), grpc::InsecureChannelCredentials(), own));
  auto normal = Client::connect(server.tcp_address(), fo);
  testing::attack_beside_traffic(
      *normal,
      [&] {
        grpc::ClientContext extra;
        extra.AddMetadata("authorization", "Bearer hog-token-0123456789abcdef00");
        auto s = over_stub->Multiply(&extra);
        v1::MultiplyResponse resp;
        while (s->Read(&resp)) {
        }
        const grpc::Status st = s->Finish();
        EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << st.error_message();
        EXPECT_NE(st.error_message().find("max_open_streams"), std::string::npos) << st.error_message();
        grpc::ClientContext put_ctx;
        put_ctx.AddMetadata("authorization", "Bearer hog-token-0123456789abcdef00");
        v1::PutMatrixResponse put_resp;
        auto w = over_stub->PutMatrix(&put_ctx, &put_resp);
        w->WritesDone();
        const grpc::Status put_st = w->Finish();
        EXPECT_EQ(put_st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << put_st.error_message();
      },
      "while another client holds its whole share of streams");
  for (auto& h : held) h->ctx.TryCancel();
  testing::expect_released(*fair, "after the hog's streams were cancelled");
  testing::expect_rss_back(server.pid(), rss_start, "after the hog's streams");
}

}  // namespace
}  // namespace sgemm
