#include "server/app/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/server_posix.h>
#include <spdlog/fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>

#include "server/app/connection_guard.h"
#include "server/cluster/cluster_engine.h"
#include "server/cluster/cluster_trust.h"
#include "server/cluster/coordinator.h"
#include "server/cluster/member.h"
#include "server/service/host_memory.h"
#include "server/service/reflection_switch.h"

namespace sgemm {
namespace {

bool is_unix_address(const std::string& address) { return address.rfind("unix:", 0) == 0; }

// Whether an address:port's host is this machine's loopback.
bool is_loopback_listen(const std::string& address) {
  const std::string host = address.substr(0, address.rfind(':'));
  return host == "localhost" || host == "[::1]" || host == "::1" || host.rfind("127.", 0) == 0;
}

// --grpc-arg NAME=INT, split; INVALID_ARGUMENT naming the flag otherwise.
StatusOr<std::pair<std::string, int>> parse_grpc_arg(const std::string& kv) {
  const auto eq = kv.find('=');
  int value = 0;
  const char* first = kv.data() + (eq == std::string::npos ? kv.size() : eq + 1);
  const char* last = kv.data() + kv.size();
  const auto [end, ec] = std::from_chars(first, last, value);
  if (eq == std::string::npos || eq == 0 || first == last || ec != std::errc() || end != last)
    return InvalidArgument("--grpc-arg takes NAME=INT, not '" + kv + "'");
  return std::pair{kv.substr(0, eq), value};
}

// Every check that needs no resource, so a bad option fails before the engine
// is built.
Status validate(const ServerOptions& opt) {
  if (!opt.log) return InvalidArgument("ServerOptions.log: a logger is required");
  if (!opt.make_engine) return InvalidArgument("ServerOptions.make_engine: an engine factory is required");
  if (!opt.cluster_listen.empty() && !opt.join.empty())
    return InvalidArgument("--join excludes --cluster-listen: a server is a coordinator or a member, not both");
  if ((!opt.cluster_listen.empty() || !opt.join.empty()) && !opt.make_cluster_plane)
    return InvalidArgument("ServerOptions.make_cluster_plane: cluster mode needs a data-plane factory");
  if (opt.listen.empty()) return InvalidArgument("--listen: at least one address is required");
  for (const auto& l : opt.listen)
    if (l.empty() || l == "unix:") return InvalidArgument("--listen: '" + l + "' is not an address:port or unix:PATH");
  for (const auto& kv : opt.grpc_args)
    if (auto parsed = parse_grpc_arg(kv); !parsed.ok()) return parsed.status();
  if (opt.idle_timeout_s <= 0) return InvalidArgument("--idle-timeout must be positive");
  if (opt.connection_idle_s < 0) return InvalidArgument("--connection-idle-timeout must not be negative");
  if (opt.feed_wait_budget_s < 0) return InvalidArgument("--feed-wait-budget must not be negative");
  if (opt.shutdown_grace_s < 0) return InvalidArgument("--shutdown-grace must not be negative");
  if (opt.max_streams_per_connection <= 0) return InvalidArgument("--max-streams-per-connection must be positive");
  if (opt.max_resets_per_second < 0) return InvalidArgument("--max-resets-per-second must not be negative");
  if (opt.grpc_memory_bytes < 0) return InvalidArgument("--grpc-memory-bytes must not be negative");
  if (opt.reflection_streams < 1) return InvalidArgument("--reflection-streams must be at least 1");
  if (opt.cluster_timeout_s <= 0) return InvalidArgument("--cluster-timeout must be positive");
  if (opt.tls.enabled() && !opt.metrics_listen.empty() && !opt.metrics_plaintext &&
      !is_loopback_listen(opt.metrics_listen))
    return InvalidArgument("--metrics-listen " + opt.metrics_listen +
                           ": the metrics endpoint speaks plain HTTP; with --tls-cert it listens only on a loopback "
                           "address (127.0.0.1:PORT, [::1]:PORT) unless --metrics-plaintext is given");
  // The service's limits, with the bounds sgemm-server's flags check.
  const ServiceOptions& s = opt.service;
  if (s.limits.max_matrix_elements <= 0) return InvalidArgument("--max-matrix-elements must be positive");
  if (s.max_in_flight <= 0) return InvalidArgument("--max-in-flight must be positive");
  if (s.max_queued < 0) return InvalidArgument("--max-queued must not be negative");
  if (s.host_memory_bytes < 0) return InvalidArgument("--host-memory-bytes must not be negative");
  if (s.region_bytes < 0) return InvalidArgument("--region-bytes must not be negative");
  if (s.region_bytes_per_user < 0) return InvalidArgument("--region-bytes-per-user must not be negative");
  if (s.inline_compute_ms < 0) return InvalidArgument("--inline-compute-ms must not be negative");
  {
    CoalesceOptions coalesce = s.coalesce;
    coalesce.window = std::chrono::microseconds(opt.coalesce_window_us);
    SGEMM_RETURN_IF_ERROR(check_coalesce_options(coalesce));
  }
  if (s.max_open_streams <= 0) return InvalidArgument("--max-open-streams must be positive");
  if (s.max_stripes <= 0) return InvalidArgument("--max-stripes must be positive");
  if (s.max_streams_per_address < 0) return InvalidArgument("--max-streams-per-address must not be negative");
  if (s.log_lines_per_second < 0) return InvalidArgument("--log-lines-per-second must not be negative");
  if (s.max_message_bytes < (int64_t{4} << 20) || s.max_message_bytes > (int64_t{1} << 30))
    return InvalidArgument("--max-message-bytes must be in [4 MiB, 1 GiB], not " + std::to_string(s.max_message_bytes));
  if (s.response_chunk_bytes < 4096 || s.response_chunk_bytes > (4 << 20) - 1024)
    return InvalidArgument("--response-chunk-bytes must be in [4096, 4 MiB - 1024], not " +
                           std::to_string(s.response_chunk_bytes));
  if (!opt.service.trace_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(opt.service.trace_dir, ec);
    if (ec) return InvalidArgument("--trace-dir " + opt.service.trace_dir + ": " + ec.message());
  }
  return Status::Ok();
}

}  // namespace

Server::Server(ServerOptions options) : opt_(std::move(options)) {}

StatusOr<std::unique_ptr<Server>> Server::create(ServerOptions options) {
  if (auto st = validate(options); !st.ok()) return st;
  std::unique_ptr<Server> server(new Server(std::move(options)));
  if (auto st = server->build(); !st.ok()) return st;
  return server;
}

Status Server::build() {
  auto& log = *opt_.log;
  auto built = opt_.make_engine();
  if (!built.ok()) return built.status();
  engine_ = std::move(built).value();

  // TLS first: the cluster listener serves under the same certificate.
  if (opt_.tls.enabled()) {
    auto made = TlsCredentials::create(opt_.tls);
    if (!made.ok()) return InvalidArgument(made.status().message());  // the files are the problem
    tls_ = std::move(made).value();
  }
  if (!opt_.cluster_listen.empty() || !opt_.join.empty()) {
    auto plane = opt_.make_cluster_plane();
    if (!plane.ok()) return Status(plane.status().code(), "cluster mode needs GPUs: " + plane.status().to_string());
    cluster_plane_ = std::move(plane).value();
    ClusterOptions copt;
    copt.host = opt_.cluster_name;
    if (copt.host.empty()) {
      char name[256] = {};
      gethostname(name, sizeof name - 1);
      copt.host = name;
    }
    copt.always = opt_.cluster_always;
    copt.connect_timeout_ms = int64_t(opt_.cluster_timeout_s * 1000);
    copt.job_timeout_ms = 10 * copt.connect_timeout_ms;
    copt.log = [log = opt_.log](std::string_view msg) { log->info("{}", msg); };
    if (!opt_.cluster_token_file.empty()) {
      auto token = read_cluster_token(opt_.cluster_token_file);
      if (!token.ok()) return InvalidArgument(token.status().message());  // the file is the problem
      copt.token = std::move(token).value();
    }
    copt.tls_ca_file = opt_.cluster_ca;
    if (!opt_.cluster_ca.empty()) {  // a member presents the server's own certificate to a coordinator that asks
      copt.tls_cert_file = opt_.tls.cert_file;
      copt.tls_key_file = opt_.tls.key_file;
    }
    if (auto creds = cluster_channel_credentials(copt); !creds.ok())
      return InvalidArgument(creds.status().message());  // the CA or certificate files are the problem
    if (!opt_.cluster_listen.empty()) {
      coordinator_ = std::make_unique<ClusterCoordinator>(*cluster_plane_, copt);
      grpc::ServerBuilder cb;
      cb.AddListeningPort(opt_.cluster_listen, listener_credentials(opt_.cluster_listen, tls_.get()), &cluster_port_);
      cb.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, opt_.reuse_port ? 1 : 0);
      cb.RegisterService(coordinator_.get());
      cb.SetOption(without_reflection());
      cb.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
      cb.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
      cb.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5000);
      cb.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
      cluster_server_ = cb.BuildAndStart();
      if (!cluster_server_ || cluster_port_ == 0)
        return Unavailable("cannot listen for cluster members on " + opt_.cluster_listen +
                           ": the port is in use (another sgemm-server?) or the address is not this host's");
      log.info("cluster coordinator '{}' on {} (port {}): members join with --join", copt.host, opt_.cluster_listen,
               cluster_port_);
      engine_ = make_cluster_engine(std::move(engine_), *coordinator_);
    } else {
      member_ = std::make_unique<ClusterMember>(*cluster_plane_, opt_.join, copt);
      member_->start();
      log.info("cluster member '{}' joining {}", copt.host, opt_.join);
    }
  }
  for (const auto& d : engine_->info().devices)
    log.info("device {}: {} ({} SMs, {:.1f} GiB)", d.index, d.name, d.sm_count, d.memory_bytes / 1073741824.0);

  ServiceOptions& sopt = opt_.service;
  sopt.idle_timeout = std::chrono::milliseconds(int64_t(opt_.idle_timeout_s * 1000));
  sopt.feed_wait_budget = std::chrono::milliseconds(int64_t(opt_.feed_wait_budget_s * 1000));
  sopt.coalesce.window = std::chrono::microseconds(opt_.coalesce_window_us);
  sopt.ring_spin = std::chrono::microseconds(opt_.ring_spin_us);
  sopt.max_streams_per_connection = opt_.max_streams_per_connection;  // gRPC's HTTP/2 limit, and the service's own
  // The budgets' defaults are shares of what this process may use: half for
  // requests' buffers, a quarter for shared-memory regions.
  const MemoryLimit memory = host_memory_limit();
  const bool host_default = sopt.host_memory_bytes == 0, region_default = sopt.region_bytes == 0;
  if (host_default) sopt.host_memory_bytes = memory.bytes / 2;
  if (region_default) sopt.region_bytes = memory.bytes / 4;
  log.info("memory limit {:.2f} GiB ({}): host memory budget {:.2f} GiB ({}), region budget {:.2f} GiB ({})",
           memory.bytes / 1073741824.0, memory.source, sopt.host_memory_bytes / 1073741824.0,
           host_default ? "half of the limit" : "--host-memory-bytes", sopt.region_bytes / 1073741824.0,
           region_default ? "a quarter of the limit" : "--region-bytes");
  if (sopt.host_memory_bytes + sopt.region_bytes > memory.bytes)
    log.warn(
        "--host-memory-bytes and --region-bytes together exceed the memory limit ({}): a request the budget "
        "admits may be killed by the kernel's OOM killer instead of refused",
        memory.source);
  sopt.version = opt_.version;
  if (!opt_.auth_tokens.empty()) {
    auto loaded = ClientAuth::load(opt_.auth_tokens);
    if (!loaded.ok()) return InvalidArgument(loaded.status().message());  // the file is the problem
    log.info("bearer tokens required: {} clients in {}", (*loaded)->size(), opt_.auth_tokens);
    sopt.auth = std::move(loaded).value();
  }
  sopt.on_serving_change = [this](bool serving) {
    if (!serving) opt_.log->error("no healthy device left: health is NOT_SERVING");
    if (auto* h = health_.load()) h->SetServingStatus(serving);
  };
  service_ = std::make_unique<SgemmService>(*engine_, sopt, opt_.log, opt_.timing_log);
  if (!opt_.metrics_listen.empty()) {
    auto port = service_->start_metrics(opt_.metrics_listen);
    if (!port.ok()) return port.status();
    metrics_port_ = *port;
    log.info("metrics at http://{}/metrics (port {})", opt_.metrics_listen, metrics_port_);
  }
  return Status::Ok();
}

