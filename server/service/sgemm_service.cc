#include "server/service/sgemm_service.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <vector>

#include "proto/grpc_status.h"
#include "server/service/codec.h"
#include "server/service/heap_trim.h"
#include "server/service/host_memory.h"
#include "server/service/multiply_call.h"
#include "server/service/multiply_unary_call.h"
#include "server/service/peer_socket.h"
#include "server/service/put_matrix_call.h"
#include "server/service/ring_call.h"

namespace sgemm {

// `v1` is ::sgemm::v1 here (an alias would redefine it; clang says so).

int64_t default_host_memory_bytes() { return host_memory_limit().bytes / 2; }

namespace {

ServiceOptions resolved(ServiceOptions o) {
  if (o.host_memory_bytes <= 0) o.host_memory_bytes = default_host_memory_bytes();
  if (o.max_in_flight < 1) o.max_in_flight = 1;
  if (o.max_queued < 0) o.max_queued = 0;
  if (o.max_stripes < 1) o.max_stripes = 1;
  if (o.region_bytes <= 0) o.region_bytes = default_host_memory_bytes() / 2;
  if (o.region_bytes_per_user <= 0) o.region_bytes_per_user = std::max<int64_t>(1, o.region_bytes / 4);
  if (o.max_streams_per_connection < 1) o.max_streams_per_connection = 1;
  if (o.max_streams_per_address > 0) o.max_streams_per_address = std::max(o.max_streams_per_address, o.max_stripes);
  return o;
}

StreamLimits stream_limits(const ServiceOptions& o) {
  StreamLimits l;
  l.max_open_streams = o.max_open_streams;
  l.max_per_connection = o.max_streams_per_connection;
  l.max_per_address = o.max_streams_per_address;
  l.max_stripes = o.max_stripes;
  return l;
}

}  // namespace

ServiceShared::ServiceShared(Engine& e, const ServiceOptions& o, std::shared_ptr<spdlog::logger> request_log,
                             std::shared_ptr<spdlog::logger> timings,
                             std::function<void(const std::string&)> close_connection)
    : engine(e),
      options(o),
      budget(o.host_memory_bytes, o.max_queued),
      coalescer(
          e, o.coalesce,
          int(std::min<int64_t>(INT32_MAX, (int64_t(o.max_queued) + o.max_in_flight) * o.coalesce.max_products)),
          [this](int products, const GemmReport* report) {
            if (!metrics) return;
            // A launch of several requests' products: its kernels are counted
            // here, once; a request that ran alone counts its own (record()).
            std::vector<KernelRowRecord> rows;
            if (products > 1 && report)
              for (const KernelRowUse& k : report->kernel_rows) rows.push_back(KernelRowRecord{k.name, k.launches});
            metrics->record_launch(products, rows);
          },
          [this](const std::string& line) { log.write(spdlog::level::warn, line); }),
      pool(o.max_in_flight, o.max_queued),
      slot_policy(o.feed_wait_budget, o.inline_compute_ms),
      log(std::move(request_log), o.log_lines_per_second),
      timing_log(std::move(timings)),
      admission(stream_limits(o), o.auth.get(), std::move(close_connection),
                [this](const std::string& line) { log.write(spdlog::level::warn, line); }) {}

SgemmService::SgemmService(Engine& engine, ServiceOptions options, std::shared_ptr<spdlog::logger> request_log,
                           std::shared_ptr<spdlog::logger> timing_log)
    : options_(resolved(std::move(options))),
      regions_(std::make_unique<RegionRegistry>(
          engine, RegionRegistryOptions{options_.region_bytes, RegionRegistryOptions{}.max_regions,
                                        options_.region_bytes_per_user})),
      device_handles_(std::make_unique<DeviceHandleRegistry>(engine.device_memory())),
      connections_(std::make_unique<ConnectionTable>([this](uint64_t id) {
        regions_->drop_connection(id);
        device_handles_->drop_connection(id);
      })),
      shared_(std::make_unique<ServiceShared>(engine, options_, std::move(request_log), std::move(timing_log),
                                              [this](const std::string& peer) {
                                                if (!connections_->shutdown(peer)) shutdown_peer_socket(peer);
                                              })),
      watchdog_([this] { watchdog(); }) {
  shared_->regions = regions_.get();
  shared_->connections = connections_.get();
  shared_->device_handles = device_handles_.get();
}

SgemmService::~SgemmService() {
  // The gRPC server is shut down before the service goes; a handler that
  // gRPC already called is still ending its body.
  while (handlers_.load(std::memory_order_acquire) != 0) std::this_thread::yield();
  shared_->metrics.reset();  // no scrape reads the service while it goes
  {
    std::lock_guard lock(watchdog_mu_);
    stopping_ = true;
  }
  watchdog_cv_.notify_all();
  watchdog_.join();
  // Calls still computing hold references; cancel them so the pool drains fast.
  cancel_all(Unavailable("server shutting down"));
  shared_.reset();  // joins the compute pool
  connections_.reset();
  device_handles_.reset();  // mappings still held by no call: closed now
  regions_.reset();
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* SgemmService::Multiply(grpc::CallbackServerContext* ctx) {
  const HandlerScope scope(*this);
  auto client = authenticate(ctx);
  auto ticket = admit_stream(ctx, client);
  return new MultiplyCall(*shared_, ctx, ticket.status(), client.ok() ? *client : nullptr,
                          ticket.ok() ? std::move(ticket).value() : StreamAdmission::Ticket());
}

grpc::ServerUnaryReactor* SgemmService::MultiplyUnary(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                                      grpc::ByteBuffer* response) {
  const HandlerScope scope(*this);
  auto client = authenticate(ctx);
  auto ticket = admit_stream(ctx, client);
  auto reply = std::make_unique<GrpcUnaryReply>(ctx, response);
  GrpcUnaryReply* reactor = reply.get();  // owned by the call from here
  auto* call = new MultiplyUnaryCall(*shared_, std::move(reply), ticket.status(), client.ok() ? *client : nullptr,
                                     ticket.ok() ? std::move(ticket).value() : StreamAdmission::Ticket());
  reactor->bind(call);
  call->start(*request);
  return reactor;
}

StreamPeer SgemmService::stream_peer(const grpc::CallbackServerContext* ctx) const {
  StreamPeer p;
  p.connection = ctx->peer();
  const RegionCaller unix_caller = connections_->find(p.connection);
  p.address = unix_caller.unix_socket ? "uid:" + std::to_string(unix_caller.cred.uid) : peer_address(p.connection);
  return p;
}

StatusOr<StreamAdmission::Ticket> SgemmService::admit_stream(const grpc::CallbackServerContext* ctx,
                                                             const StatusOr<AuthClient*>& client) {
  if (shared_->shutting_down.load()) return Unavailable("server shutting down; retry on another replica or later");
  if (!client.ok()) return client.status();
  return shared_->admission.open(stream_peer(ctx), *client);
}

StatusOr<AuthClient*> SgemmService::authenticate(const grpc::CallbackServerContext* ctx) const {
  if (!options_.auth) return nullptr;
  const auto& md = ctx->client_metadata();
  const auto it = md.find("authorization");
  const std::string_view value =
      it == md.end() ? std::string_view() : std::string_view(it->second.data(), it->second.size());
  return options_.auth->authenticate(value);
}

grpc::ServerUnaryReactor* SgemmService::GetInfo(grpc::CallbackServerContext* ctx, const v1::GetInfoRequest*,
                                                v1::GetInfoResponse* out) {
  const HandlerScope scope(*this);
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  if (shared_->shutting_down.load()) {
    reactor->Finish(to_grpc(Unavailable("server shutting down")));
    return reactor;
  }
  auto client = authenticate(ctx);
  if (!client.ok()) {
    reactor->Finish(to_grpc(client.status()));
    return reactor;
  }
  InfoFigures f;
  f.version = options_.version;
  f.backends = options_.backends;
  f.max_matrix_elements = options_.limits.max_matrix_elements;
  f.max_chunk_bytes = options_.limits.max_chunk_bytes;
  f.host_memory_bytes = shared_->budget.capacity();
  f.max_in_flight = options_.max_in_flight;
  f.max_queued = options_.max_queued;
  f.max_stripes = options_.max_stripes;
  f.in_flight = shared_->pool.running();
  f.queued = shared_->pool.queued() + shared_->budget.waiters() + shared_->coalescer.queued_beyond_pool();
  f.open_streams = shared_->admission.open_streams();
  f.requests_total = shared_->requests_total.load();
  f.requests_failed = shared_->requests_failed.load();
  f.host_bytes_in_use = shared_->budget.in_use();
  if (const AuthClient* c = *client) {
    f.client = c->name();
    f.client_max_in_flight = c->quota().max_in_flight;
    f.client_max_bytes_in_flight = c->quota().max_bytes_in_flight;
    f.client_in_flight = c->in_flight();
    f.client_bytes_in_flight = c->bytes_in_flight();
  }
  info_to_proto(shared_->engine.info(), f, out);
  out->mutable_limits()->set_region_bytes(regions_->capacity());
  out->set_regions_available(connections_->find(ctx->peer()).unix_socket);
  out->set_region_bytes_in_use(regions_->bytes_in_use());
  if (ResidentStore* store = shared_->engine.resident_store()) {
    out->mutable_limits()->set_resident_bytes(store->capacity());
    out->mutable_load()->set_resident_bytes_in_use(store->in_use_total());
    out->mutable_load()->set_resident_matrices(store->count());
  }
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

LoadGauges SgemmService::load() const {
  LoadGauges g;
  g.in_flight = shared_->pool.running();
  g.queued = shared_->pool.queued() + shared_->budget.waiters() + shared_->coalescer.queued_beyond_pool();
  g.open_streams = shared_->admission.open_streams();
  g.host_bytes_in_use = shared_->budget.in_use();
  g.host_bytes_budget = shared_->budget.capacity();
  g.region_bytes_in_use = regions_->bytes_in_use();
  g.region_bytes_budget = regions_->capacity();
  g.regions = regions_->count();
  const EngineInfo info = shared_->engine.info();
  ResidentStore* store = shared_->engine.resident_store();
  if (store) {
    g.resident_budget = store->capacity();
    g.resident_matrices = store->count();
  }
  for (std::size_t i = 0; i < info.devices.size(); ++i) {
    const DeviceInfo& d = info.devices[i];
    DeviceGauge x;
    x.label = d.index < 0 ? "cpu" : std::to_string(d.index);
    x.name = d.name;
    x.healthy = i >= info.unhealthy.size() || info.unhealthy[i].empty();
    x.memory_bytes = d.memory_bytes;
    x.memory_used = d.memory_used_bytes;
    if (store) x.resident_in_use = store->in_use(d.index);  // locations are device ids, -1 the host
    g.devices.push_back(std::move(x));
  }
  return g;
}

StatusOr<int> SgemmService::start_metrics(const std::string& listen) {
  SGEMM_ASSIGN_OR_RETURN(shared_->metrics, ServiceMetrics::start(listen, BuildInfo{options_.version, options_.commit},
                                                                 [this] { return load(); }));
  return shared_->metrics->port();
}

void SgemmService::begin_shutdown() {
  shared_->shutting_down = true;
  std::lock_guard lock(shared_->calls_mu);
  for (MultiplyCall* call : shared_->calls)
    if (!call->has_header()) call->abort(Unavailable("server shutting down; no request was under way on this stream"));
  for (PutMatrixCall* put : shared_->puts)
    put->abort_if_no_header(Unavailable("server shutting down; no put was under way on this stream"));
  // A ring takes no new request; those it started carry on as the RPC's do.
  for (RingCall* ring : shared_->rings) ring->stop(Unavailable("server shutting down; the ring is closed"));
}

bool SgemmService::wait_for_no_calls(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(shared_->calls_mu);
  // Puts under way get the grace as requests do.
  return shared_->calls_cv.wait_until(
      lock, deadline, [&] { return shared_->calls.empty() && shared_->puts.empty() && shared_->unary.empty(); });
}

void SgemmService::cancel_all(const Status& why) {
  std::lock_guard lock(shared_->calls_mu);
  for (MultiplyCall* call : shared_->calls) call->abort(why);
  for (PutMatrixCall* put : shared_->puts) put->abort(why);
  for (MultiplyUnaryCall* call : shared_->unary) call->abort(why);
  for (RingCall* ring : shared_->rings) ring->stop(why);
}

void SgemmService::watchdog() {
  // Idle waits are checked ten times per --idle-timeout (at most every 250 ms).
  const auto tick = std::clamp<std::chrono::milliseconds>(options_.idle_timeout / 10, std::chrono::milliseconds(10),
                                                          std::chrono::milliseconds(250));
  // Freed memory goes back to the system once a second at most, when enough
  // of it is resident (heap_trim.h).
  constexpr auto kHeapLookEvery = std::chrono::seconds(1);
  HeapTrimPolicy heap;
  auto heap_looked_at = std::chrono::steady_clock::now();
  std::unique_lock lock(watchdog_mu_);
  while (!watchdog_cv_.wait_for(lock, tick, [&] { return stopping_; })) {
    lock.unlock();
    const auto now = std::chrono::steady_clock::now();
    {
      std::lock_guard calls_lock(shared_->calls_mu);
      for (MultiplyCall* call : shared_->calls) call->check_idle(now);
      for (PutMatrixCall* put : shared_->puts) put->check_idle(now);
      for (MultiplyUnaryCall* call : shared_->unary) call->check_idle(now);
    }
    shared_->admission.purge(now);
    if (now - heap_looked_at >= kHeapLookEvery) {
      heap_looked_at = now;
      (void)trim_heap_if_grown(heap);
    }
    if (options_.on_serving_change) {  // GPU faults: NOT_SERVING once no device is left
      const bool serving = shared_->engine.info().serving();
      if (serving != serving_) options_.on_serving_change(serving);
      serving_ = serving;
    }
    lock.lock();
  }
}

}  // namespace sgemm
