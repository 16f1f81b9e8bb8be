#include "server_flags.h"

void add_server_flags(CLI::App& app, CommandLine& opt) {
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
                 "GPU kernel where the measured kernel speeds have no rate for a shape's class (default pingpong)")
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
  app.add_option("--max-rings", opt.service.max_rings,
                 "request rings open at once, all callers together (each holds a thread while open); more get "
                 "RESOURCE_EXHAUSTED (docs/transport.md)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--ring-spin-us", opt.ring_spin_us,
                 "microseconds a request ring's thread polls the ring after its last request or answer before it "
                 "sleeps until the caller posts (a busy core meanwhile; docs/transport.md)")
      ->check(CLI::Range(int64_t{0}, int64_t{100000}))
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
  app.add_option("--reflection-streams", opt.reflection_streams,
                 "with --reflection, reflection streams served at once (a thread each); past it a call is refused "
                 "RESOURCE_EXHAUSTED")
      ->capture_default_str();
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
  app.add_option("--lanes-per-gpu", opt.lanes_per_gpu,
                 "cuda: requests each GPU runs at once, each on its own streams (a lane); more lanes overlap more "
                 "small products' copies and launches (docs/engine.md)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_flag("--no-warm-up", opt.no_warm_up,
               "skip loading kernels and cuBLAS on every GPU at start-up (the first requests then pay for it)");
  app.add_flag("--no-kernel-autotune", opt.no_kernel_autotune,
               "cuda: pick the fp32 kernel of a request that names none from the measured speeds alone, without "
               "timing ping-pong against cuBLAS on each new kernel shape (docs/engine.md, \"Kernel choice\")");
  app.add_option("--kernel-speeds", opt.kernel_speeds,
                 "cuda: a file of kernel speeds measured on this host's GPUs by sgemm-bench, added to the built-in "
                 "ones; a GPU named there decides its fp32 kernel from them (docs/kernels.md, \"One selection\")")
      ->check(CLI::ExistingFile);
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
}
