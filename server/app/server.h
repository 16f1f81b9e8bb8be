// sgemm-server as an object: the engine, the cluster role (coordinator or
// member), TLS and bearer tokens, the health and metrics endpoints, and the
// gRPC server with its TCP and unix:PATH listeners. main() parses flags into
// ServerOptions and turns signals into calls; tests run the same object in
// process.
//
//   auto server = Server::create(std::move(options));   // validate, build the engine, the cluster role, TLS
//   if (server.ok()) st = (*server)->start();           // bind the listeners, serve, SERVING on health
//   (*server)->shutdown(std::chrono::steady_clock::now() + grace);  // from another thread
//   (*server)->wait();                                  // returns once shutdown() has finished
//
// Ownership: the Server owns everything it builds, and the loggers it was
// given (shared with whoever else holds them). It does not install signal
// handlers, set spdlog's default logger or call exit(): those stay in main().
//
// Threads: create() and start() run on the caller's thread. shutdown(),
// reload_tls() and the accessors may be called from any thread once start()
// succeeded; shutdown() is idempotent (a second call waits for the first).
// wait() may be called from any number of threads. The destructor shuts down
// (with no grace) if nobody did.
#pragma once

#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/resource_quota.h>
#include <grpcpp/server.h>
#include <spdlog/logger.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "server/engine/cluster_plane.h"
#include "server/engine/engine.h"
#include "server/service/sgemm_service.h"
#include "server/service/tls_credentials.h"
#include "server/service/unix_connections.h"

namespace sgemm {

class ClusterCoordinator;
class ClusterMember;

// Every field has the default sgemm-server gives its flag (docs/server.md);
// create() validates them once and names the flag of a bad one.
struct ServerOptions {
  // address:port (port 0 picks a free one: tcp_ports()) or unix:PATH (local
  // callers, shared-memory regions; docs/transport.md). --listen, repeatable.
  std::vector<std::string> listen{"0.0.0.0:50051"};
  std::string port_file;           // --port-file: the first TCP port is written here once serving; "" = none
  bool reuse_port = false;         // --reuse-port: SO_REUSEPORT on the TCP listeners (share a port on purpose)
  ServiceOptions service;          // limits, queue, memory budget, chunk sizes, trace dir (service/sgemm_service.h)
  TlsOptions tls;                  // --tls-cert/--tls-key/--tls-client-ca; none = plaintext
  std::string auth_tokens;         // --auth-tokens: JSON file of bearer tokens and quotas; "" = no tokens
  double idle_timeout_s = 30;      // --idle-timeout, into service.idle_timeout
  double connection_idle_s = 300;  // a connection with no call open this long is closed (GOAWAY); 0 = never
  double feed_wait_budget_s = 1;   // --feed-wait-budget, into service.feed_wait_budget
  int64_t coalesce_window_us = 0;  // --coalesce-window-us, into service.coalesce.window
  int64_t ring_spin_us = 200;      // --ring-spin-us, into service.ring_spin
  double shutdown_grace_s = 30;    // shutdown() without a deadline: how long requests in flight may take
  int max_streams_per_connection = 256;  // HTTP/2 concurrent streams one connection may open
  // HTTP/2 rapid reset (connection_guard.h): RST_STREAM frames one connection
  // (plaintext, or TLS read at SSL_read) may send within a second before it
  // is closed; 0 = no bound.
  int max_resets_per_second = 200;
  // gRPC's own buffers (a grpc::ResourceQuota over every connection): gRPC
  // 1.51 buffers a message whole before --max-message-bytes is checked, even
  // one that never completes, and outside the memory budget; near this size it
  // shrinks windows and closes the connections that hold the most. 0 = unlimited.
  int64_t grpc_memory_bytes = int64_t{1} << 30;
  std::string metrics_listen;  // Prometheus /metrics on this address:port; "" = none
  // The metrics endpoint speaks plain HTTP: with TLS on the service it may
  // listen only on a loopback address unless this says the operator knows.
  bool metrics_plaintext = false;
  bool reflection = false;  // gRPC server reflection (each stream holds a thread: off unless asked for)
  // Reflection streams served at once: each holds one of gRPC's sync-server
  // threads; past it a call is answered RESOURCE_EXHAUSTED. gRPC joins an
  // exited sync-server thread only when another exits, so the stacks of a
  // burst's threads outlive it: the bound caps both.
  int reflection_streams = 8;
  std::vector<std::string> grpc_args;  // --grpc-arg NAME=INT: extra gRPC server arguments (docs/transport.md)
  std::string cluster_listen;          // coordinator: address:port members join (docs/cluster.md); "" = no cluster
  std::string join;                    // member: the coordinator's cluster address; "" = not a member
  std::string cluster_name;            // this process's name in a cluster; "" = the host name
  std::string cluster_token_file;      // the cluster's shared secret (first line); "" = members need none
  std::string cluster_ca;              // member: the CA of the coordinator's certificate; "" = plaintext to it
  bool cluster_always = false;         // coordinator: every fp32 request over the cluster (benchmarks)
  double cluster_timeout_s = 60;       // building a communicator; a member's answer to a job (x10)
  std::string version = "dev";         // reported by GetInfo and logged at start

