// sgemm::Client: a small C++ library for sgemm-server (sgemm.v1).
//
//   auto client = sgemm::Client::connect("localhost:50051");
//   auto result = (*client)->multiply({m, n, k}, a, b, /*c=*/nullptr, {});
//   if (result.ok()) use(result->c, result->summary.devices);
//
// It streams A, B (and C) in chunks and reassembles C from the server's
// chunks. Thread-safe: one Client may serve many threads (gRPC channels are).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/gemm_types.h"
#include "common/status.h"

namespace sgemm {

// Retries of a Multiply that got UNAVAILABLE (server busy, shutting down, not
// reachable): bounded exponential backoff with +-20% jitter, within the
// request's deadline. docs/lifecycle.md gives the same policy as a gRPC
// service config for clients in other languages.
struct RetryPolicy {
  int max_attempts = 5;                           // attempts in all; 1 = never retry (--no-retry)
  std::chrono::milliseconds initial_backoff{50};  // wait before the first retry
  std::chrono::milliseconds max_backoff{2000};    // the longest wait between attempts
  double multiplier = 2.0;                        // each wait is this times the previous one
};

struct ClientOptions {
  int64_t chunk_bytes = 1 << 20;  // payload of each chunk sent (1 MiB: docs/transport.md)
  RetryPolicy retry;              // for Multiply's UNAVAILABLE
};

struct MultiplyOptions {
  float alpha = 1.0f;
  float beta = 0.0f;                       // applies to C when C is given
  Precision precision = Precision::kFp32;  // tf32 and fp32x3 run their own kernels (leave kernel unset)
  std::optional<KernelKind> kernel;        // nullopt: the server chooses per shape
  SplitMode split = SplitMode::kAuto;      // kAuto: the server's planner decides
  std::chrono::milliseconds timeout{0};    // 0 = no deadline
  // Called as rows of C arrive: elements [offset, offset + count) are final.
  std::function<void(int64_t offset, int64_t count)> on_chunk;
};

struct DeviceTimingResult {
  int index = -1;
  std::string name;
  int64_t row_begin = 0, row_end = 0, k_begin = 0, k_end = 0;
  double copy_in_ms = 0, kernel_ms = 0, reduce_ms = 0, copy_out_ms = 0;
  std::string host{};  // the server owning the GPU in a cluster (docs/cluster.md); "" = the one asked
};

struct MultiplySummary {
  std::string request_id, backend, kernel, split, plan_reason;
  std::string precision;  // the arithmetic that ran: "fp32", "tf32", "fp32x3"
  std::vector<DeviceTimingResult> devices;
  double queue_ms = 0, receive_ms = 0, compute_ms = 0, total_ms = 0;
};

struct MultiplyResult {
  std::vector<float> c;  // m x n, row-major
  MultiplySummary summary;
  int64_t bytes_sent = 0;      // matrix payload sent
  int64_t bytes_received = 0;  // matrix payload received
  double wall_ms = 0;          // as the client saw it, connect excluded, retries included
  int attempts = 1;            // 1 + retries after UNAVAILABLE
};

struct ServerInfo {
  struct Device {
    int index = -1;
    std::string name;
    int64_t memory_bytes = 0;
    int sm_count = 0, compute_major = 0, compute_minor = 0;
  };
  std::string version, backend;
  std::vector<std::string> backends, kernels;
  std::vector<std::string> precisions;  // what the running backend offers, fp32 first
  std::vector<Device> devices;
  int64_t max_matrix_elements = 0, max_chunk_bytes = 0;
  int64_t host_memory_bytes = 0;
  int max_in_flight = 0, max_queued = 0;
  int in_flight = 0, queued = 0, open_streams = 0;
  int64_t requests_total = 0, requests_failed = 0, host_bytes_in_use = 0;
};

class Client {
 public:
  virtual ~Client() = default;
  // Makes a channel to `target` ("host:port"); connects lazily.
  static std::unique_ptr<Client> connect(const std::string& target, const ClientOptions& options = {});

  // C = alpha*A*B + beta*C on the server. `c` may be null (no C input).
  // Row-major, dense: a is m x k, b is k x n, c is m x n. UNAVAILABLE is
  // retried per ClientOptions::retry; the timeout covers every attempt.
  virtual StatusOr<MultiplyResult> multiply(const GemmShape& shape, const float* a, const float* b, const float* c,
                                            const MultiplyOptions& options) = 0;
  virtual StatusOr<ServerInfo> info(std::chrono::milliseconds timeout = std::chrono::milliseconds(10000)) = 0;
  // grpc.health.v1 Check for `service` ("" = the whole server): true when SERVING.
  virtual StatusOr<bool> serving(const std::string& service = "",
                                 std::chrono::milliseconds timeout = std::chrono::milliseconds(3000)) = 0;
};

}  // namespace sgemm
