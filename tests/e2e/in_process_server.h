// Runs sgemm::Server (server/app/server.h) inside the test process, on
// 127.0.0.1 with an ephemeral port and on a Unix socket in its temp dir, with
// the options sgemm-server's flag defaults give: the same object main() runs,
// without a process to spawn. For suites that test no signal and no process
// death (those keep ServerProcess: tests/e2e/server_process.h).
//
// The log goes to DIR/stdout.log and timings to DIR/logs/timings.jsonl, where
// ServerProcess has them, so log_has() and friends read the same file.
// SGEMM_E2E_BACKEND picks the backend (default auto), SGEMM_E2E_TRANSPORT=shm
// makes address() the Unix socket.
#pragma once

#include <gtest/gtest.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <string>

#include "server/app/server.h"
#include "server/engine/engine_factory.h"
#include "tests/e2e/server_process.h"

namespace sgemm::testing {

// `configure` edits the options after the defaults, as extra flags do for
// ServerProcess (e.g. o.service.max_in_flight = 2 for --max-in-flight 2;
// engine options for --resident-bytes and the like; o.log->set_level() for
// --log-level).
using Configure = std::function<void(ServerOptions&, EngineOptions&)>;

// sgemm-server's defaults for a server whose files live in `dir`: listeners
// on 127.0.0.1:0 and unix:DIR/sgemm.sock, the log in DIR/stdout.log, timings
// in DIR/logs/timings.jsonl, the engine factory's engine on SGEMM_E2E_BACKEND.
inline ServerOptions in_process_options(const std::string& dir, const Configure& configure = {}) {
  std::filesystem::create_directories(dir + "/logs");
  ServerOptions o;
  o.listen = {"127.0.0.1:0", "unix:" + dir + "/sgemm.sock"};
  auto sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(dir + "/stdout.log");
  o.log = std::make_shared<spdlog::logger>("sgemm", sink);
  o.log->flush_on(spdlog::level::info);
  auto timing_sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(dir + "/logs/timings.jsonl");
  timing_sink->set_pattern("%v");
  o.timing_log = std::make_shared<spdlog::logger>("timings", timing_sink);
  o.timing_log->flush_on(spdlog::level::info);
  o.service.backends = built_backends();
  EngineOptions e;
  const char* backend = std::getenv("SGEMM_E2E_BACKEND");
  parse_backend_choice(backend ? backend : "auto", &e.backend);
  e.pinned_pool_bytes = std::size_t(4) << 30;  // sgemm-server's --pinned-pool-bytes default
  if (configure) configure(o, e);
  o.log->flush_on(std::min(o.log->level(), spdlog::level::info));  // as sgemm-server: every line at once
  e.log = [log = o.log](std::string_view msg) { log->info("engine: {}", msg); };
  o.make_engine = [e]() -> StatusOr<std::unique_ptr<Engine>> {
    auto built = make_engine(e);
    if (!built.ok()) return built.status();
    return std::move(built->engine);
  };
  o.make_cluster_plane = [e] { return make_cluster_plane(e); };
  return o;
}

class InProcessServer : public ServerLog {
 public:
  explicit InProcessServer(const Configure& configure = {}) {
    dir_ = make_temp_dir();
    ServerOptions o = in_process_options(dir_, configure);
    auto created = Server::create(std::move(o));
    status_ = created.ok() ? (*created)->start() : created.status();
    if (created.ok()) server_ = std::move(created).value();
    if (!status_.ok()) {
      std::ofstream(dir_ + "/stdout.log", std::ios::app) << "server did not start: " << status_.to_string() << "\n";
      server_.reset();
    }
  }
  ~InProcessServer() {
    server_.reset();  // shuts down with no grace if stop() was not called
    std::error_code ec;
    if (!std::getenv("SGEMM_E2E_KEEP")) std::filesystem::remove_all(dir_, ec);
  }
  InProcessServer(const InProcessServer&) = delete;
  InProcessServer& operator=(const InProcessServer&) = delete;

  bool running() const { return server_ != nullptr && server_->port() > 0; }
  const Status& start_status() const { return status_; }
  Server& server() { return *server_; }
  std::string address() const { return shm_transport() ? unix_address() : tcp_address(); }
  std::string tcp_address() const { return "127.0.0.1:" + std::to_string(server_ ? server_->port() : 0); }
  std::string unix_address() const { return "unix:" + dir_ + "/sgemm.sock"; }
  // What SIGTERM does to sgemm-server: shutdown() with --shutdown-grace, then
  // wait. Returns 0, as the process's exit code, once it has stopped.
  int stop() {
    if (!server_) return -1;
    server_->shutdown();
    server_->wait();
    server_.reset();
    return 0;
  }

 private:
  Status status_;
  std::unique_ptr<Server> server_;
};

// A suite whose tests share one in-process server, started before the suite's first test
// and stopped as SIGTERM would stop it after its last (a stop that is not clean fails the
// suite). The suite may define
//   static void configure(ServerOptions& o, EngineOptions& e);
// (public) to set the server's options, as in_process_options' `configure` does.
template <class Suite>
class SuiteServer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if constexpr (requires(ServerOptions & o, EngineOptions & e) { Suite::configure(o, e); }) {
      server_ = new InProcessServer([](ServerOptions& o, EngineOptions& e) { Suite::configure(o, e); });
    } else {
      server_ = new InProcessServer();
    }
    ASSERT_TRUE(server_->running()) << server_->log();
  }
  static void TearDownTestSuite() {
    EXPECT_EQ(server_->stop(), 0) << "server did not shut down cleanly";
    delete server_;
    server_ = nullptr;
  }
  static inline InProcessServer* server_ = nullptr;
};

}  // namespace sgemm::testing
