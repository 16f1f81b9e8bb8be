// The gRPC frontend of sgemm-server, on gRPC's callback API: one reactor per
// Multiply call (server/service/multiply_call.h), no thread per stream.
//
// What a request holds, and when (docs/lifecycle.md):
//   header              nothing but the reactor (validated, then waits for data)
//   first data chunk    a reservation of its whole footprint (A, B, C) against
//                       the one host-memory budget; each matrix's buffer is
//                       allocated when its first chunk arrives
//   upload complete     a place on the compute pool (slots = --max-in-flight)
//   computing           a pool thread, inside Engine::run (locks, GPUs)
//   sending             its C buffer (still in the budget) until the client reads it
// Every wait has a bound: the call's deadline, or --idle-timeout for waits on
// the client (and for host memory).
//
// Threads: gRPC runs reactions on its callback threads; Engine::run runs on
// the ComputePool's threads; one watchdog thread ends idle calls. GetInfo,
// begin_shutdown(), cancel_all() may be called from any thread. The service
// must outlive the grpc::Server it is registered with; its destructor joins
// the pool and the watchdog.
#pragma once

#include <spdlog/logger.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "server/engine/engine.h"
#include "server/service/client_auth.h"
#include "server/service/compute_pool.h"
#include "server/service/compute_slot_policy.h"
#include "server/service/device_handles.h"
#include "server/service/memory_budget.h"
#include "server/service/rate_limited_log.h"
#include "server/service/region_registry.h"
#include "server/service/request_assembly.h"
#include "server/service/request_coalescer.h"
#include "server/service/service_metrics.h"
#include "server/service/stream_admission.h"
#include "server/service/stripe_group.h"
#include "server/service/unix_connections.h"
#include "sgemm/v1/sgemm.grpc.pb.h"

