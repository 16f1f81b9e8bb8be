// End to end over shared memory: the real server on a Unix socket in a temp
// dir, the real client library's region API (and the CLI), every result
// checked against the fp64 reference. docs/transport.md says what is asserted:
// rights, the TCP refusal, unregistering while a request runs (it waits), a
// dead client's registrations dropped.
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <future>
#include <random>
#include <thread>

#include "client/sgemm_client.h"
#include "common/reference_gemm.h"
#include "sgemm/v1/sgemm.grpc.pb.h"
#include "tests/e2e/in_process_server.h"

namespace sgemm {
namespace {

namespace v1 = ::sgemm::v1;

uint64_t fresh_seed() { return (uint64_t(std::random_device{}()) << 32) | std::random_device{}(); }

class ShmE2E : public testing::SuiteServer<ShmE2E> {
 protected:
  static std::unique_ptr<v1::Sgemm::Stub> raw_stub(const std::string& target) {
    return v1::Sgemm::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  }
  static std::vector<v1::RegionInfo> list(v1::Sgemm::Stub& stub) {
    grpc::ClientContext ctx;
    v1::ListRegionsRequest req;
    v1::ListRegionsResponse resp;
    EXPECT_TRUE(stub.ListRegions(&ctx, req, &resp).ok());
    return {resp.regions().begin(), resp.regions().end()};
  }
};

// A strided matrix in a region: rows x cols with leading dimension ld, at
// `offset`; the padding between rows holds a sentinel that must survive.
struct Placed {
  RegionMatrix where;
  int64_t rows, cols;
  float* at(int64_t i, int64_t j) const {
    return reinterpret_cast<float*>(static_cast<char*>(where.region->data()) + where.offset) + i * where.ld + j;
  }
  void put(const std::vector<float>& dense) const {
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < where.ld; ++j) *at(i, j) = j < cols ? dense[std::size_t(i * cols + j)] : kSentinel;
  }
  std::vector<float> get() const {
    std::vector<float> d(std::size_t(rows * cols));
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) d[std::size_t(i * cols + j)] = *at(i, j);
    return d;
  }
  bool padding_intact() const {
    for (int64_t i = 0; i + 1 < rows; ++i)
      for (int64_t j = cols; j < where.ld; ++j)
        if (*at(i, j) != kSentinel) return false;
    return true;
  }
  static constexpr float kSentinel = -12345.0f;
};

void expect_matches(const GemmShape& s, float alpha, const std::vector<float>& a, const std::vector<float>& b,
                    float beta, const std::vector<float>* c0, const std::vector<float>& c, uint64_t seed) {
  const auto rows = rows_to_verify(s.m, s.n, s.k, seed);
  auto v = verify_gemm(s.m, s.n, s.k, alpha, a.data(), b.data(), beta, c0 ? c0->data() : nullptr, c.data(), rows);
  EXPECT_TRUE(v.passed(kSgemmTolerance)) << "max rel error " << v.max_rel_error << " at (" << v.worst_row << ", "
                                         << v.worst_col << ")";
}

