// sgemm-server: owns this host's GPUs (or its CPU) and serves sgemm.v1 over gRPC.
//
//   sgemm-server --listen 0.0.0.0:50051 --backend auto --log-dir /var/log/sgemm
//   sgemm-server --listen 0.0.0.0:50051 --metrics-listen 0.0.0.0:9090      (logs on stdout: containers)
//   sgemm-server --listen 0.0.0.0:50051 --listen unix:/run/sgemm/sgemm.sock   (regions: docs/transport.md)
//
// SIGINT/SIGTERM: stop accepting, let requests in flight finish within
// --shutdown-grace, cancel the rest, exit 0 (docs/lifecycle.md).
// SIGHUP: reload the TLS certificate, key and client CA (docs/security.md).
//
// This file is the command line: flags into sgemm::ServerOptions
// (server/app/server.h) and the process's logs (server/app/process_setup.h),
// the engine through the engine factory, and signals turned into Server calls.
// The Server does the rest.
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <thread>

#include "server/app/cluster_env.h"
#include "server/app/process_setup.h"
#include "server/app/server.h"
#include "server/engine/engine_factory.h"

#ifndef SGEMM_VERSION
#define SGEMM_VERSION "dev"
#endif
#ifndef SGEMM_COMMIT
#define SGEMM_COMMIT "unknown"
#endif

namespace {

int g_signal_pipe[2] = {-1, -1};

extern "C" void on_stop_signal(int sig) {
  const unsigned char b = static_cast<unsigned char>(sig);
  [[maybe_unused]] ssize_t n = write(g_signal_pipe[1], &b, 1);  // async-signal-safe
}

// What the flags fill: the Server's options, and what main() uses itself to
// open the logs and build the engine.
struct CommandLine : sgemm::ServerOptions {
  std::string devices = "all";       // "all" or a comma list of CUDA ordinals
  std::string backend = "auto";      // auto | cuda | cpu
  std::string kernel;                // pingpong | cublas; "" = the engine's default
  sgemm::LogOptions logs;            // --log-dir, --log-max-bytes, --log-max-files, --log-level
  int cpu_threads = 0;               // OpenBLAS threads for the cpu backend; 0 = all cores
  double collective_timeout_s = 60;  // a split job's NCCL collectives must finish within this
  // Page-locked memory pinned at start-up for request buffers (cuda backend):
  // 4 GiB holds one 16384^3 request's A, B and C; 0 = pin buffers as they come.
  int64_t pinned_pool_bytes = int64_t(4) << 30;
  // Resident matrices (docs/resident.md): bytes per GPU (cuda) or of host
  // memory (cpu) that PutMatrix and kept results may hold; 0 = the engine's
  // default (8 GiB per GPU, 1 GiB on cpu).
  int64_t resident_bytes = 0;
  bool no_warm_up = false;          // skip the start-up warm-up (to measure what it saves)
  bool no_kernel_autotune = false;  // the measured table alone picks the fp32 kernel (docs/engine.md)
};

}  // namespace

