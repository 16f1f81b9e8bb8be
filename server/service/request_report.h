// What the service makes of a finished request besides the summary: the
// timings record (timings.jsonl, common/timing_record.h) and the Chrome
// trace-event JSON of the request (header.trace, --trace-dir), both from the
// engine's report and the service's own phases.
//
// Trace layout (docs/observability.md): one process "sgemm-server" whose
// thread "request <id>" holds the service's phases (receive, queue, compute)
// and "request <id>: sending C" the send (it overlaps compute); one process per device with a thread per stream: "copy
// in (h2d)", "kernels", "NCCL (comm)", "copy out (d2h)" and "host: waiting for input". A collective is drawn as
// "waiting for peers" then its work. Every slice's args carry bytes, rows and K range (the shard). Opens in
// ui.perfetto.dev or chrome://tracing.
//
// Threads: pure functions, callable from any thread.
#pragma once

#include <cstdint>
#include <string>

#include "common/timing_record.h"
#include "server/engine/engine.h"

namespace sgemm {

// The service's side of one request, times in ms since the request arrived.
struct RequestFacts {
  std::string request_id;
  double unix_time = 0;  // when the summary was written
  GemmRequest request;
  double received_ms = 0;       // the last input chunk arrived
  double submitted_ms = -1;     // it was handed to the compute pool (-1: at received_ms); computing that
                                // starts while A arrives is handed over before received_ms
  double compute_start_ms = 0;  // a compute slot took it
  double compute_end_ms = 0;
  double first_send_ms = -1;  // the first chunk of C went to gRPC (-1: none was sent)
  double summary_ms = 0;      // the summary went to gRPC
  int64_t bytes_in = 0, bytes_out = 0;
};

TimingRecord timing_record_of(const RequestFacts& facts, const GemmReport& report);

// The request as Chrome trace-event JSON (an object with "traceEvents").
std::string chrome_trace_json(const RequestFacts& facts, const GemmReport& report);

}  // namespace sgemm