// On the stream and in one MultiplyUnary message each way (the header names the regions on both).
TEST_F(ShmE2E, OddShapesLeadingDimensionsAndCInPlace) {
  for (const MultiplyRpc rpc : {MultiplyRpc::kStream, MultiplyRpc::kUnary, MultiplyRpc::kRing}) {
    ClientOptions co;
    co.rpc = rpc;
    auto client = Client::connect(server_->unix_address(), co);
    auto t = client->transport();
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    EXPECT_EQ(*t, Transport::kShm);
    for (GemmShape s : {GemmShape{1, 1, 1}, GemmShape{17, 33, 65}, GemmShape{513, 1025, 257}, GemmShape{1000, 1, 1000},
                        GemmShape{1, 1000, 3}, GemmShape{128, 64, 256}}) {
      const uint64_t seed = fresh_seed();
      SCOPED_TRACE(std::string(multiply_rpc_name(rpc)) + " shape " + std::to_string(s.m) + "x" + std::to_string(s.n) +
                   "x" + std::to_string(s.k) + " seed " + std::to_string(seed));
      const int64_t lda = s.k + 3, ldb = s.n + 5, ldc = s.n + 7;  // wider than the matrices
      const int64_t a_off = 256, b_off = a_off + 4 * s.m * lda + 64, c_off = b_off + 4 * s.k * ldb + 4;
      auto region = client->create_region(c_off + 4 * s.m * ldc);
      ASSERT_TRUE(region.ok()) << region.status().to_string();
      const Region* r = region->get();
      Placed pa{{r, a_off, lda}, s.m, s.k}, pb{{r, b_off, ldb}, s.k, s.n}, pc{{r, c_off, ldc}, s.m, s.n};
      std::vector<float> a(std::size_t(s.m * s.k)), b(std::size_t(s.k * s.n)), c0(std::size_t(s.m * s.n));
      fill_random(a, seed);
      fill_random(b, seed + 1);
      fill_random(c0, seed + 2);
      pa.put(a);
      pb.put(b);
      pc.put(c0);
      MultiplyOptions opt;
      opt.alpha = 1.5f;
      opt.beta = -0.75f;
      auto res = client->multiply_regions(s, pa.where, pb.where, pc.where, pc.where, opt);  // C in place
      ASSERT_TRUE(res.ok()) << res.status().to_string();
      EXPECT_EQ(res->rpc, rpc);
      EXPECT_TRUE(res->c.empty());
      EXPECT_EQ(res->bytes_received, 0);
      EXPECT_EQ(res->bytes_sent, 0);
      EXPECT_FALSE(res->summary.devices.empty()) << "the summary still comes back";
      expect_matches(s, opt.alpha, a, b, opt.beta, &c0, pc.get(), seed);
      EXPECT_TRUE(pc.padding_intact()) << "C's padding between rows was written";
      EXPECT_EQ(pa.get(), a) << "A changed";
    }
  }
}

TEST_F(ShmE2E, OutputIntoAnotherRegionOrBackAsChunks) {
  auto client = Client::connect(server_->unix_address());
  const GemmShape s{129, 77, 301};
  const uint64_t seed = fresh_seed();
  std::vector<float> a(std::size_t(s.m * s.k)), b(std::size_t(s.k * s.n)), c0(std::size_t(s.m * s.n));
  fill_random(a, seed);
  fill_random(b, seed + 1);
  fill_random(c0, seed + 2);
  auto in = client->create_region(4 * (s.m * s.k + s.k * s.n + s.m * s.n));
  auto out = client->create_region(4 * s.m * s.n + 4096);
  ASSERT_TRUE(in.ok() && out.ok());
  const Region* r = in->get();
  const RegionMatrix ra{r, 0, 0}, rb{r, 4 * s.m * s.k, 0}, rc{r, 4 * (s.m * s.k + s.k * s.n), 0};
  std::memcpy(r->floats(), a.data(), a.size() * 4);
  std::memcpy(r->floats() + s.m * s.k, b.data(), b.size() * 4);
  std::memcpy(r->floats() + s.m * s.k + s.k * s.n, c0.data(), c0.size() * 4);
  MultiplyOptions opt;
  opt.alpha = 0.5f;
  opt.beta = 2.0f;
  // C from one region into another: C's region is left as it was.
  const RegionMatrix ro{out->get(), 4096, 0};
  auto res = client->multiply_regions(s, ra, rb, rc, ro, opt);
  ASSERT_TRUE(res.ok()) << res.status().to_string();
  std::vector<float> got((*out)->floats() + 1024, (*out)->floats() + 1024 + s.m * s.n);
  expect_matches(s, opt.alpha, a, b, opt.beta, &c0, got, seed);
  EXPECT_EQ(0, std::memcmp(r->floats() + s.m * s.k + s.k * s.n, c0.data(), c0.size() * 4));
  EXPECT_EQ(res->rpc, MultiplyRpc::kUnary);  // the client's choice: the header is all there is to send
  // No output region: C comes back in the answer (it fits MultiplyUnary's limit).
  res = client->multiply_regions(s, ra, rb, rc, std::nullopt, opt);
  ASSERT_TRUE(res.ok()) << res.status().to_string();
  EXPECT_EQ(res->rpc, MultiplyRpc::kUnary);
  EXPECT_EQ(res->bytes_received, s.m * s.n * 4);
  expect_matches(s, opt.alpha, a, b, opt.beta, &c0, res->c, seed);
  // Without C.
  res = client->multiply_regions(s, ra, rb, std::nullopt, ro, {});
  ASSERT_TRUE(res.ok()) << res.status().to_string();
  got.assign((*out)->floats() + 1024, (*out)->floats() + 1024 + s.m * s.n);
  expect_matches(s, 1.0f, a, b, 0.0f, nullptr, got, seed);
  // The plain-pointer API picks shm on the Unix socket and gives the same answers.
  auto plain = client->multiply(s, a.data(), b.data(), c0.data(), opt);
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  expect_matches(s, opt.alpha, a, b, opt.beta, &c0, plain->c, seed);
}

