// What an answered Multiply request leaves behind, made in one place for both
// of its RPCs (the Multiply stream, multiply_call.h, and MultiplyUnary,
// multiply_unary_call.h): the summary message, the request's log line, its
// timings.jsonl record, its metrics and its trace file (--trace-dir).
//
// Threads: the functions may run on any thread; they lock only the service's
// loggers and metrics.
#pragma once

#include <grpcpp/support/byte_buffer.h>
#include <spdlog/common.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "common/status.h"
#include "server/engine/engine.h"
#include "server/service/request_report.h"

namespace sgemm {

struct ServiceShared;
class AuthClient;

// The request's side of its outcome, as the call that answered it knows it.
struct RequestOutcome {
  using Clock = std::chrono::steady_clock;
  std::string id;
  std::string peer;
  const AuthClient* client = nullptr;  // null without --auth-tokens
  GemmRequest header;
  const char* rpc = "stream";  // "stream" or "unary": the RPC that carried it (log line, timings.jsonl)
  // When it arrived, its last input came, it was handed to a compute slot,
  // computing started and ended; the first chunk of C went out (none: unset).
  Clock::time_point start, received, submitted, compute_start, compute_end;
  std::optional<Clock::time_point> first_send;
  Clock::time_point finished{};  // a failure: when its status went out (unset: now)
  int64_t bytes_in = 0, bytes_out = 0;
  int stripes = 0;           // streams the request used (0 = one)
  bool trace_asked = false;  // header.trace: the summary carries the trace
  std::string result_handle;
  int launch_products = 1;  // products that shared its engine launch (coalescing)
  int early_starts = 0;     // times computing started before the upload ended
  int yields = 0;           // times computing gave its slot back to wait for A
};

// A request that succeeded: its summary (MultiplyResponse{summary}, whose
// bytes are also MultiplyUnaryResponse's `summary` field), after the log line,
// the timings record, the metrics and the trace file are written (so the
// timing line is there when the client looks).
grpc::ByteBuffer answer_success(ServiceShared& shared, const RequestOutcome& outcome, const GemmReport& report);

// A request that failed with `code`: counted, recorded in the metrics, and
// logged at `level` (rate limited) with the phase it ended in.
void record_failure(ServiceShared& shared, const RequestOutcome& outcome, StatusCode code, const std::string& message,
                    const char* phase, spdlog::level::level_enum level);

}  // namespace sgemm
