// One request's timings as a plain record, and the one function that writes
// it as JSON: the server's timings.jsonl lines and `sgemm-client submit
// --json` are both this record (schema "sgemm.timing/1", documented field by
// field in docs/observability.md), so sgemm-timings reads either.
//
// No gRPC, protobuf or CUDA: the service fills it from the engine's report,
// the client from the summary it received.
//
// Threads: pure functions, callable from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/gemm_types.h"
#include "common/status.h"

namespace sgemm {

inline constexpr const char* kTimingSchema = "sgemm.timing/1";

// One device's phases, each split into working and waiting (the server's
// DeviceTiming; docs/observability.md defines each).
struct DeviceTimingRecord {
  int index = -1;  // CUDA ordinal; -1 for the CPU
  std::string name;
  int64_t row_begin = 0, row_end = 0, k_begin = 0, k_end = 0;
  double copy_in_ms = 0, copy_in_wait_ms = 0;
  double kernel_ms = 0, kernel_wait_ms = 0;
  double reduce_ms = 0, reduce_wait_ms = 0;
  double copy_out_ms = 0, copy_out_wait_ms = 0;
  double order_wait_ms = 0;
};

// One concrete kernel the request launched and how many times.
struct KernelRowRecord {
  std::string name;
  int64_t launches = 0;
};

// What only the client sees (present in the client's --json, absent in the log).
struct ClientTimingRecord {
  double total_ms = 0;  // as the client saw it, retries included
  int attempts = 1;
  int64_t bytes_sent = 0, bytes_received = 0;
  std::vector<double> total_ms_all;  // every run of --repeat, in order (empty for one run)
};

struct TimingRecord {
  std::string request_id;
  std::string caller;  // the token's client name (--auth-tokens); "" without tokens
  double time = 0;     // Unix seconds when the summary was written (the server's clock)
  GemmShape shape;
  bool has_c = false;
  std::string backend, kernel, precision, split, plan;
  // Every concrete kernel that ran, in the order of first use, with its
  // launches; `kernel` is the one with the most. Empty: not reported.
  std::vector<KernelRowRecord> kernel_rows;
  // The service's phases, in milliseconds (docs/observability.md).
  double receive_ms = 0, queue_ms = 0, compute_ms = 0, send_ms = 0, total_ms = 0;
  int64_t bytes_in = 0, bytes_out = 0;  // matrix payload the server received and sent
  std::vector<DeviceTimingRecord> devices;
  std::vector<std::pair<std::string, double>> engine_host_ms;  // the engine's host time by step (may be empty)
  std::optional<ClientTimingRecord> client;
};

// One line of JSON (no newline), keys as docs/observability.md lists them.
// `extra_json`, when given, must be a JSON object; its members are added at
// the top level (the CLI's "verify", "seed", "out").
std::string timing_record_json(const TimingRecord& record, const std::string& extra_json = "");

// Parses a line timing_record_json() wrote; INVALID_ARGUMENT for anything else.
StatusOr<TimingRecord> parse_timing_record(const std::string& json);

}  // namespace sgemm