TEST_F(ShmE2E, BadRegionReferencesAreInvalidArgumentOrNotFound) {
  auto client = Client::connect(server_->unix_address());
  auto region = client->create_region(4096);
  ASSERT_TRUE(region.ok());
  const Region* r = region->get();
  auto res =
      client->multiply_regions({16, 16, 16}, {r, 0, 0}, {r, 1024, 0}, std::nullopt, RegionMatrix{r, 2048, 0}, {});
  ASSERT_TRUE(res.ok()) << res.status().to_string();
  res = client->multiply_regions({16, 16, 17}, {r, 0, 0}, {r, 2048, 0}, std::nullopt, RegionMatrix{r, 3000, 0}, {});
  EXPECT_EQ(res.status().code(), StatusCode::kInvalidArgument);  // C overruns the region
  EXPECT_NE(res.status().message().find("out_region"), std::string::npos) << res.status().message();
  res = client->multiply_regions({16, 16, 16}, {r, 0, 8}, {r, 1024, 0}, std::nullopt, std::nullopt, {});
  EXPECT_EQ(res.status().code(), StatusCode::kInvalidArgument);  // lda < k
  res = client->multiply_regions({16, 16, 16}, {r, 0, 0}, {r, 0, 0}, std::nullopt, RegionMatrix{r, 512, 0}, {});
  EXPECT_EQ(res.status().code(), StatusCode::kInvalidArgument);  // output overlaps A
}

