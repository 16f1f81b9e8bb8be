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
// This file is the command line: flags (server_flags.h) into sgemm::ServerOptions
// (server/app/server.h) and the process's logs (server/app/process_setup.h),
// the engine through the engine factory, and signals turned into Server calls.
// The Server does the rest.
#include <absl/synchronization/mutex.h>
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
#include "server_flags.h"

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

}  // namespace

int main(int argc, char** argv) {
  // gRPC's locks are absl::Mutex. An absl built without NDEBUG (Debian's
  // packages) checks every lock against a process-wide lock-order graph
  // behind one global spinlock: about 50 ns more per lock, and some 45 locks
  // per small request. That check is for debugging gRPC, not for serving.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
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
  add_server_flags(app, opt);
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
  eopt.lanes_per_gpu = opt.lanes_per_gpu;
  eopt.warm_up = !opt.no_warm_up;
  eopt.kernel_autotune = !opt.no_kernel_autotune;
  if (!opt.kernel_speeds.empty()) {
    auto speeds = sgemm::load_kernel_speeds(opt.kernel_speeds);
    if (!speeds.ok()) {
      log->error("{}", speeds.status().message());
      return 2;
    }
    eopt.kernel_speeds = std::move(speeds).value();
    log->info("kernel speeds: {} measured rows ({} built in, the rest from {})", eopt.kernel_speeds->rows().size(),
              sgemm::KernelSpeeds::built_in().rows().size(), opt.kernel_speeds);
  }
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
  // Stopped: every request has ended, the listeners are closed, the socket
  // files removed. The process ends here, without destructors: gRPC 1.51's
  // global clean-up waits up to 10 s for connection objects that its stopped
  // pollers no longer free (SIGTERM beside a large product's connection
  // overran --shutdown-grace by 10 s in 4 of 7 runs on an H100), and the
  // system returns GPU and page-locked memory faster than the engine's
  // teardown would. The logs flush every line; stdio is flushed here.
  log->flush();
  if (logs->timing_log) logs->timing_log->flush();
  std::fflush(nullptr);
  std::_Exit(0);
}