namespace sgemm {

struct ServiceOptions {
  RequestLimits limits;                    // per-request size limits (see request_assembly.h)
  int max_in_flight = 4;                   // compute slots: requests computed at once
  int max_queued = 64;                     // complete uploads waiting for a slot, and requests waiting for
                                           // host memory; more are refused (UNAVAILABLE / RESOURCE_EXHAUSTED)
  int64_t response_chunk_bytes = 1 << 20;  // payload of each C chunk sent back (1 MiB: docs/transport.md)
  int64_t host_memory_bytes = 0;           // the budget for all requests' host buffers; 0 = half of physical memory
  std::chrono::milliseconds idle_timeout{30000};  // a call making no progress this long (client silent, not
                                                  // reading, or memory not granted) ends and frees everything
  // Computing may start before the upload ends: once B (and C) are complete
  // and A is arriving at a rate that brings the rest within half of this, on
  // an idle compute slot; the engine then waits at most this long, in all,
  // for A (DEADLINE_EXCEEDED after). 0: compute only complete uploads.
  // Requests naming shared-memory regions never start early (no upload).
  std::chrono::milliseconds feed_wait_budget{1000};
  // A complete upload whose product the engine estimates at most this long
  // (Engine::estimate_ms) is computed on the gRPC thread that received its
  // last message, when a compute slot is idle, instead of being handed to a
  // compute thread (docs/lifecycle.md). 0: always hand over (the default: on
  // the H100 it saved no time next to the client's own-thread calls).
  double inline_compute_ms = 0;
  // Coalescing of small requests into one engine launch (request_coalescer.h,
  // docs/lifecycle.md): --coalesce-window-us, --coalesce-max-products (1: off),
  // --coalesce-max-bytes.
  CoalesceOptions coalesce;
  int max_open_streams = 1024;  // Multiply and PutMatrix streams open and not yet answered (a
                                // striped request's every stream counts); more are refused (UNAVAILABLE)
  // The service's own bounds on open streams (stream_admission.h): gRPC
  // enforces HTTP/2's stream limit only for clients that acknowledge SETTINGS.
  int max_streams_per_connection = 256;  // one connection's open streams (RESOURCE_EXHAUSTED)
  int max_streams_per_address = 256;     // one remote IP's or Unix user's without a token (RESOURCE_EXHAUSTED);
                                         // 0 = no bound (every caller behind one proxy address)
  int max_stripes = 16;                  // most streams one request may spread over (GemmHeader.stripes)
  int log_lines_per_second = 20;         // failed-request log lines per second; the rest are counted
  int64_t max_message_bytes = 64 << 20;  // gRPC refuses larger messages itself (RESOURCE_EXHAUSTED);
                                         // up to this size the service answers an oversized chunk,
                                         // saying to chunk
  std::string version = "dev";           // reported by GetInfo and sgemm_build_info
  std::string commit = "unknown";        // the source's git commit, for sgemm_build_info
  std::vector<std::string> backends;     // backends this build has, for GetInfo
  // Shared-memory regions registered at once, all callers together (page-locked
  // memory the callers own); 0 = a quarter of min(physical memory, the cgroup's
  // limit) (docs/transport.md).
  int64_t region_bytes = 0;
  // Without tokens, one Unix user's registered regions, all its connections
  // together (RESOURCE_EXHAUSTED past it); 0 = a quarter of region_bytes. With
  // tokens the token file's max_region_bytes bounds each client instead.
  int64_t region_bytes_per_user = 0;
  // Request rings (ring_call.h, docs/transport.md "Request rings"): open at
  // once, all callers together (each holds a thread), and how long a ring's
  // thread polls after its last request or answer before it sleeps.
  int max_rings = 16;
  std::chrono::microseconds ring_spin{200};
  std::string trace_dir;  // write a Chrome trace of every request here (trace-<id>.json); "" = only on request
  std::shared_ptr<const ClientAuth> auth;  // bearer tokens and per-client quotas (--auth-tokens);
                                           // null = calls need no token
  // Called (on the watchdog thread) when the engine gains or loses its last
  // healthy device: main turns it into the health service's SERVING/NOT_SERVING.
  std::function<void(bool serving)> on_serving_change;
};

// Half of what this process may use, min(physical memory, its cgroup's
// limit) (host_memory.h): what --host-memory-bytes 0 means.
int64_t default_host_memory_bytes();

class MultiplyCall;
class MultiplyUnaryCall;
class PutMatrixCall;
class RingCall;

// What every call shares; owned by SgemmService.
struct ServiceShared {
  // `close_connection(peer)` shuts a connection down (StreamAdmission); null: none is.
  ServiceShared(Engine& engine, const ServiceOptions& options, std::shared_ptr<spdlog::logger> request_log,
                std::shared_ptr<spdlog::logger> timing_log,
                std::function<void(const std::string&)> close_connection = nullptr);

  Engine& engine;
  const ServiceOptions& options;
  MemoryBudget budget;
  // Small requests waiting to share a launch; before the pool, which runs its
  // queued launches as it goes.
  RequestCoalescer coalescer;
  ComputePool pool;
  ComputeSlotPolicy slot_policy;               // early, here or queued (compute_slot_policy.h), from the options
  RateLimitedLog log;                          // per-request lines; failures rate-limited
  std::shared_ptr<spdlog::logger> timing_log;  // may be null
  // Set by start_metrics() before the server serves; null = no metrics.
  std::unique_ptr<ServiceMetrics> metrics;
  std::atomic<int64_t> next_id{1};
  std::atomic<int64_t> requests_total{0};
  std::atomic<int64_t> requests_failed{0};
  std::atomic<bool> shutting_down{false};
  StreamAdmission admission;  // open streams: all, per connection, per client or address; rapid resets

  // Shared-memory regions and the Unix connections that may use them
  // (region_registry.h, unix_connections.h); owned by SgemmService.
  RegionRegistry* regions = nullptr;
  ConnectionTable* connections = nullptr;
  // CUDA IPC allocations open for callers (device_handles.h); owned by SgemmService.
  DeviceHandleRegistry* device_handles = nullptr;

