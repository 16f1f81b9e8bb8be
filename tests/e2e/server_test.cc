// sgemm::Server as an object (server/app/server.h), in process: create()
// refuses bad options naming the flag before it builds an engine; start()
// reports every bound port; shutdown() from several threads stops once and
// wait() returns for everyone; a port another server holds is an error of
// start() naming the address.
#include "server/app/server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <thread>

#include "client/sgemm_client.h"
#include "tests/e2e/in_process_server.h"

namespace sgemm {
namespace {

using testing::in_process_options;
using testing::InProcessServer;

class TempDir {
 public:
  TempDir() : path_(testing::make_temp_dir()) {}
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

bool tcp_connects(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  close(fd);
  return ok;
}

// Each bad option is INVALID_ARGUMENT naming its flag (or field), and no
// engine is built for it.
TEST(ServerObjectE2E, CreateRefusesBadOptionsNamingTheFlagBeforeBuildingAnEngine) {
  TempDir dir;
  const std::string not_a_dir = dir.path() + "/file";
  std::ofstream(not_a_dir) << "x";
  struct Case {
    const char* names;
    std::function<void(ServerOptions&)> spoil;
  };
  const std::vector<Case> cases = {
      {"--grpc-arg", [](ServerOptions& o) { o.grpc_args = {"grpc.max_connection_age_ms"}; }},
      {"--grpc-arg", [](ServerOptions& o) { o.grpc_args = {"grpc.max_connection_age_ms=soon"}; }},
      {"--grpc-arg", [](ServerOptions& o) { o.grpc_args = {"=5"}; }},
      {"--listen", [](ServerOptions& o) { o.listen.clear(); }},
      {"--listen", [](ServerOptions& o) { o.listen = {"unix:"}; }},
      {"--idle-timeout", [](ServerOptions& o) { o.idle_timeout_s = 0; }},
      {"--shutdown-grace", [](ServerOptions& o) { o.shutdown_grace_s = -1; }},
      {"--max-streams-per-connection", [](ServerOptions& o) { o.max_streams_per_connection = 0; }},
      {"--max-in-flight", [](ServerOptions& o) { o.service.max_in_flight = 0; }},
      {"--max-message-bytes", [](ServerOptions& o) { o.service.max_message_bytes = 1 << 20; }},
      {"--response-chunk-bytes", [](ServerOptions& o) { o.service.response_chunk_bytes = 100; }},
      {"--trace-dir", [&](ServerOptions& o) { o.service.trace_dir = not_a_dir + "/traces"; }},
      {"--join",
       [](ServerOptions& o) {
         o.cluster_listen = "127.0.0.1:0";
         o.join = "127.0.0.1:1";
       }},
      {"make_engine", [](ServerOptions& o) { o.make_engine = nullptr; }},
      {"log", [](ServerOptions& o) { o.log = nullptr; }},
  };
  for (const auto& c : cases) {
    ServerOptions o = in_process_options(dir.path());
    int engines_built = 0;
    o.make_engine = [&engines_built]() -> StatusOr<std::unique_ptr<Engine>> {
      ++engines_built;
      return Unavailable("the test's engine factory is not to be called");
    };
    c.spoil(o);
    auto created = Server::create(std::move(o));
    ASSERT_FALSE(created.ok()) << c.names;
    EXPECT_EQ(created.status().code(), StatusCode::kInvalidArgument) << created.status().to_string();
    EXPECT_NE(created.status().message().find(c.names), std::string::npos) << created.status().to_string();
    EXPECT_EQ(engines_built, 0) << c.names;
  }
}

// A failing engine factory's Status comes back from create() as it was.
TEST(ServerObjectE2E, AnEngineThatCannotStartIsTheErrorOfCreate) {
  TempDir dir;
  ServerOptions o = in_process_options(dir.path());
  o.make_engine = []() -> StatusOr<std::unique_ptr<Engine>> { return Unavailable("no engine today"); };
  auto created = Server::create(std::move(o));
  ASSERT_FALSE(created.ok());
  EXPECT_EQ(created.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(created.status().message(), "no engine today");
}

// Two TCP listeners on port 0, a unix socket and a metrics endpoint: every
// bound port is reported, each serves, the port file holds the first.
TEST(ServerObjectE2E, BoundPortsAreReportedAndServe) {
  TempDir dir;
  ServerOptions o = in_process_options(dir.path());
  o.listen = {"127.0.0.1:0", "unix:" + dir.path() + "/sgemm.sock", "127.0.0.1:0"};
  o.port_file = dir.path() + "/port";
  o.metrics_listen = "127.0.0.1:0";
  auto created = Server::create(std::move(o));
  ASSERT_TRUE(created.ok()) << created.status().to_string();
  Server& server = **created;
  EXPECT_TRUE(server.tcp_ports().empty()) << "no port is bound before start()";
  ASSERT_TRUE(server.start().ok());
  ASSERT_EQ(server.tcp_ports().size(), 2u);
  EXPECT_GT(server.tcp_ports()[0], 0);
  EXPECT_GT(server.tcp_ports()[1], 0);
  EXPECT_NE(server.tcp_ports()[0], server.tcp_ports()[1]);
  EXPECT_EQ(server.port(), server.tcp_ports()[0]);
  int from_file = 0;
  std::ifstream(dir.path() + "/port") >> from_file;
  EXPECT_EQ(from_file, server.port());
  for (const std::string& address :
       {"127.0.0.1:" + std::to_string(server.tcp_ports()[0]), "127.0.0.1:" + std::to_string(server.tcp_ports()[1]),
        "unix:" + dir.path() + "/sgemm.sock"}) {
    auto info = Client::connect(address)->info();
    ASSERT_TRUE(info.ok()) << address << ": " << info.status().to_string();
    EXPECT_EQ(info->backend, server.engine().info().backend) << address;
  }
  EXPECT_GT(server.metrics_port(), 0);
  EXPECT_TRUE(tcp_connects(server.metrics_port()));
  EXPECT_EQ(server.cluster_port(), 0);
  EXPECT_FALSE(server.has_tls());
  EXPECT_EQ(server.reload_tls().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(server.start().code(), StatusCode::kFailedPrecondition) << "start() is once";
  server.shutdown();
  server.wait();
}

// shutdown() from two threads and wait() from a third: each returns once the
// server has stopped, which happens once; then nothing answers on the port.
TEST(ServerObjectE2E, ShutdownFromSeveralThreadsStopsOnceAndWaitReturnsForAll) {
  InProcessServer s;
  ASSERT_TRUE(s.running()) << s.log();
  const std::string address = s.tcp_address();
  ASSERT_TRUE(Client::connect(address)->info().ok());
  Server& server = s.server();
  std::atomic<int> returned{0};
  std::thread waiter([&] {
    server.wait();
    ++returned;
  });
  std::thread a([&] {
    server.shutdown(std::chrono::steady_clock::now() + std::chrono::seconds(5));
    ++returned;
  });
  std::thread b([&] {
    server.shutdown(std::chrono::steady_clock::now() + std::chrono::seconds(5));
    ++returned;
  });
  a.join();
  b.join();
  waiter.join();
  EXPECT_EQ(returned.load(), 3);
  EXPECT_EQ(s.log_count("sgemm-server stopped"), 1) << s.log();
  ClientOptions co;
  co.retry.max_attempts = 1;
  auto info = Client::connect(address, co)->info();
  EXPECT_FALSE(info.ok()) << "a stopped server answered";
}

// A port another socket holds: create() succeeds, start() fails naming the
// address (sgemm-server exits 1 on it), and the Server can still be destroyed.
TEST(ServerObjectE2E, APortInUseIsAnErrorOfStartNamingTheAddress) {
  const int holder = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(holder, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ASSERT_EQ(bind(holder, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(listen(holder, 1), 0);
  ASSERT_EQ(getsockname(holder, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const std::string address = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  TempDir dir;
  ServerOptions o = in_process_options(dir.path());
  o.listen = {address};
  auto created = Server::create(std::move(o));
  ASSERT_TRUE(created.ok()) << created.status().to_string();
  const Status st = (*created)->start();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  EXPECT_NE(st.message().find(address), std::string::npos) << st.to_string();
  EXPECT_TRUE((*created)->tcp_ports().empty());
  created->reset();
  close(holder);
}

// Without reuse_port a second Server on a port the first holds fails at
// start(); with it on both, both serve (SO_REUSEPORT: the kernel spreads new
// connections over them).
TEST(ServerObjectE2E, ASecondServerSharesAPortOnlyWithReusePort) {
  for (const bool reuse : {false, true}) {
    TempDir first_dir, second_dir;
    ServerOptions o1 = in_process_options(first_dir.path());
    o1.listen = {"127.0.0.1:0"};
    o1.reuse_port = reuse;
    auto first = Server::create(std::move(o1));
    ASSERT_TRUE(first.ok()) << first.status().to_string();
    ASSERT_TRUE((*first)->start().ok());
    const std::string address = "127.0.0.1:" + std::to_string((*first)->port());
    ServerOptions o2 = in_process_options(second_dir.path());
    o2.listen = {address};
    o2.reuse_port = reuse;
    auto second = Server::create(std::move(o2));
    ASSERT_TRUE(second.ok()) << second.status().to_string();
    const Status st = (*second)->start();
    if (reuse) {
      EXPECT_TRUE(st.ok()) << st.to_string();
      EXPECT_EQ((*second)->port(), (*first)->port());
    } else {
      EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.to_string();
      EXPECT_NE(st.message().find(address), std::string::npos) << st.to_string();
      EXPECT_NE(st.message().find("--reuse-port"), std::string::npos) << st.to_string();
    }
    EXPECT_TRUE(Client::connect(address)->info().ok()) << "the first server must serve on";
  }
}

}  // namespace
}  // namespace sgemm