  // The request log (one line per request, start-up and shutdown lines) and
  // the sgemm.timing/1 JSON lines; the Server keeps its copies of both.
  // log is required; timing_log may be null (no timings written).
  std::shared_ptr<spdlog::logger> log;
  std::shared_ptr<spdlog::logger> timing_log;

  // Builds the engine this server runs (main: the engine factory's
  // make_engine, server/engine/engine_factory.h). Called once by create(),
  // after the options are validated. Required.
  std::function<StatusOr<std::unique_ptr<Engine>>()> make_engine;
  // Builds cluster mode's data plane (main: make_cluster_plane). Required
  // when cluster_listen or join is set.
  std::function<StatusOr<std::unique_ptr<ClusterDataPlane>>()> make_cluster_plane;
};

// A Status from create() or start() with code INVALID_ARGUMENT is a bad option
// or file (sgemm-server exits 2); any other code is a resource that could not
// be had (engine, listener, metrics endpoint: exit 1).
class Server {
 public:
  static StatusOr<std::unique_ptr<Server>> create(ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds every listener, starts serving, sets health to SERVING, logs the
  // start-up line and writes the port file. Once.
  Status start();
  // Graceful stop: health NOT_SERVING, new calls refused (UNAVAILABLE),
  // requests in flight may finish until `deadline`, then are cancelled;
  // listeners, the gRPC servers and the cluster role stop. Returns when all
  // that is done.
  void shutdown(std::chrono::steady_clock::time_point deadline);
  // shutdown() with the deadline now + options.shutdown_grace_s.
  void shutdown();
  // Blocks until shutdown() has finished.
  void wait();

  // Whether TCP listeners speak TLS; reload_tls() rereads the certificate,
  // key and client CA (new handshakes get them; FAILED_PRECONDITION without TLS).
  bool has_tls() const { return tls_ != nullptr; }
  Status reload_tls();

  // The bound port of each TCP --listen address, in the order given (empty
  // before start()); the first is the one --port-file gets.
  const std::vector<int>& tcp_ports() const { return tcp_ports_; }
  int port() const { return tcp_ports_.empty() ? 0 : tcp_ports_[0]; }
  int metrics_port() const { return metrics_port_; }  // 0 = no metrics endpoint
  int cluster_port() const { return cluster_port_; }  // 0 = not a coordinator
  Engine& engine() { return *engine_; }
  const ServerOptions& options() const { return opt_; }
  spdlog::logger& log() { return *opt_.log; }

 private:
  explicit Server(ServerOptions options);
  Status build();

  ServerOptions opt_;
  std::unique_ptr<TlsCredentials> tls_;
  // Cluster mode (docs/cluster.md): this process's GPUs as NCCL ranks of a
  // communicator over several servers; gRPC carries the control messages.
  std::unique_ptr<ClusterDataPlane> cluster_plane_;
  std::unique_ptr<ClusterCoordinator> coordinator_;
  std::unique_ptr<ClusterMember> member_;
  std::unique_ptr<grpc::Server> cluster_server_;
  int cluster_port_ = 0;
  std::unique_ptr<Engine> engine_;  // the local engine, or the coordinator's cluster engine over it
  // GPU faults: the health service says NOT_SERVING once no device is left.
  std::atomic<grpc::HealthCheckServiceInterface*> health_{nullptr};
  std::unique_ptr<SgemmService> service_;
  int metrics_port_ = 0;
  std::unique_ptr<grpc::ResourceQuota> quota_;
  std::vector<std::unique_ptr<UnixListener>> unix_listeners_;
  std::unique_ptr<grpc::Server> server_;
  std::vector<int> tcp_ports_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool started_ = false;        // guarded by mu_
  bool shutting_down_ = false;  // guarded by mu_
  bool stopped_ = false;        // guarded by mu_: shutdown() finished
};

}  // namespace sgemm
