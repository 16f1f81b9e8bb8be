// Prometheus metrics of sgemm-server, served over HTTP on --metrics-listen
// (prometheus-cpp's registry and text format; a small HTTP/1.0 endpoint of
// our own, see service_metrics.cc). What is exported (docs/observability.md lists each):
//   sgemm_requests_total{code,client}            finished Multiply calls by gRPC status code and token
//                                                client (--auth-tokens; "" without tokens)
//   sgemm_request_phase_seconds{phase}           histogram: receive, queue, compute, send, total (successes)
//   sgemm_received_bytes_total / sgemm_sent_bytes_total   matrix payload in and out
//   sgemm_gpu_busy_seconds_total{device,phase}   working time: copy_in, kernel, reduce, copy_out
//   sgemm_gpu_wait_seconds_total{device,phase}   waiting: copy_in (input), kernel, reduce (peers), copy_out, order
//   sgemm_queued_requests, sgemm_in_flight_requests, sgemm_open_streams,
//   sgemm_host_memory_in_use_bytes, sgemm_host_memory_budget_bytes   gauges, read at scrape time
//
// Threads: record() may be called from any thread; the gauges' source is
// called on the HTTP server's threads at each scrape.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "common/status.h"
#include "common/timing_record.h"

namespace sgemm {

// The service's load, read at each scrape.
struct LoadGauges {
  int queued = 0, in_flight = 0, open_streams = 0;
  int64_t host_bytes_in_use = 0, host_bytes_budget = 0;
};

class ServiceMetrics {
 public:
  // Serves /metrics on `listen` ("127.0.0.1:9090", "0.0.0.0:9090"; port 0
  // picks a free one). UNAVAILABLE when it cannot listen there.
  static StatusOr<std::unique_ptr<ServiceMetrics>> start(const std::string& listen, std::function<LoadGauges()> load);
  ~ServiceMetrics();

  int port() const;  // the port bound

  // One finished call: its code and payload; `timings` for a success (phases
  // and per-device figures), null for a failure.
  void record(StatusCode code, const std::string& client, int64_t bytes_in, int64_t bytes_out,
              const TimingRecord* timings);

 private:
  struct Impl;
  explicit ServiceMetrics(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sgemm
