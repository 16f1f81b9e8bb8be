// End to end: callers that attack the transport rather than the requests
// (docs/security.md, "Fair shares of the transport"): silent streams that
// never acknowledge SETTINGS, HTTP/2 rapid reset, descriptor exhaustion,
// shutdown under a large product. Each runs the attack against the real
// server binary while a normal request from another address completes
// correctly (fp64 reference), and checks that the server's memory comes back.
//
// The checks and their bounds are attack_checks.h's.
#include <arpa/inet.h>
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <random>
#include <thread>
#include <vector>

#include "client/sgemm_client.h"
#include "common/reference_gemm.h"
#include "sgemm/v1/sgemm.grpc.pb.h"
#include "tests/e2e/attack_checks.h"
#include "tests/e2e/raw_connections.h"
#include "tests/e2e/raw_h2_client.h"
#include "tests/e2e/server_process.h"
#include "tests/e2e/trust_helpers.h"

namespace sgemm {
namespace {

namespace v1 = ::sgemm::v1;
using testing::RawH2Client;
using testing::ServerProcess;
using Clock = std::chrono::steady_clock;

using testing::expect_served;
using testing::kNormalRequestBoundMs;

int port_of(const ServerProcess& server) { return server.port(); }

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// ---- Stream shares counted by the service ---------------------------------

// The report's attack: 1,250 silent streams (HEADERS, nothing else) from one
// client that never acknowledges SETTINGS, on five connections, filled
// --max-open-streams and every other caller got UNAVAILABLE. Now the
// attacker's address holds its share (a quarter of --max-open-streams) and
// each connection at most --max-streams-per-connection, whatever SETTINGS it
// acknowledged; PutMatrix streams count the same.
TEST(TransportAttacks, SilentStreamsFromOneAddressCannotLockOthersOut) {
  ServerProcess server({"--max-open-streams", "1024", "--max-streams-per-connection", "200"});
  ASSERT_TRUE(server.running()) << server.log();
  expect_served(server, "before the silent streams");  // one-time costs paid before the baseline
  auto watcher = Client::connect(server.tcp_address());
  testing::expect_released(*watcher, "before the silent streams");
  const int64_t rss_start = testing::rss_bytes(server.pid());

  // One connection alone: 300 streams, of which the service admits 200.
  RawH2Client one;
  ASSERT_TRUE(one.connect(port_of(server), "127.0.0.3"));
  ASSERT_TRUE(one.open_streams("/sgemm.v1.Sgemm/Multiply", 300, false));
  auto seen = testing::info_when(*watcher, [](const ServerInfo& i) { return i.open_streams == 200; });
  EXPECT_EQ(seen.open_streams, 200) << "one connection holds more than --max-streams-per-connection";
  EXPECT_TRUE(server.log_has("--max-streams-per-connection 200")) << "the refusal does not name the flag";
  one.close_now();
  testing::expect_released(*watcher, "after the one connection closed");

  // Five connections from one address: 50 PutMatrix streams each, then 200 Multiply.
  std::vector<std::unique_ptr<RawH2Client>> hogs;
  for (int c = 0; c < 5; ++c) {
    hogs.push_back(std::make_unique<RawH2Client>());
    ASSERT_TRUE(hogs.back()->connect(port_of(server), "127.0.0.2"));
    (void)hogs.back()->open_streams("/sgemm.v1.Sgemm/PutMatrix", 50, false);
    (void)hogs.back()->open_streams("/sgemm.v1.Sgemm/Multiply", 200, false);
  }
  seen = testing::info_when(*watcher, [](const ServerInfo& i) { return i.open_streams >= 200; });
  EXPECT_TRUE(server.log_has("--max-streams-per-address 256")) << "the address's share was never reached";
  // The share holds: the address has 256 streams (Multiply and PutMatrix), not 1,250.
  seen = *watcher->info();
  EXPECT_LE(seen.open_streams, 256) << "the address holds more than its share";
  std::printf("[ info ] 1,250 silent streams from one address: %d Multiply streams open\n", seen.open_streams);
  // Another caller is served while the address holds its share.
  for (int i = 0; i < 3; ++i) expect_served(server, "beside 1,250 silent streams");
  hogs.clear();
  testing::expect_released(*watcher, "after the silent streams' connections closed");
  testing::expect_rss_back(server.pid(), rss_start, "after the silent streams");
  testing::expect_clean_exit(server, "after the silent streams");
}

// ---- HTTP/2 rapid reset ------------------------------------------------------

// What a rapid-reset storm did, and what a normal client saw meanwhile.
struct StormFigures {
  int64_t resets = 0;  // HEADERS + RST_STREAM pairs written
  int64_t closed = 0;  // connections the server closed
  double seconds = 0;
  int64_t peak_rss = 0;
  testing::NormalTraffic normal;
};

// HEADERS + RST_STREAM, 64 streams a write, from 127.0.0.2 and 127.0.0.3 (over
// TLS when `tls`), each reconnecting when the server closes it, for 4 s or
// until the server holds 2 GiB more than `rss_start` (an unmitigated storm
// grows it by gigabytes a second: the test must not take the machine down
// with it), while `normal` multiplies one product after another.
StormFigures rapid_reset_storm(const ServerProcess& server, bool tls, Client& normal, int64_t rss_start) {
  std::atomic<bool> stop{false};
  std::atomic<int64_t> resets{0}, closed{0};
  auto storm = [&](const char* source) {
    RawH2Client c;
    while (!stop) {
      if (!c.connected() && !(tls ? c.connect_tls(port_of(server), source) : c.connect(port_of(server), source)))
        continue;
      if (c.open_streams("/sgemm.v1.Sgemm/Multiply", 64, true)) {
        resets += 64;
      } else {
        ++closed;
        c.close_now();
      }
    }
  };
  StormFigures f;
  f.peak_rss = rss_start;
  const auto t0 = Clock::now();
  auto a = std::async(std::launch::async, storm, "127.0.0.2");
  auto b = std::async(std::launch::async, storm, "127.0.0.3");
  testing::NormalTrafficThread traffic(normal);
  while (ms_since(t0) < 4000 && f.peak_rss < rss_start + (int64_t{2} << 30)) {
    f.peak_rss = std::max(f.peak_rss, testing::rss_bytes(server.pid()));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  f.normal = traffic.stop();
  stop = true;
  a.get();
  b.get();
  f.seconds = ms_since(t0) / 1000;
  f.resets = resets;
  f.closed = closed;
  std::printf(
      "[ info ] rapid reset%s: %lld HEADERS + RST_STREAM pairs written, %lld connections closed by the server in "
      "%.1f s; RSS peaked at %.1f MiB (%.1f MiB before)\n",
      tls ? " over TLS" : "", (long long)f.resets, (long long)f.closed, f.seconds, f.peak_rss / 1048576.0,
      rss_start / 1048576.0);
  return f;
}

// HEADERS + RST_STREAM as fast as two connections can send them (gRPC 1.51
// predates the CVE-2023-44487 mitigations): the connections that reset too
// fast are closed, their addresses refused for a while (and their new
// connections closed at their first stream), and a normal request is served
// throughout.
TEST(TransportAttacks, RapidResetConnectionsAreClosed) {
  ServerProcess server;
  ASSERT_TRUE(server.running()) << server.log();
  expect_served(server, "before the rapid reset");
  const int64_t rss_start = testing::rss_bytes(server.pid());
  auto normal = Client::connect(server.tcp_address());
  const StormFigures f = rapid_reset_storm(server, false, *normal, rss_start);
  testing::expect_traffic_served(f.normal, "during the rapid reset");
  EXPECT_GE(f.closed, 2) << "the server never closed a resetting connection";
  EXPECT_TRUE(server.log_has("(rapid reset, --max-resets-per-second)")) << server.log().substr(0, 4000);
  expect_served(server, "after the rapid reset");
  testing::expect_rss_back(server.pid(), rss_start, "after the rapid reset");
}

// The same storm over TLS: the guard cannot read ciphertext at recvmsg, so
// it reads the plaintext where gRPC's TLS makes it (SSL_read), and closes a
// TLS connection that resets streams too fast. A normal TLS client is served
// throughout.
TEST(TransportAttacks, RapidResetOverTlsClosesTheConnection) {
  testing::TestPki pki{testing::make_temp_dir()};
  std::string error;
  ASSERT_TRUE(pki.make_ca("ca", &error) && pki.make_leaf("ca", "server", &error)) << error;
  ServerProcess server({"--tls-cert", pki.path("server.pem"), "--tls-key", pki.path("server.key")});
  ASSERT_TRUE(server.running()) << server.log();
  ClientOptions tls;
  tls.tls.ca_file = pki.path("ca.pem");
  expect_served(server, "before the rapid reset over TLS", tls);  // one-time costs paid before the baseline
  const int64_t rss_start = testing::rss_bytes(server.pid());
  auto normal = Client::connect(server.tcp_address(), tls);
  const StormFigures f = rapid_reset_storm(server, true, *normal, rss_start);
  testing::expect_traffic_served(f.normal, "during the rapid reset over TLS");
  EXPECT_GE(f.closed, 2) << "the server never closed a resetting TLS connection";
  EXPECT_TRUE(server.log_has("(rapid reset, --max-resets-per-second)")) << server.log().substr(0, 4000);
  EXPECT_TRUE(server.log_has_any({"TLS connection from 127.0.0.2 reset", "TLS connection from 127.0.0.3 reset"}))
      << "the close does not name the TLS connection's address: " << server.log().substr(0, 4000);
  expect_served(server, "after the rapid reset over TLS", tls);
  testing::expect_rss_back(server.pid(), rss_start, "after the rapid reset over TLS");
}

// ---- Descriptor exhaustion -------------------------------------------------

int open_descriptors(pid_t pid) {
  int n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd"))
    ++n;
  return n;
}

// The server under an open-files limit of `limit` (soft and hard: the
// server raises its soft limit to the hard one), set by prlimit before the
// server's exec.
std::vector<std::string> open_files_limit(int limit) {
  return {"/usr/bin/prlimit", "--nofile=" + std::to_string(limit) + ":" + std::to_string(limit), "--"};
}

// Waits (polling, up to 20 s) until the server holds at most `fds` descriptors.
bool descriptors_fall_to(pid_t pid, int fds) {
  const auto t0 = Clock::now();
  while (open_descriptors(pid) > fds) {
    if (ms_since(t0) > 20000) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

// gRPC 1.51 stopped accepting on a port for good after one failed accept4
// (EMFILE). Under an open-files limit of 256, 400 silent connections take
// every descriptor the server hands out; the guard closes those past its
// reserve, and once they go a fresh connection is served on the same port.
TEST(TransportAttacks, DescriptorExhaustionDoesNotKillTheListener) {
  ServerProcess server({}, open_files_limit(256));
  ASSERT_TRUE(server.running()) << server.log();
  expect_served(server, "before the descriptor flood");
  // A caller connected before the flood: a new connection past the reserve is
  // closed by design, one already open is served throughout.
  auto normal = Client::connect(server.tcp_address());
  ASSERT_TRUE(normal->info().ok());
  const int fds_start = open_descriptors(server.pid());
  const int64_t rss_start = testing::rss_bytes(server.pid());
  testing::NormalTrafficThread traffic(*normal);
  auto flood = testing::hold_connections(port_of(server), 400);
  std::printf("[ info ] %zu connections held; the server had %d descriptors open before\n", flood.size(), fds_start);
  ASSERT_TRUE(server.log_has("descriptor reserve reached", 20000)) << "the flood never reached the reserve";
  ASSERT_EQ(kill(server.pid(), 0), 0) << "the server process is gone: " << server.log();
  const int fds_flood = open_descriptors(server.pid());
  EXPECT_LE(fds_flood, 256);
  testing::expect_traffic_served(traffic.stop(), "during the descriptor flood, on a connection made before it");
  for (int fd : flood) close(fd);
  // The server sees the held connections end and closes its side.
  const auto t0 = Clock::now();
  EXPECT_TRUE(descriptors_fall_to(server.pid(), fds_start + 8));
  std::printf("[ info ] descriptors: %d during the flood, %d %.1f s after it, %d before\n", fds_flood,
              open_descriptors(server.pid()), ms_since(t0) / 1000, fds_start);
  for (int i = 0; i < 3; ++i) expect_served(server, "on a fresh connection after the descriptor flood");
  testing::expect_rss_back(server.pid(), rss_start, "after the descriptor flood");
}

// Registers shared-memory objects of 4 KiB over one Unix connection until
// the server refuses one; returns the refusal (OK if `most` went through).
grpc::Status register_until_refused(v1::Sgemm::Stub& stub, int most, std::vector<std::string>* names) {
  for (int i = 0; i < most; ++i) {
    const std::string name = "/sgemm-emfile-" + std::to_string(getpid()) + "-" + std::to_string(names->size());
    const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0 || ftruncate(fd, 4096) != 0) return grpc::Status(grpc::StatusCode::INTERNAL, strerror(errno));
    close(fd);
    names->push_back(name);
    grpc::ClientContext ctx;
    v1::RegisterRegionRequest req;
    req.set_name(name);
    req.set_shm_name(name);
    v1::RegisterRegionResponse resp;
    const grpc::Status st = stub.RegisterRegion(&ctx, req, &resp);
    if (!st.ok()) return st;
  }
  return grpc::Status::OK;
}

// Past the reserve: connections fill the server's descriptors up to the
// reserve, and the server's own work (regions registered over the Unix
// socket, each holding its object's descriptor) takes the reserve too, so
// the next accept4 fails with EMFILE. The spare descriptor takes that
// connection off the queue and closes it; once the connections and regions
// go, a normal request on a fresh TCP connection is served (gRPC 1.51 alone
// would never accept on the port again).
TEST(TransportAttacks, AcceptAtEmfileDropsTheConnectionAndTheListenerLives) {
  constexpr int kLimit = 256;  // a reserve of 32; a quarter (64) may be regions
  ServerProcess server({}, open_files_limit(kLimit));
  ASSERT_TRUE(server.running()) << server.log();
  expect_served(server, "before the descriptors ran out");
  const int fds_start = open_descriptors(server.pid());
  const int64_t rss_start = testing::rss_bytes(server.pid());
  auto owner = v1::Sgemm::NewStub(grpc::CreateChannel(server.unix_address(), grpc::InsecureChannelCredentials()));
  std::vector<std::string> names;
  ASSERT_TRUE(register_until_refused(*owner, 1, &names).ok()) << "the Unix connection does not register regions";

  // Connections up to the reserve (those past it are closed at once).
  auto flood = testing::hold_connections(port_of(server), kLimit);
  ASSERT_TRUE(server.log_has("descriptor reserve reached", 20000)) << "the flood never reached the reserve";
  // Regions take the reserve, until the server has no descriptor left.
  const grpc::Status refused = register_until_refused(*owner, kLimit / 4, &names);
  ASSERT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << refused.error_message();
  ASSERT_NE(refused.error_message().find("no descriptor left"), std::string::npos) << refused.error_message();
  const int fds_full = open_descriptors(server.pid());
  EXPECT_GE(fds_full, kLimit - 4) << "the server still had descriptors when a registration met EMFILE";
  // A new connection now meets EMFILE at accept: dropped through the spare.
  // The guard logs one line a second, so connections keep coming until it
  // says so.
  const auto t0 = Clock::now();
  std::vector<int> late;
  while (!server.log_has("out of descriptors", 50) && ms_since(t0) < 20000) {
    auto one = testing::hold_connections(port_of(server), 1);
    late.insert(late.end(), one.begin(), one.end());
  }
  ASSERT_TRUE(server.log_has("out of descriptors", 0)) << "accept4 never met EMFILE: " << server.log();
  ASSERT_EQ(kill(server.pid(), 0), 0) << "the server process is gone: " << server.log();
  std::printf(
      "[ info ] %zu connections and regions (%zu objects tried) held the server's %d descriptors (%d "
      "before); %zu more connections met EMFILE\n",
      flood.size(), names.size(), fds_full, fds_start, late.size());

  for (int fd : flood) close(fd);
  for (int fd : late) close(fd);
  owner.reset();  // the Unix connection closes: its regions go
  for (const auto& name : names) shm_unlink(name.c_str());
  EXPECT_TRUE(descriptors_fall_to(server.pid(), fds_start + 8)) << open_descriptors(server.pid()) << " still open";
  // A fresh TCP connection is served within the deadline.
  expect_served(server, "on a fresh connection after accept4 met EMFILE");
  testing::expect_rss_back(server.pid(), rss_start, "after the descriptors ran out");
}

// ---- Shutdown ----------------------------------------------------------------

// SIGTERM while a large product computes and a PutMatrix is half sent: the
// put gets the grace (its rest, sent after the signal, is stored), the
// product is cancelled when the grace ends, and the process exits soon after
// (gRPC's global clean-up at exit waited 10 s for connection objects in some
// runs on a GPU host: the process now ends without it).
TEST(TransportAttacks, ShutdownUnderALargeProductEndsWithinTheGrace) {
  constexpr double kGraceS = 1;
  ServerProcess server({"--shutdown-grace", "1"});
  ASSERT_TRUE(server.running()) << server.log();
  ClientOptions no_retry;
  no_retry.retry.max_attempts = 1;  // the status the shutdown gave, not a retry's
  auto client = Client::connect(server.tcp_address(), no_retry);
  auto info = client->info();
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  // A product that computes for seconds on a CPU (on a GPU it may finish first).
  const int64_t n = info->backend == "cpu" ? 6144 : 16384;
  const GemmShape s{n, n, n};
  std::vector<float> a(std::size_t(n * n), 0.5f), b(std::size_t(n * n), 0.25f);
  MultiplyOptions opt;
  opt.timeout = std::chrono::milliseconds(300000);
  auto product = std::async(std::launch::async, [&] { return client->multiply(s, a.data(), b.data(), nullptr, opt); });
  // A put under way: its header and half its data.
  constexpr int64_t kRows = 256, kCols = 256;
  auto stub = v1::Sgemm::NewStub(grpc::CreateChannel(server.tcp_address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext put_ctx;
  v1::PutMatrixResponse put_resp;
  auto put = stub->PutMatrix(&put_ctx, &put_resp);
  v1::PutMatrixRequest h;
  h.mutable_header()->set_rows(kRows);
  h.mutable_header()->set_cols(kCols);
  ASSERT_TRUE(put->Write(h));
  std::vector<float> half(std::size_t(kRows * kCols / 2), 1.0f);
  v1::PutMatrixRequest c;
  c.mutable_chunk()->set_offset(0);
  c.mutable_chunk()->set_data(reinterpret_cast<const char*>(half.data()), half.size() * 4);
  ASSERT_TRUE(put->Write(c));
  const auto computing = testing::info_when(*client, [](const ServerInfo& i) { return i.in_flight >= 1; });
  EXPECT_GE(computing.in_flight, 1) << "the product never started computing";
  const auto t0 = Clock::now();
  kill(server.pid(), SIGTERM);
  c.mutable_chunk()->set_offset(kRows * kCols / 2);
  ASSERT_TRUE(put->Write(c));
  put->WritesDone();
  const grpc::Status put_st = put->Finish();
  EXPECT_TRUE(put_st.ok()) << "a put under way did not get the grace: " << put_st.error_message();
  auto res = product.get();
  if (!res.ok()) {
    EXPECT_EQ(res.status().code(), StatusCode::kUnavailable) << res.status().to_string();
    EXPECT_NE(res.status().message().find("--shutdown-grace"), std::string::npos) << res.status().to_string();
  }
  EXPECT_EQ(server.stop(), 0) << "the server did not exit cleanly on SIGTERM";
  const double exit_s = ms_since(t0) / 1000;
  EXPECT_FALSE(std::filesystem::exists(server.unix_address().substr(5))) << "the Unix socket outlived the server";
  std::printf(
      "[ info ] SIGTERM with a %lld^3 product computing (%s) and a put under way: exited %.2f s later "
      "(grace %.0f s)\n",
      (long long)n, res.ok() ? "it finished first" : "cancelled", exit_s, kGraceS);
  // Generous: the grace, 2 s for the cancelled calls to end, and a loaded machine's slack
  // (ThreadSanitizer's teardown of a server that held a 6144^3 product takes seconds more).
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  constexpr double kSlackS = 30;
#else
  constexpr double kSlackS = 6;
#endif
  EXPECT_LT(exit_s, kGraceS + kSlackS) << "shutdown overran --shutdown-grace";
}

// A put under way when SIGTERM comes, with no request beside it, still gets
// the grace: its rest, sent once the server is shutting down, is stored (the
// shutdown used to wait for Multiply calls only, and cancel the put at once).
TEST(TransportAttacks, APutUnderWayGetsTheShutdownGrace) {
  ServerProcess server({"--shutdown-grace", "10"});
  ASSERT_TRUE(server.running()) << server.log();
  constexpr int64_t kRows = 128, kCols = 96;
  auto stub = v1::Sgemm::NewStub(grpc::CreateChannel(server.tcp_address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  v1::PutMatrixResponse resp;
  auto put = stub->PutMatrix(&ctx, &resp);
  v1::PutMatrixRequest h;
  h.mutable_header()->set_rows(kRows);
  h.mutable_header()->set_cols(kCols);
  ASSERT_TRUE(put->Write(h));
  std::vector<float> half(std::size_t(kRows * kCols / 2), 2.0f);
  v1::PutMatrixRequest c;
  c.mutable_chunk()->set_offset(0);
  c.mutable_chunk()->set_data(reinterpret_cast<const char*>(half.data()), half.size() * 4);
  ASSERT_TRUE(put->Write(c));
  auto client = Client::connect(server.tcp_address());
  const auto held = testing::info_when(*client, [](const ServerInfo& i) { return i.host_bytes_in_use > 0; });
  ASSERT_GT(held.host_bytes_in_use, 0) << "the put's first chunk never arrived";
  const auto t0 = Clock::now();
  kill(server.pid(), SIGTERM);
  ASSERT_TRUE(server.log_has("signal 15 received", 10000)) << server.log();
  c.mutable_chunk()->set_offset(kRows * kCols / 2);
  ASSERT_TRUE(put->Write(c));
  put->WritesDone();
  const grpc::Status st = put->Finish();
  EXPECT_TRUE(st.ok()) << "a put under way did not get the grace: " << st.error_message();
  EXPECT_FALSE(resp.handle().empty());
  EXPECT_EQ(server.stop(), 0);
  std::printf("[ info ] SIGTERM with a put under way: the put was %s; exited %.2f s later (grace 10 s)\n",
              st.ok() ? "stored" : "cancelled", ms_since(t0) / 1000);
  EXPECT_LT(ms_since(t0), 10000 + 6000);
}

// ---- The metrics endpoint --------------------------------------------------

// GET /metrics; the whole answer ("" when the connection failed).
std::string scrape(int port) {
  const int fd = testing::connect_tcp(port);
  if (fd < 0) return "";
  const timeval t{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &t, sizeof t);
  const std::string req = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  std::string out;
  if (send(fd, req.data(), req.size(), MSG_NOSIGNAL) == ssize_t(req.size())) {
    char buf[65536];
    for (ssize_t n; (n = recv(fd, buf, sizeof buf, 0)) > 0;) out.append(buf, std::size_t(n));
  }
  close(fd);
  return out;
}

// One slowloris connection used to hold the single-connection endpoint
// (each byte renewed its 2 s timeout) and every scrape timed out. Now 40 of
// them trickle (more than the endpoint's places) while scrapes are answered.
TEST(TransportAttacks, SlowlorisDoesNotTimeOutScrapes) {
  ServerProcess server({"--metrics-listen", "127.0.0.1:0"});
  ASSERT_TRUE(server.running()) << server.log();
  ASSERT_TRUE(server.log_has("/metrics (port "));
  const std::string log = server.log();
  const auto at = log.find("/metrics (port ");
  const int port = std::atoi(log.c_str() + at + std::strlen("/metrics (port "));
  ASSERT_GT(port, 0);
  expect_served(server, "before the slowloris connections");
  const int64_t rss_start = testing::rss_bytes(server.pid());
  std::atomic<bool> stop{false};
  auto slowloris = std::async(std::launch::async, [&] { return testing::metrics_slowloris(port, 40, stop); });
  double worst = 0;
  for (int i = 0; i < 10; ++i) {
    const auto t0 = Clock::now();
    const std::string answer = scrape(port);
    const double ms = ms_since(t0);
    worst = std::max(worst, ms);
    EXPECT_EQ(answer.rfind("HTTP/1.0 200 OK", 0), 0u) << "scrape " << i << " got: " << answer.substr(0, 200);
    EXPECT_NE(answer.find("sgemm_build_info"), std::string::npos);
  }
  expect_served(server, "beside 40 slowloris metrics connections");
  stop = true;
  slowloris.get();
  std::printf("[ info ] 10 scrapes beside 40 slowloris connections: the slowest took %.1f ms\n", worst);
  EXPECT_LT(worst, kNormalRequestBoundMs);
  testing::expect_rss_back(server.pid(), rss_start, "after the slowloris connections");
}

// The endpoint is plain HTTP: with TLS on the service it may listen only on
// loopback unless the operator says otherwise.
TEST(TransportAttacks, MetricsStayOnLoopbackUnderTls) {
  testing::TestPki pki{testing::make_temp_dir()};
  std::string error;
  ASSERT_TRUE(pki.make_ca("ca", &error) && pki.make_leaf("ca", "server", &error)) << error;
  const std::vector<std::string> tls = {"--tls-cert", pki.path("server.pem"), "--tls-key", pki.path("server.key")};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), tls.begin(), tls.end());
    return extra;
  };
  ServerProcess wide(with({"--metrics-listen", "0.0.0.0:0"}));
  EXPECT_FALSE(wide.running());
  EXPECT_TRUE(wide.log_has("--metrics-plaintext")) << wide.log();
  ServerProcess local(with({"--metrics-listen", "127.0.0.1:0"}));
  EXPECT_TRUE(local.running()) << local.log();
  ServerProcess asked(with({"--metrics-listen", "0.0.0.0:0", "--metrics-plaintext"}));
  EXPECT_TRUE(asked.running()) << asked.log();
}

// ---- Health Watch --------------------------------------------------------------

// A server with --max-streams-per-connection 100 (the guard's bound: 200
// streams a connection), over TLS when `tls`, and its raw and normal clients.
class WatchServer {
 public:
  explicit WatchServer(bool tls) : tls_(tls) {
    std::vector<std::string> flags = {"--max-streams-per-connection", "100"};
    if (tls) {
      pki_.dir = testing::make_temp_dir();
      std::string error;
      EXPECT_TRUE(pki_.make_ca("ca", &error) && pki_.make_leaf("ca", "server", &error)) << error;
      for (const std::string& f :
           {std::string("--tls-cert"), pki_.path("server.pem"), std::string("--tls-key"), pki_.path("server.key")})
        flags.push_back(f);
      options_.tls.ca_file = pki_.path("ca.pem");
    }
    server_ = std::make_unique<ServerProcess>(flags);
  }
  ServerProcess& server() { return *server_; }
  // A raw HTTP/2 connection from `source` (over TLS when the server speaks it).
  bool connect(RawH2Client& c, const char* source) const {
    return tls_ ? c.connect_tls(port_of(*server_), source) : c.connect(port_of(*server_), source);
  }
  // `what`, saying whether over TLS.
  std::string say(const std::string& what) const { return tls_ ? what + " (TLS)" : what; }
  double expect_served(const std::string& what) {
    return testing::expect_served(*server_, say(what).c_str(), options_);
  }
  // The start of the guard's log line for a connection from `source`.
  std::string close_line(const std::string& source) const {
    return (tls_ ? "TLS connection from " : "connection from ") + source + " opened";
  }

 private:
  bool tls_;
  testing::TestPki pki_;
  ClientOptions options_;
  std::unique_ptr<ServerProcess> server_;
};

// gRPC's health service keeps a Watch stream open until its client ends it,
// outside the service's stream counts. A client that never acknowledges
// SETTINGS opened thousands on one connection; the transport guard counts
// every stream of a connection (in the clear at recvmsg, over TLS at
// SSL_read) and closes one that holds more than twice
// --max-streams-per-connection.
void expect_watches_bounded(bool tls) {
  WatchServer w(tls);
  ServerProcess& server = w.server();
  ASSERT_TRUE(server.running()) << server.log();
  w.expect_served("before the health watches");
  const int64_t rss_start = testing::rss_bytes(server.pid());
  RawH2Client within;  // 150 watches: under twice the bound, kept
  ASSERT_TRUE(w.connect(within, "127.0.0.2"));
  ASSERT_TRUE(within.open_streams("/grpc.health.v1.Health/Watch", 150, false, true));
  RawH2Client over;
  ASSERT_TRUE(w.connect(over, "127.0.0.3"));
  (void)over.open_streams("/grpc.health.v1.Health/Watch", 1000, false, true);
  EXPECT_TRUE(over.wait_closed(20000)) << w.say("a connection holding 1,000 health watches was not closed");
  EXPECT_TRUE(server.log_has(w.close_line("127.0.0.3")))
      << "the log does not say which: " << server.log().substr(0, 4000);
  EXPECT_TRUE(server.log_has("past 200 (twice --max-streams-per-connection")) << "the log does not say why";
  EXPECT_FALSE(within.closed_by_server()) << w.say("a connection within the bound was closed");
  w.expect_served("beside 150 health watches, after 1,000 on one connection");
  within.close_now();
  testing::expect_rss_back(server.pid(), rss_start, w.say("after the health watches").c_str());
}

TEST(TransportAttacks, HealthWatchStreamsAreBounded) { expect_watches_bounded(false); }
TEST(TransportAttacks, HealthWatchStreamsAreBoundedOverTls) { expect_watches_bounded(true); }

// A client that floods health watches and reconnects each time it is closed
// costs the server the watches gRPC starts on every connection. After three
// such closes within 10 s its address cools down: a new connection from it
// is closed past 1/20 of the bound (10 of 200 here), while a connection from
// another address keeps 150 watches and a normal request is served. Over TLS
// the guard learns a connection's address from the read that brought its
// first records, and cools it down the same way.
void expect_flooding_address_cools_down(bool tls) {
  WatchServer w(tls);
  ServerProcess& server = w.server();
  ASSERT_TRUE(server.running()) << server.log();
  w.expect_served("before the watch floods");
  const int64_t rss_start = testing::rss_bytes(server.pid());
  RawH2Client other;
  ASSERT_TRUE(w.connect(other, "127.0.0.3"));
  ASSERT_TRUE(other.open_streams("/grpc.health.v1.Health/Watch", 150, false, true));
  for (int i = 0; i < 3; ++i) {
    RawH2Client flood;
    ASSERT_TRUE(w.connect(flood, "127.0.0.2"));
    (void)flood.open_streams("/grpc.health.v1.Health/Watch", 1000, false, true);
    ASSERT_TRUE(flood.wait_closed(20000)) << w.say("flood " + std::to_string(i) + " was not closed");
  }
  RawH2Client cooling;  // 30 watches: under the bound, past 1/20 of it
  ASSERT_TRUE(w.connect(cooling, "127.0.0.2"));
  (void)cooling.open_streams("/grpc.health.v1.Health/Watch", 30, false, true);
  EXPECT_TRUE(cooling.wait_closed(20000))
      << w.say("a cooling address's connection kept 30 watches: ") << server.log().substr(0, 6000);
  // The log says so (its lines are rate-limited: this one may be folded into a count).
  EXPECT_TRUE(server.log_has(w.close_line("127.0.0.2"))) << server.log().substr(0, 4000);
  EXPECT_TRUE(server.log_has("while its address cools down")) << server.log().substr(0, 4000);
  EXPECT_FALSE(other.closed_by_server()) << w.say("another address's connection within the bound was closed");
  w.expect_served("beside a cooling address");
  other.close_now();
  testing::expect_rss_back(server.pid(), rss_start, w.say("after the watch floods").c_str());
}

TEST(TransportAttacks, AnAddressFloodingWatchesCoolsDown) { expect_flooding_address_cools_down(false); }
TEST(TransportAttacks, AnAddressFloodingWatchesOverTlsCoolsDown) { expect_flooding_address_cools_down(true); }

}  // namespace
}  // namespace sgemm