int main(int argc, char** argv) {
  // SIGINT/SIGTERM: a handler writes the signal number to a pipe, whichever
  // thread takes it (libraries such as OpenBLAS start threads before main, so
  // masking alone cannot route signals); a waiter thread reads the pipe and
  // shuts the server down gracefully.
  // Every thread main() starts (gRPC's, the engine's) inherits a mask that
  // blocks them; only the waiter unblocks them, so the signal lands on a
  // thread that is waiting in read() (which ThreadSanitizer builds need: they
  // run a handler only where the thread enters an intercepted call).
  if (pipe(g_signal_pipe) != 0) return 1;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  CommandLine opt;
  CLI::App app{"sgemm-server: multi-GPU SGEMM over gRPC (sgemm.v1)"};
  app.footer(
      "Flags marked Env may come from that environment variable instead (a flag given wins). Exit codes: 0 after "
      "SIGTERM/SIGINT, 1 when the engine, a listener or the metrics endpoint cannot start, 2 for bad flags or "
      "files (docs/operations.md).");
  app.add_option("--listen", opt.listen,
                 "address:port to serve on, or unix:PATH for local callers (shared-memory regions); repeat for "
                 "several")
      ->envname("SGEMM_LISTEN")
      ->capture_default_str();
  app.add_option("--devices", opt.devices, "GPUs to own: all, or a list such as 0,1")->capture_default_str();
  app.add_option("--backend", opt.backend, "auto (GPU if usable, else CPU), cuda, or cpu")
      ->check(CLI::IsMember({"auto", "cuda", "cpu"}))
      ->envname("SGEMM_BACKEND")
      ->capture_default_str();
  app.add_option("--kernel", opt.kernel,
                 "GPU kernel for shapes the measured kernel-choice table does not assign (default pingpong)")
      ->check(CLI::IsMember({"pingpong", "cublas"}));
  app.add_option("--max-matrix-elements", opt.service.limits.max_matrix_elements,
                 "largest A, B or C accepted, in elements")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--min-upload-rate", opt.service.limits.min_upload_bytes_per_s,
                 "bytes/s an upload holding server memory must average after --idle-timeout of grace (0 = no minimum; "
                 "docs/security.md)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--max-output-ratio", opt.service.limits.max_output_ratio,
                 "a C the server holds may be at most this many times its inputs' bytes, or --output-floor-bytes "
                 "(0 = no bound; docs/security.md)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--output-floor-bytes", opt.service.limits.output_floor_bytes,
                 "a C of up to this many bytes is never refused by --max-output-ratio")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--max-in-flight", opt.service.max_in_flight, "requests computed at once")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--max-queued", opt.service.max_queued,
                 "uploaded requests that may wait for a compute slot (and requests that may wait for host memory); "
                 "more are refused")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--host-memory-bytes", opt.service.host_memory_bytes,
                 "host memory all requests' buffers share, page-locked and pageable (0 = half of the memory limit, "
                 "min(physical memory, the cgroup's memory limit): a container's or a pod's limit)")
      ->check(CLI::NonNegativeNumber)
      ->envname("SGEMM_HOST_MEMORY_BYTES")
      ->capture_default_str();
  app.add_option("--region-bytes", opt.service.region_bytes,
                 "shared-memory regions callers may register at once (page-locked; 0 = a quarter of the memory "
                 "limit, min(physical memory, the cgroup's memory limit))")
      ->check(CLI::NonNegativeNumber)
      ->envname("SGEMM_REGION_BYTES")
      ->capture_default_str();
  app.add_option("--region-bytes-per-user", opt.service.region_bytes_per_user,
                 "without --auth-tokens, the regions one Unix user may register at once, all its connections "
                 "together (0 = a quarter of --region-bytes; with tokens the token file's max_region_bytes applies)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--idle-timeout", opt.idle_timeout_s,
                 "seconds a stream may make no progress (client silent or not reading) before it is ended")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--connection-idle-timeout", opt.connection_idle_s,
                 "seconds a connection may carry no call before the server closes it (clients reconnect at their "
                 "next call; 0 = never)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--feed-wait-budget", opt.feed_wait_budget_s,
                 "seconds the engine may wait, in all, for A after it started computing during the upload; "
                 "0 = compute only complete uploads (docs/lifecycle.md)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--inline-compute-ms", opt.service.inline_compute_ms,
                 "a complete request the engine estimates at most this many ms is computed on the gRPC thread that "
                 "received it, when a compute slot is idle (no hand-off to a compute thread); 0 = always hand over "
                 "(docs/lifecycle.md)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  // Their bounds are checked at start-up (Server::start), naming the flag.
  app.add_option("--coalesce-window-us", opt.coalesce_window_us,
                 "microseconds a launch of small requests waits for more to share it when it found fewer than "
                 "--coalesce-max-products, counted from the oldest's arrival; 0 = take what waits (no wait added "
                 "to an idle server); at most 100000 (docs/lifecycle.md)")
      ->capture_default_str();
  app.add_option("--coalesce-max-products", opt.service.coalesce.max_products,
                 "most small requests the server runs as one group launch (natural batching: those that waited "
                 "while the compute slots were busy); 1 = no coalescing (docs/lifecycle.md)")
      ->capture_default_str();
  app.add_option("--coalesce-max-bytes", opt.service.coalesce.max_bytes,
                 "a single-product request with every operand in its messages is small enough to coalesce when its "
                 "A + B + C take at most this many bytes")
      ->capture_default_str();
  app.add_option("--shutdown-grace", opt.shutdown_grace_s,
                 "on SIGTERM, seconds requests in flight may take to finish before they are cancelled")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--max-open-streams", opt.service.max_open_streams,
                 "Multiply and PutMatrix streams open and not yet answered, all connections together; more get "
                 "UNAVAILABLE")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--max-streams-per-address", opt.service.max_streams_per_address,
                 "open streams one remote IP (or Unix user) may hold without a token (0 = no bound: callers "
                 "behind one proxy; docs/security.md)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--max-resets-per-second", opt.max_resets_per_second,
                 "HTTP/2 streams one connection (plaintext or TLS) may reset within a second; over it the connection "
                 "is closed, and a plaintext address closed 3 times gets 1/20 of the bound for 10 s (rapid reset; "
                 "0 = no bound)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--max-stripes", opt.service.max_stripes,
                 "most streams (connections) one Multiply request may spread over (GemmHeader.stripes); each "
                 "counts against --max-open-streams")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--grpc-memory-bytes", opt.grpc_memory_bytes,
                 "memory gRPC may buffer, all connections together (unfinished messages included); near it, "
                 "gRPC closes the connections holding the most (0 = unlimited; docs/lifecycle.md)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--max-streams-per-connection", opt.max_streams_per_connection,
                 "concurrent HTTP/2 streams one connection may open (counted by the service too, whatever SETTINGS "
                 "the client acknowledged)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--grpc-arg", opt.grpc_args,
                 "NAME=INT: an integer gRPC server argument (HTTP/2 and TCP tuning; repeatable; docs/transport.md)");
  app.add_option("--max-message-bytes", opt.service.max_message_bytes,
                 "largest message gRPC accepts; chunks over the chunk limit but under this get a message saying "
                 "to chunk")
      ->check(CLI::Range(int64_t{4} << 20, int64_t{1} << 30))
      ->capture_default_str();
  app.add_option("--log-lines-per-second", opt.service.log_lines_per_second,
                 "failed-request log lines per second; the rest are counted (0 = no limit)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--response-chunk-bytes", opt.service.response_chunk_bytes, "payload of each C chunk sent back")
      ->check(CLI::Range(int64_t{4096}, int64_t{(4 << 20) - 1024}))
      ->capture_default_str();
  app.add_option("--collective-timeout", opt.collective_timeout_s,
                 "seconds a multi-GPU job may hold the NCCL communicator; past it the communicator is aborted and "
                 "rebuilt over the healthy GPUs")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--cpu-threads", opt.cpu_threads, "OpenBLAS threads for the cpu backend (0 = all cores)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--log-dir", opt.logs.dir,
                 "directory for sgemm-server.log and timings.jsonl, rotated by size (without it: the request log on "
                 "stdout only, no timings.jsonl; containers)")
      ->envname("SGEMM_LOG_DIR");
  app.add_option("--log-max-bytes", opt.logs.max_bytes,
                 "with --log-dir: a log file is rotated (sgemm-server.1.log, timings.1.jsonl, ...) at this size")
      ->check(CLI::Range(int64_t{4096}, int64_t{1} << 40))
      ->capture_default_str();
  app.add_option("--log-max-files", opt.logs.max_files, "with --log-dir: rotated files kept of each log")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_flag("--reuse-port", opt.reuse_port,
               "let other processes listen on the same TCP port (SO_REUSEPORT; the kernel spreads new connections "
               "over them). Without it a busy port is an error at start-up");
  app.add_option("--port-file", opt.port_file,
                 "write the bound port to this file once serving (the image's HEALTHCHECK reads it)")
      ->envname("SGEMM_PORT_FILE");
  app.add_option("--log-level", opt.logs.level, "trace, debug, info, warn, error")
      ->envname("SGEMM_LOG_LEVEL")
      ->capture_default_str();
  app.add_flag("--reflection", opt.reflection,
               "offer gRPC server reflection (for grpcurl without the .proto); off by default: each reflection "
               "stream holds a server thread and needs no token (docs/security.md)");
  app.add_option("--metrics-listen", opt.metrics_listen,
                 "serve Prometheus metrics at http://ADDR:PORT/metrics (e.g. 0.0.0.0:9090; port 0 picks one)")
      ->envname("SGEMM_METRICS_LISTEN");
  app.add_flag("--metrics-plaintext", opt.metrics_plaintext,
               "with --tls-cert, let --metrics-listen name a non-loopback address (metrics are plain HTTP)");
  app.add_option("--trace-dir", opt.service.trace_dir,
                 "write a Chrome trace-event JSON of every request here (trace-<id>.json; opens in ui.perfetto.dev)");
  app.add_option("--pinned-pool-bytes", opt.pinned_pool_bytes,
                 "page-locked memory pinned at start-up for request buffers (cuda backend; 0 = none)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--resident-bytes", opt.resident_bytes,
                 "resident matrices' budget (docs/resident.md): bytes per GPU on cuda, host bytes on cpu; evictable "
                 "matrices are dropped least recently used first when it is full (0 = 8 GiB per GPU, 1 GiB on cpu)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_flag("--no-warm-up", opt.no_warm_up,
               "skip loading kernels and cuBLAS on every GPU at start-up (the first requests then pay for it)");
  app.add_flag("--no-kernel-autotune", opt.no_kernel_autotune,
               "cuda: pick the fp32 kernel of a request that names none from the measured table alone, without "
               "timing ping-pong against cuBLAS on each new kernel shape (docs/engine.md, \"Kernel choice\")");
  app.add_option("--tls-cert", opt.tls.cert_file,
                 "PEM certificate chain: TCP listeners speak TLS only (reloaded on SIGHUP)")
      ->check(CLI::ExistingFile);
  app.add_option("--tls-key", opt.tls.key_file, "PEM private key of --tls-cert")->check(CLI::ExistingFile);
  app.add_option("--tls-client-ca", opt.tls.client_ca_file,
                 "PEM CA: require client certificates it signed (mutual TLS)")
      ->check(CLI::ExistingFile);
  app.add_option("--auth-tokens", opt.auth_tokens,
                 "JSON file of bearer tokens, client names and quotas (docs/security.md); calls need a token")
      ->check(CLI::ExistingFile);
  auto* cluster_listen =
      app.add_option("--cluster-listen", opt.cluster_listen,
                     "coordinate a cluster: address:port other servers --join (docs/cluster.md; in a "
                     "LeaderWorkerSet, pod 0 takes 0.0.0.0:50052 unless this or --join is given)");
  app.add_option("--join", opt.join,
                 "join the cluster of the coordinator at this address:port (its --cluster-listen; in a "
                 "LeaderWorkerSet, pods 1.. join LWS_LEADER_ADDRESS:50052 unless given)")
      ->excludes(cluster_listen);
  app.add_option("--cluster-name", opt.cluster_name, "this server's name in a cluster (default: the host name)");
  app.add_option("--cluster-token-file", opt.cluster_token_file,
                 "file whose first line is the cluster's shared secret: the coordinator admits only members that "
                 "send it, members send it (docs/security.md)")
      ->check(CLI::ExistingFile);
  app.add_option("--cluster-ca", opt.cluster_ca,
                 "member: reach the coordinator over TLS, trusting this CA (and presenting --tls-cert/--tls-key)")
      ->check(CLI::ExistingFile);
  app.add_flag("--cluster-always", opt.cluster_always,
               "coordinator: run every fp32 request over the cluster, whatever the cost model says");
  app.add_option("--cluster-timeout", opt.cluster_timeout_s,
                 "seconds to build a cluster communicator; a member may take 10x this to finish its part of a job")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // --help: 0; a bad flag: 2, after CLI11's message
  }

  // Logging: one line per request on stdout (and in --log-dir), timings as JSON lines.
  auto logs = sgemm::open_process_logs(opt.logs);
  if (!logs.ok()) {
    std::fprintf(stderr, "sgemm-server: %s\n", logs.status().message().c_str());
    return 2;
  }
  auto log = logs->log;
  spdlog::set_default_logger(log);
  opt.log = log;
  opt.timing_log = logs->timing_log;
  if (const auto [before, after] = sgemm::raise_open_files_limit(); after != before)
    log->info("open files: soft limit raised from {} to {} (every connection is a descriptor)", before, after);
  // In a LeaderWorkerSet the LWS_* variables choose the cluster role (deploy/k8s/lws).
  if (auto role = sgemm::apply_cluster_env([](const char* name) { return std::getenv(name); }, &opt); !role.ok()) {
    log->error("{}", role.status().message());
    return 2;
  } else if (!role->empty()) {
    log->info("{}", *role);
  }

  sgemm::EngineOptions eopt;
  sgemm::parse_backend_choice(opt.backend, &eopt.backend);
  if (!opt.kernel.empty()) eopt.kernel = sgemm::parse_kernel_kind(opt.kernel);
  eopt.cpu_threads = opt.cpu_threads;
  eopt.pinned_pool_bytes = std::size_t(opt.pinned_pool_bytes);
  eopt.warm_up = !opt.no_warm_up;
  eopt.kernel_autotune = !opt.no_kernel_autotune;
  if (opt.resident_bytes > 0) eopt.resident_bytes = opt.resident_bytes;
  eopt.collective_timeout_s = opt.collective_timeout_s;
  eopt.log = [log](std::string_view msg) { log->info("engine: {}", msg); };
  if (auto devices = sgemm::parse_device_list(opt.devices); devices.ok()) {
    eopt.devices = std::move(devices).value();
  } else {
    log->error("{}", devices.status().message());
    return 2;
  }
  opt.make_engine = [eopt, log, backend = opt.backend]() -> sgemm::StatusOr<std::unique_ptr<sgemm::Engine>> {
    const auto t_engine = std::chrono::steady_clock::now();
    auto built = sgemm::make_engine(eopt);
    if (!built.ok())
      return sgemm::Status(built.status().code(),
                           "cannot start the " + backend + " backend: " + built.status().to_string());
    if (built->fell_back) {
      log->warn("**************************************************************");
      log->warn("* {}", built->note);
      log->warn("* Requests are computed on the CPU: expect GFLOP/s, not TFLOP/s.");
      log->warn("**************************************************************");
    } else {
      log->info("{}", built->note);
    }
    log->info("engine ready in {:.0f} ms",
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_engine).count());
    return std::move(built->engine);
  };
  opt.make_cluster_plane = [eopt] { return sgemm::make_cluster_plane(eopt); };
  opt.version = SGEMM_VERSION;
  opt.service.commit = SGEMM_COMMIT;
  opt.service.backends = sgemm::built_backends();

  // Bad options and files exit 2; an engine, listener or endpoint that cannot start exits 1.
  auto created = sgemm::Server::create(std::move(static_cast<sgemm::ServerOptions&>(opt)));
  sgemm::Status started = created.ok() ? (*created)->start() : created.status();
  if (!started.ok()) {
    log->error("{}", started.message());
    return started.code() == sgemm::StatusCode::kInvalidArgument ? 2 : 1;
  }
  sgemm::Server& server = **created;

  std::thread waiter([&] {
    pthread_sigmask(SIG_UNBLOCK, &stop_signals, nullptr);
    unsigned char sig = 0;
    for (;;) {
      while (read(g_signal_pipe[0], &sig, 1) < 0 && errno == EINTR) {
      }
      if (sig != SIGHUP) break;
      // SIGHUP: new handshakes get the new files; open connections and their requests carry on.
      if (!server.has_tls()) {
        log->info("SIGHUP: no TLS files to reload");
      } else if (auto st = server.reload_tls(); st.ok()) {
        log->info("SIGHUP: TLS certificate reloaded; new connections get it within {} s",
                  server.options().tls.refresh_interval_s);
      } else {
        log->error("SIGHUP: TLS files not reloaded, the previous ones stay in use: {}", st.message());
      }
    }
    log->info("signal {} received: refusing new requests, finishing those in flight (up to {} s)", sig,
              server.options().shutdown_grace_s);
    server.shutdown();
  });
  server.wait();
  waiter.join();
  return 0;
}