TEST_F(ShmE2E, RegionsOverTcpAreRefused) {
  // Register on the Unix socket, then name the region from a TCP connection.
  auto local = Client::connect(server_->unix_address());
  auto region = local->create_region(4096);
  ASSERT_TRUE(region.ok());
  ClientOptions o;
  o.transport = Transport::kGrpc;
  auto remote = Client::connect(server_->tcp_address(), o);
  const Region* r = region->get();
  auto res = remote->multiply_regions({8, 8, 8}, {r, 0, 0}, {r, 256, 0}, std::nullopt, RegionMatrix{r, 512, 0}, {});
  EXPECT_EQ(res.status().code(), StatusCode::kFailedPrecondition) << res.status().to_string();
  EXPECT_NE(res.status().message().find("Unix"), std::string::npos) << res.status().message();
  auto stub = raw_stub(server_->tcp_address());
  grpc::ClientContext ctx;
  v1::RegisterRegionRequest req;
  req.set_name("tcp");
  req.set_shm_name("/whatever");
  v1::RegisterRegionResponse resp;
  const grpc::Status st = stub->RegisterRegion(&ctx, req, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << st.error_message();
  auto info = remote->info();
  ASSERT_TRUE(info.ok());
  EXPECT_FALSE(info->regions_available);
  EXPECT_TRUE(local->info().value().regions_available);
  // transport shm on TCP says what it needs.
  o.transport = Transport::kShm;
  auto shm_over_tcp = Client::connect(server_->tcp_address(), o)->transport();
  EXPECT_EQ(shm_over_tcp.status().code(), StatusCode::kFailedPrecondition);
}

// A shared-memory object made by hand, so its owner and mode can be set.
class HandMadeShm {
 public:
  explicit HandMadeShm(int64_t bytes) {
    name_ = "/sgemm-e2e-" + std::to_string(getpid()) + "-" + std::to_string(fresh_seed() % 1000000);
    fd_ = shm_open(name_.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    EXPECT_GE(fd_, 0);
    EXPECT_EQ(ftruncate(fd_, bytes), 0);
  }
  ~HandMadeShm() {
    close(fd_);
    shm_unlink(name_.c_str());
  }
  int fd() const { return fd_; }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  int fd_ = -1;
};

grpc::Status register_raw(v1::Sgemm::Stub& stub, const std::string& name, const std::string& shm) {
  grpc::ClientContext ctx;
  v1::RegisterRegionRequest req;
  req.set_name(name);
  req.set_shm_name(shm);
  v1::RegisterRegionResponse resp;
  return stub.RegisterRegion(&ctx, req, &resp);
}

TEST_F(ShmE2E, PeerWithoutTheRightsIsRefused) {
  auto stub = raw_stub(server_->unix_address());
  HandMadeShm obj(1 << 16);
  ASSERT_EQ(fchmod(obj.fd(), 0400), 0);  // ours, but read-only
  grpc::Status st = register_raw(*stub, "ro", obj.name());
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << st.error_message();
  if (getuid() == 0) {
    ASSERT_EQ(fchmod(obj.fd(), 0600), 0);
    ASSERT_EQ(fchown(obj.fd(), 65534, 65534), 0);  // someone else's: root gets no exemption
    st = register_raw(*stub, "theirs", obj.name());
    EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << st.error_message();
    EXPECT_NE(st.error_message().find("65534"), std::string::npos) << st.error_message();
    ASSERT_EQ(fchmod(obj.fd(), 0606), 0);  // unless its mode lets others read and write
    st = register_raw(*stub, "shared", obj.name());
    EXPECT_TRUE(st.ok()) << st.error_message();
  } else {
    std::fprintf(stderr, "(not root: the other-owner case is covered by the unit tests)\n");
  }
  ASSERT_EQ(fchmod(obj.fd(), 0600), 0);
  ASSERT_EQ(fchown(obj.fd(), getuid(), getgid()), 0);
  st = register_raw(*stub, "mine", obj.name());
  EXPECT_TRUE(st.ok()) << st.error_message();
  st = register_raw(*stub, "x", "/sgemm-does-not-exist");
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(ShmE2E, UnregisterDuringARequestWaitsForIt) {
  auto client = Client::connect(server_->unix_address());
  auto stub = raw_stub(server_->unix_address());
  // Long enough to be seen holding the region: seconds on either backend. The
  // server's own backend decides (with --backend auto and no GPU it is cpu,
  // whatever SGEMM_E2E_BACKEND says: 8192^3 on a 2-core CPU took 136 s under ThreadSanitizer).
  auto served_by = client->info();
  ASSERT_TRUE(served_by.ok()) << served_by.status().to_string();
  const int64_t n = served_by->backend == "cpu" ? 1536 : 8192;
  const GemmShape s{n, n, n};
  auto region = client->create_region(3 * 4 * n * n);
  ASSERT_TRUE(region.ok()) << region.status().to_string();
  const Region* r = region->get();
  const uint64_t seed = fresh_seed();
  std::vector<float> a(std::size_t(n * n)), b(std::size_t(n * n));
  fill_random(a, seed);
  fill_random(b, seed + 1);
  std::memcpy(r->floats(), a.data(), a.size() * 4);
  std::memcpy(r->floats() + n * n, b.data(), b.size() * 4);
  const RegionMatrix ra{r, 0, 0}, rb{r, 4 * n * n, 0}, rc{r, 8 * n * n, 0};
  bool observed = false;
  for (int attempt = 0; attempt < 5 && !observed; ++attempt) {
    auto running =
        std::async(std::launch::async, [&] { return client->multiply_regions(s, ra, rb, std::nullopt, rc, {}); });
    // Wait until the server reports the request holding the region.
    for (int i = 0; i < 20000 && !observed; ++i) {
      for (const auto& info : list(*stub))
        if (info.name() == r->name() && info.requests_using() > 0) observed = true;
      if (!observed && running.wait_for(std::chrono::milliseconds(0)) == std::future_status::ready) break;
    }
    if (!observed) {
      ASSERT_TRUE(running.get().ok());
      continue;  // the product finished before we looked: again
    }
    auto waited = (*region)->unregister();
    ASSERT_TRUE(waited.ok()) << waited.status().to_string();
    EXPECT_GE(*waited, 1) << "UnregisterRegion answered without waiting for the request using the region";
    // The request was not disturbed.
    auto res = running.get();
    ASSERT_TRUE(res.ok()) << res.status().to_string();
    std::vector<float> c(r->floats() + 2 * n * n, r->floats() + 3 * n * n);
    expect_matches(s, 1.0f, a, b, 0.0f, nullptr, c, seed);
  }
  ASSERT_TRUE(observed) << "never saw the request holding the region";
  // The name is gone: a new request naming it is NOT_FOUND.
  auto after = client->multiply_regions({4, 4, 4}, ra, rb, std::nullopt, rc, {});
  EXPECT_EQ(after.status().code(), StatusCode::kNotFound) << after.status().to_string();
  auto info = client->info();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->region_bytes_in_use, 0);
}

TEST_F(ShmE2E, ADeadClientsRegistrationsAreDropped) {
  // The CLI registers a scratch region and multiplies in a loop; kill -9 it.
  const std::string sock = server_->unix_address().substr(5);
  const std::string out = server_->dir() + "/dead-client.log", bin = testing::client_bin();
  pid_t pid = fork();  // only async-signal-safe calls in the child until exec
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const int fd = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    execl(bin.c_str(), "sgemm-client", "submit", "--unix", sock.c_str(), "--transport", "shm", "--size", "256",
          "--repeat", "100000", static_cast<char*>(nullptr));
    _exit(127);
  }
  auto stub = raw_stub(server_->unix_address());
  std::string theirs;
  for (int i = 0; i < 3000 && theirs.empty(); ++i) {
    for (const auto& info : list(*stub))
      if (!info.this_connection()) theirs = info.name();
    if (theirs.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_FALSE(theirs.empty()) << "the CLI never registered a region";
  bool gone = false;
  for (int i = 0; i < 3000 && !gone; ++i) {
    gone = true;
    for (const auto& info : list(*stub))
      if (info.name() == theirs) gone = false;
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(gone) << "region " << theirs << " outlived its client";
  auto client = Client::connect(server_->unix_address());
  int64_t in_use = -1;
  for (int i = 0; i < 3000 && in_use != 0; ++i) {  // the last request of the dead client may still be finishing
    in_use = client->info().value().region_bytes_in_use;
    if (in_use) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(in_use, 0);
  // The client unlinks its object's name once registered; if it was killed
  // between the two, remove the name as an operator would.
  std::error_code ec;
  std::filesystem::remove("/dev/shm" + theirs, ec);
}

TEST_F(ShmE2E, CliSubmitOverShmVerifiesAndFallsBack) {
  const std::string sock = server_->unix_address().substr(5);
  const std::string cli = testing::client_bin();
  auto r = testing::run_command(cli + " submit --unix " + sock +
                                " --transport shm --m 513 --n 257 --k 129 --beta 0.5 --verify --repeat 2 2>&1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("transport: shm"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("PASS"), std::string::npos) << r.output;
  // auto: the Unix socket when it answers, else --server over gRPC.
  r = testing::run_command(cli + " submit --server unix:" + sock + " --size 65 --verify 2>&1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("transport: shm"), std::string::npos) << r.output;
  r = testing::run_command(cli + " submit --unix " + server_->dir() + "/nothing.sock --server " +
                           server_->tcp_address() + " --size 65 --verify 2>&1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("transport: grpc"), std::string::npos) << r.output;
  // Files in and out work over shm too.
  const std::string d = server_->dir();
  r = testing::run_command(cli + " submit --unix " + sock + " --transport shm --m 31 --n 17 --k 9 --seed 7 --out " + d +
                           "/c_shm.npy >/dev/null 2>&1 && " + cli + " submit --server " + server_->tcp_address() +
                           " --transport grpc --m 31 --n 17 --k 9 --seed 7 --out " + d +
                           "/c_grpc.npy >/dev/null 2>&1 && cmp " + d + "/c_shm.npy " + d + "/c_grpc.npy && echo SAME");
  EXPECT_NE(r.output.find("SAME"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace sgemm