Status Server::start() {
  {
    std::lock_guard lock(mu_);
    if (started_) return FailedPrecondition("Server::start: already started");
    started_ = true;
  }
  auto& log = *opt_.log;
  // Before any listener accepts: the descriptor reserve and the rapid-reset
  // bound on every connection gRPC or the Unix listener accepts.
  ConnectionGuardOptions guard;
  guard.max_resets_per_second = opt_.max_resets_per_second;
  guard.max_open_streams = 2 * opt_.max_streams_per_connection;
  guard.log = [log = opt_.log](const std::string& line) { log->warn("{}", line); };
  install_connection_guard(std::move(guard));
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  if (!opt_.reflection) builder.SetOption(without_reflection());
  // TCP addresses go to gRPC (TLS when configured); unix:PATH sockets
  // (plaintext: the peer's credentials are checked) are accepted by us (their
  // peers' credentials decide region rights) and handed to gRPC per connection.
  std::vector<std::string> tcp;
  for (const auto& l : opt_.listen)
    if (!is_unix_address(l)) tcp.push_back(l);
  std::vector<int> ports(tcp.size(), 0);
  for (std::size_t i = 0; i < tcp.size(); ++i)
    builder.AddListeningPort(tcp[i], listener_credentials(tcp[i], tls_.get()), &ports[i]);
  for (const auto& l : opt_.listen) {
    if (!is_unix_address(l)) continue;
    auto listener = UnixListener::listen(l.substr(5));
    if (!listener.ok()) return listener.status();
    unix_listeners_.push_back(std::move(listener).value());
  }
  builder.RegisterService(service_.get());
  builder.SetMaxReceiveMessageSize(int(opt_.service.max_message_bytes));
  // gRPC sets SO_REUSEPORT by default: a second server on a busy port would
  // start and take a share of new connections. Off unless asked for.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, opt_.reuse_port ? 1 : 0);
  for (const std::string& kv : opt_.grpc_args) {
    const auto arg = parse_grpc_arg(kv).value();  // validated by create()
    builder.AddChannelArgument(arg.first, arg.second);
  }
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, opt_.max_streams_per_connection);
  if (opt_.connection_idle_s > 0)
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, int(std::min(opt_.connection_idle_s * 1000, 2e9)));
  if (opt_.grpc_memory_bytes > 0 || opt_.reflection) {
    quota_ = std::make_unique<grpc::ResourceQuota>("sgemm-server");
    if (opt_.grpc_memory_bytes > 0) quota_->Resize(std::size_t(opt_.grpc_memory_bytes));
    // Only gRPC's sync server draws threads from the quota; reflection is
    // its one service (ours are callback services). One thread always waits
    // for the next call, so N streams need N + 1.
    if (opt_.reflection) quota_->SetMaxThreads(opt_.reflection_streams + 1);
    builder.SetResourceQuota(*quota_);
  }
  server_ = builder.BuildAndStart();
  if (!server_ || std::count(ports.begin(), ports.end(), 0) > 0) {
    std::vector<std::string> failed;
    for (std::size_t i = 0; i < tcp.size(); ++i)
      if (!server_ || ports[i] == 0) failed.push_back(tcp[i]);
    server_.reset();
    unix_listeners_.clear();
    return Unavailable(fmt::format(
        "cannot listen on {}: the port is in use (another sgemm-server? --reuse-port shares a port on purpose) or "
        "the address is not this host's",
        fmt::join(failed, ", ")));
  }
  tcp_ports_ = ports;
  for (auto& l : unix_listeners_)
    l->start(service_->connections(), [this](int fd) { grpc::AddInsecureChannelFromFd(server_.get(), fd); });
  // Health answers for the whole server ("") and for the service by name.
  server_->GetHealthCheckService()->SetServingStatus(v1::Sgemm::service_full_name(), true);
  health_ = server_->GetHealthCheckService();
  const auto& sopt = opt_.service;
  log.info(
      "sgemm-server {} ({}) listening on {} (port {}, {}), backend {}, max {} in flight + {} queued, host memory "
      "budget {:.2f} GiB, region budget {:.2f} GiB, idle timeout {} s",
      opt_.version, sopt.commit, fmt::format("{}", fmt::join(opt_.listen, ", ")), port(),
      !tls_                                 ? "plaintext"
      : tls_->requires_client_certificate() ? "TCP: TLS, client certificates required"
                                            : "TCP: TLS",
      engine_->info().backend, sopt.max_in_flight, sopt.max_queued, sopt.host_memory_bytes / 1073741824.0,
      sopt.region_bytes / 1073741824.0, opt_.idle_timeout_s);
  if (!opt_.port_file.empty()) {
    const std::string tmp = opt_.port_file + ".tmp";
    std::ofstream(tmp) << port() << "\n";
    std::error_code ec;
    std::filesystem::rename(tmp, opt_.port_file, ec);  // appears whole, never half-written
    if (ec) return Internal("--port-file " + opt_.port_file + ": " + ec.message());
  }
  return Status::Ok();
}