  // Requests spread over several streams, by token (stripe_group.h).
  StripeRegistry stripes;

  // Live calls (between creation and OnDone), for the watchdog and shutdown.
  std::mutex calls_mu;
  std::condition_variable calls_cv;
  std::unordered_set<MultiplyCall*> calls;       // guarded by calls_mu
  std::unordered_set<PutMatrixCall*> puts;       // guarded by calls_mu: PutMatrix uploads, for the idle check
  std::unordered_set<MultiplyUnaryCall*> unary;  // guarded by calls_mu: MultiplyUnary calls, for shutdown
  std::unordered_set<RingCall*> rings;           // guarded by calls_mu: open request rings (--max-rings)
};

// The region RPCs (region_service.cc) sit under the Multiply and GetInfo methods.
using RegionMethods =
    sgemm::v1::Sgemm::WithCallbackMethod_RegisterRegion<sgemm::v1::Sgemm::WithCallbackMethod_UnregisterRegion<
        sgemm::v1::Sgemm::WithCallbackMethod_ListRegions<sgemm::v1::Sgemm::Service>>>;

// The resident-matrix RPCs (matrix_service.cc, docs/resident.md) under those.
using MatrixMethods =
    sgemm::v1::Sgemm::WithRawCallbackMethod_PutMatrix<sgemm::v1::Sgemm::WithCallbackMethod_DeleteMatrix<
        sgemm::v1::Sgemm::WithCallbackMethod_ListMatrices<RegionMethods>>>;

// Request rings (ring_call.h) under those.
using RingMethods = sgemm::v1::Sgemm::WithCallbackMethod_OpenRing<MatrixMethods>;

class SgemmService final
    : public sgemm::v1::Sgemm::WithRawCallbackMethod_MultiplyUnary<
          sgemm::v1::Sgemm::WithRawCallbackMethod_Multiply<sgemm::v1::Sgemm::WithCallbackMethod_GetInfo<RingMethods>>> {
 public:
  // `engine` and the loggers must outlive the service. `timing_log` may be null.
  SgemmService(Engine& engine, ServiceOptions options, std::shared_ptr<spdlog::logger> request_log,
               std::shared_ptr<spdlog::logger> timing_log);
  ~SgemmService() override;

  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Multiply(grpc::CallbackServerContext* ctx) override;
  // One product in one message each way (multiply_unary_call.h).
  grpc::ServerUnaryReactor* MultiplyUnary(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                          grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetInfo(grpc::CallbackServerContext* ctx, const sgemm::v1::GetInfoRequest* request,
                                    sgemm::v1::GetInfoResponse* response) override;
  // Shared-memory regions (region_service.cc); the caller is found from
  // ctx->peer() in connections().
  grpc::ServerUnaryReactor* RegisterRegion(grpc::CallbackServerContext* ctx,
                                           const sgemm::v1::RegisterRegionRequest* request,
                                           sgemm::v1::RegisterRegionResponse* response) override;
  grpc::ServerUnaryReactor* UnregisterRegion(grpc::CallbackServerContext* ctx,
                                             const sgemm::v1::UnregisterRegionRequest* request,
                                             sgemm::v1::UnregisterRegionResponse* response) override;
  grpc::ServerUnaryReactor* ListRegions(grpc::CallbackServerContext* ctx, const sgemm::v1::ListRegionsRequest* request,
                                        sgemm::v1::ListRegionsResponse* response) override;

  // A request ring in one of the caller's regions (ring_call.h).
  grpc::ServerWriteReactor<sgemm::v1::RingEvent>* OpenRing(grpc::CallbackServerContext* ctx,
                                                           const sgemm::v1::OpenRingRequest* request) override;

  // Resident matrices (matrix_service.cc): the engine's ResidentStore.
  grpc::ServerReadReactor<grpc::ByteBuffer>* PutMatrix(grpc::CallbackServerContext* ctx,
                                                       grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* DeleteMatrix(grpc::CallbackServerContext* ctx,
                                         const sgemm::v1::DeleteMatrixRequest* request,
                                         sgemm::v1::DeleteMatrixResponse* response) override;
  grpc::ServerUnaryReactor* ListMatrices(grpc::CallbackServerContext* ctx,
                                         const sgemm::v1::ListMatricesRequest* request,
                                         sgemm::v1::ListMatricesResponse* response) override;

  // Where main()'s UnixListener records the connections it accepts.
  ConnectionTable& connections() { return *connections_; }

  // Shutdown, step 1: refuse new calls (UNAVAILABLE) and end the calls (and
  // puts) that have not sent a header yet; those with a request carry on.
  void begin_shutdown();
  // Step 2: waits until no call (Multiply, MultiplyUnary or PutMatrix) is open or `deadline` passes; true when none is.
  bool wait_for_no_calls(std::chrono::steady_clock::time_point deadline);
  // Step 3: ends every open call with `why` (engines stop at their next block).
  void cancel_all(const Status& why);

  // Serves Prometheus metrics on `listen` (--metrics-listen); call before the
  // gRPC server starts. Returns the port bound.
  StatusOr<int> start_metrics(const std::string& listen);
  // The service's load, as GetInfo and the metrics' gauges report it.
  LoadGauges load() const;

  const ServiceOptions& options() const { return options_; }
  int64_t host_bytes_in_use() const { return shared_->budget.in_use(); }

 private:
  void watchdog();
  // Where a call comes from, as StreamAdmission counts it.
  StreamPeer stream_peer(const grpc::CallbackServerContext* ctx) const;
  // The first refusal that applies to a new Multiply or PutMatrix stream, or
  // its place among the open streams (stream_admission.h).
  StatusOr<StreamAdmission::Ticket> admit_stream(const grpc::CallbackServerContext* ctx,
                                                 const StatusOr<AuthClient*>& client);
  // The caller's client (null without --auth-tokens), or UNAUTHENTICATED.
  StatusOr<AuthClient*> authenticate(const grpc::CallbackServerContext* ctx) const;
  // A region RPC's caller: its token's client and its Unix connection (region_service.cc).
  StatusOr<RegionCaller> region_caller(const grpc::CallbackServerContext* ctx) const;

  // Counts the RPC handlers running on gRPC's threads. The destructor waits
  // for none to be left before it frees what they read: gRPC's own join of
  // its threads is not visible to ThreadSanitizer, and a handler must never
  // outlive the service. Every handler holds a HandlerScope for its body.
  class HandlerScope {
   public:
    explicit HandlerScope(const SgemmService& s) : n_(s.handlers_) { n_.fetch_add(1, std::memory_order_acq_rel); }
    ~HandlerScope() { n_.fetch_sub(1, std::memory_order_release); }
    HandlerScope(const HandlerScope&) = delete;
    HandlerScope& operator=(const HandlerScope&) = delete;

   private:
    std::atomic<int>& n_;
  };
  mutable std::atomic<int> handlers_{0};

  const ServiceOptions options_;
  std::unique_ptr<RegionRegistry> regions_;
  std::unique_ptr<DeviceHandleRegistry> device_handles_;  // before connections_, whose close drops from it
  std::unique_ptr<ConnectionTable> connections_;          // drops a closed connection's registrations
  std::unique_ptr<ServiceShared> shared_;
  std::mutex watchdog_mu_;
  std::condition_variable watchdog_cv_;
  bool stopping_ = false;  // guarded by watchdog_mu_
  bool serving_ = true;    // watchdog thread only: the engine had a healthy device at the last look
  std::thread watchdog_;
};

}  // namespace sgemm
