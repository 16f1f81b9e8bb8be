// The gRPC frontend of sgemm-server: converts sgemm.v1 messages to plain
// structs, validates them, admits the request, feeds the engine while chunks
// arrive, streams rows of C back, and logs one line per request plus a JSON
// line of per-device timings. It never touches CUDA: the Engine does.
//
// Threads: gRPC's sync server calls Multiply/GetInfo on its own threads, one
// per active RPC. Each Multiply starts one engine thread for its request and
// joins it before returning, so a request's buffers never outlive its RPC.
#pragma once

#include <spdlog/logger.h>

#include <atomic>
#include <memory>
#include <string>

#include "sgemm/v1/sgemm.grpc.pb.h"
#include "server/engine/engine.h"
#include "server/service/admission.h"
#include "server/service/request_assembly.h"
#include "server/service/tracking_allocator.h"

namespace sgemm {

struct ServiceOptions {
  RequestLimits limits;                  // per-request size limits (see request_assembly.h)
  int max_in_flight = 4;                 // requests computed at once
  int max_queued = 16;                   // requests waiting beyond those; more are refused (UNAVAILABLE)
  int64_t response_chunk_bytes = 1 << 20;  // payload of each C chunk sent back (1 MiB: docs/transport.md)
  std::string version = "dev";           // reported by GetInfo
  std::vector<std::string> backends;     // backends this build has, for GetInfo
};

class SgemmService final : public sgemm::v1::Sgemm::Service {
 public:
  // `engine` and the loggers must outlive the service. `timing_log` may be null.
  SgemmService(Engine& engine, ServiceOptions options, std::shared_ptr<spdlog::logger> request_log,
               std::shared_ptr<spdlog::logger> timing_log);

  grpc::Status Multiply(grpc::ServerContext* context,
                        grpc::ServerReaderWriter<sgemm::v1::MultiplyResponse, sgemm::v1::MultiplyRequest>* stream)
      override;
  grpc::Status GetInfo(grpc::ServerContext* context, const sgemm::v1::GetInfoRequest* request,
                       sgemm::v1::GetInfoResponse* response) override;

 private:
  Engine& engine_;
  const ServiceOptions options_;
  std::shared_ptr<spdlog::logger> request_log_;
  std::shared_ptr<spdlog::logger> timing_log_;
  TrackingAllocator allocator_;
  AdmissionQueue admission_;
  std::atomic<int64_t> next_id_{1};
  std::atomic<int64_t> requests_total_{0};
  std::atomic<int64_t> requests_failed_{0};
};

}  // namespace sgemm
