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
//   sgemm_host_memory_in_use_bytes, sgemm_host_memory_budget_bytes,
//   sgemm_region_bytes_in_use, sgemm_region_budget_bytes, sgemm_regions,
//   sgemm_resident_bytes_in_use{device}, sgemm_resident_budget_bytes, sgemm_resident_matrices,
//   sgemm_device_healthy{device,name}, sgemm_device_memory_bytes{device,name}   gauges, read at scrape time
//   sgemm_build_info{version,commit}             always 1: which build is running
//   sgemm_launch_products                        histogram: products per launch of small requests that
//                                                went through the coalescer (1: ran alone)
//   sgemm_kernel_launches_total{row}             engine launches of each concrete kernel (registry row,
//                                                "cublas_sgemm", "openblas"), of successful requests
//
// Threads: record() may be called from any thread; the gauges' source is
// called on the HTTP server's threads at each scrape.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/timing_record.h"

namespace sgemm {

// One device as the gauges show it.
struct DeviceGauge {
  std::string label;  // the CUDA ordinal, or "cpu"
  std::string name;
  bool healthy = true;           // false once taken out of service (a sticky CUDA error, a failed collective)
  int64_t memory_bytes = 0;      // its memory (host memory for the cpu backend: 0, not known here)
  int64_t memory_used = -1;      // in use on it now, every process's; -1: not known (cpu, out of service)
  int64_t resident_in_use = -1;  // resident matrices' bytes on it; -1: no resident store
};

// The service's load, read at each scrape.
struct LoadGauges {
  int queued = 0, in_flight = 0, open_streams = 0;
  int64_t host_bytes_in_use = 0, host_bytes_budget = 0;
  int64_t region_bytes_in_use = 0, region_bytes_budget = 0;
  int regions = 0;
  int64_t resident_budget = -1;  // per device; -1: no resident store
  int resident_matrices = 0;
  std::vector<DeviceGauge> devices;
};

// Which build runs: the labels of sgemm_build_info.
struct BuildInfo {
  std::string version, commit;
};

class ServiceMetrics {
 public:
  // Serves /metrics on `listen` ("127.0.0.1:9090", "0.0.0.0:9090"; port 0
  // picks a free one). UNAVAILABLE when it cannot listen there.
  static StatusOr<std::unique_ptr<ServiceMetrics>> start(const std::string& listen, const BuildInfo& build,
                                                         std::function<LoadGauges()> load);
  ~ServiceMetrics();

  int port() const;  // the port bound

  // One finished call: its code and payload; `timings` for a success (phases,
  // per-device figures and, with `count_kernels`, its kernel launches), null
  // for a failure. A request whose launch it shared with others counts no
  // kernels here: record_launch() counts that launch's once.
  void record(StatusCode code, const std::string& client, int64_t bytes_in, int64_t bytes_out,
              const TimingRecord* timings, bool count_kernels = true);
  // One engine launch of coalesced requests (request_coalescer.h): how many
  // products it ran, and the kernels of a launch shared by several requests.
  void record_launch(int products, const std::vector<KernelRowRecord>& kernel_rows = {});

 private:
  struct Impl;
  explicit ServiceMetrics(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sgemm
