// Options of cluster mode (docs/cluster.md), shared by the coordinator and
// its members. Validated once at start-up by main().
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace sgemm {

struct ClusterOptions {
  // This process's name in timings, logs and errors ("" = the host name).
  std::string host;
  // Building a communicator over every rank (ncclCommInitRank on all of them).
  int64_t connect_timeout_ms = 60000;
  // After the coordinator's own part of a job, how long a member may take to
  // answer before the job fails (UNAVAILABLE naming it).
  int64_t job_timeout_ms = 600000;
  // Bytes of the timed broadcast that measures the link between hosts each
  // time the communicator is rebuilt (64 MiB: past NCCL's latency-bound sizes).
  int64_t probe_bytes = int64_t{64} << 20;
  // Run every fp32 request on the cluster when members are present, whatever
  // the cost model says (benchmarks and tests).
  bool always = false;
  // A member that did not answer `ready` for a new communicator within
  // connect_timeout_ms is dropped and may not join again under its name for
  // this long: it holds one request, not every one (docs/security.md).
  int64_t rejoin_ban_ms = 60000;
  // A member whose coordinator is gone tries to join again after this long.
  int64_t rejoin_interval_ms = 1000;
  // Trust (cluster_trust.h, docs/security.md). The shared secret every
  // process of the cluster holds (--cluster-token-file): the coordinator
  // refuses a Join without it; "" = none.
  std::string token;
  // A member's TLS to its coordinator: the CA that signed the coordinator's
  // certificate (--cluster-ca; "" = plaintext), and the member's own
  // certificate and key (its --tls-cert/--tls-key) for a coordinator that
  // asks for one (--tls-client-ca).
  std::string tls_ca_file, tls_cert_file, tls_key_file;
  // Messages for the server log; null = silent. Called from any thread.
  std::function<void(std::string_view)> log;
};

}  // namespace sgemm