void Server::shutdown() {
  shutdown(std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(opt_.shutdown_grace_s * 1000)));
}

void Server::shutdown(std::chrono::steady_clock::time_point deadline) {
  using namespace std::chrono;
  {
    std::unique_lock lock(mu_);
    if (shutting_down_) {  // another thread is at it: wait for it
      cv_.wait(lock, [&] { return stopped_; });
      return;
    }
    shutting_down_ = true;
  }
  if (server_) {
    server_->GetHealthCheckService()->Shutdown();  // NOT_SERVING for every name
    // The service refuses new calls (UNAVAILABLE) and ends streams that carry
    // no request; requests under way may run until the deadline, then are cancelled.
    service_->begin_shutdown();
    if (!service_->wait_for_no_calls(deadline)) {
      opt_.log->warn("shutdown grace ({} s) over: cancelling the requests still open", opt_.shutdown_grace_s);
      service_->cancel_all(Unavailable("server shut down before this request finished (--shutdown-grace " +
                                       fmt::format("{}", opt_.shutdown_grace_s) + " s); retry"));
      service_->wait_for_no_calls(steady_clock::now() + seconds(2));
    }
    // Nothing of ours is left. gRPC sends GOAWAY and waits for each client to
    // close its connection; past this deadline it closes them itself (an idle
    // client may keep its connection open, so the deadline is short). With no
    // deadline at all a connection could close under a client still reading its
    // last response's trailers, which it would then see as UNAVAILABLE.
    for (auto& l : unix_listeners_) l->stop();
    server_->Shutdown(system_clock::now() + milliseconds(250));
    server_->Wait();
    unix_listeners_.clear();  // their socket files go with them, whether or not the process runs destructors
  }
  if (member_) member_->stop();
  if (coordinator_) coordinator_->shutdown();
  if (cluster_server_) cluster_server_->Shutdown(system_clock::now() + seconds(1));
  if (server_) opt_.log->info("sgemm-server stopped");
  std::lock_guard lock(mu_);
  stopped_ = true;
  cv_.notify_all();
}

void Server::wait() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return stopped_; });
}

Status Server::reload_tls() {
  if (!tls_) return FailedPrecondition("no TLS files to reload");
  return tls_->reload();
}

Server::~Server() {
  bool stop = false;
  {
    std::lock_guard lock(mu_);
    stop = !shutting_down_;
  }
  if (stop) shutdown(std::chrono::steady_clock::now());
  wait();
  health_ = nullptr;  // the gRPC server goes first; the engine may still report a fault until it goes
}

}  // namespace sgemm
