#include "server/service/sgemm_service.h"

#include <unistd.h>

#include "server/service/codec.h"
#include "server/service/multiply_call.h"
#include "server/service/status_mapping.h"

namespace sgemm {

// `v1` is ::sgemm::v1 here (an alias would redefine it; clang says so).

int64_t default_host_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return int64_t{8} << 30;
  return int64_t(pages) * int64_t(page) / 2;
}

namespace {

ServiceOptions resolved(ServiceOptions o) {
  if (o.host_memory_bytes <= 0) o.host_memory_bytes = default_host_memory_bytes();
  if (o.max_in_flight < 1) o.max_in_flight = 1;
  if (o.max_queued < 0) o.max_queued = 0;
  return o;
}

}  // namespace

ServiceShared::ServiceShared(Engine& e, const ServiceOptions& o, std::shared_ptr<spdlog::logger> request_log,
                             std::shared_ptr<spdlog::logger> timings)
    : engine(e),
      options(o),
      budget(o.host_memory_bytes, o.max_queued),
      pool(o.max_in_flight, o.max_queued),
      log(std::move(request_log), o.log_lines_per_second),
      timing_log(std::move(timings)) {}

SgemmService::SgemmService(Engine& engine, ServiceOptions options, std::shared_ptr<spdlog::logger> request_log,
                           std::shared_ptr<spdlog::logger> timing_log)
    : options_(resolved(std::move(options))),
      shared_(std::make_unique<ServiceShared>(engine, options_, std::move(request_log), std::move(timing_log))),
      watchdog_([this] { watchdog(); }) {}

SgemmService::~SgemmService() {
  {
    std::lock_guard lock(watchdog_mu_);
    stopping_ = true;
  }
  watchdog_cv_.notify_all();
  watchdog_.join();
  // Calls still computing hold references; cancel them so the pool drains fast.
  cancel_all(Unavailable("server shutting down"));
  shared_.reset();  // joins the compute pool
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* SgemmService::Multiply(grpc::CallbackServerContext* ctx) {
  Status refuse;
  auto client = authenticate(ctx);
  if (shared_->shutting_down.load()) {
    refuse = Unavailable("server shutting down; retry on another replica or later");
  } else if (!client.ok()) {
    refuse = client.status();
  } else if (const int open = shared_->unanswered.load(); open >= options_.max_open_streams) {
    refuse = Unavailable("too many open Multiply streams: " + std::to_string(open) + " (--max-open-streams " +
                         std::to_string(options_.max_open_streams) + "); retry with backoff");
  }
  return new MultiplyCall(*shared_, ctx, refuse, client.ok() ? *client : nullptr);
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
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  if (shared_->shutting_down.load()) {
    reactor->Finish(to_grpc_status(Unavailable("server shutting down")));
    return reactor;
  }
  auto client = authenticate(ctx);
  if (!client.ok()) {
    reactor->Finish(to_grpc_status(client.status()));
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
  f.in_flight = shared_->pool.running();
  f.queued = shared_->pool.queued() + shared_->budget.waiters();
  {
    std::lock_guard lock(shared_->calls_mu);
    f.open_streams = int(shared_->calls.size());
  }
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
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

void SgemmService::begin_shutdown() {
  shared_->shutting_down = true;
  std::lock_guard lock(shared_->calls_mu);
  for (MultiplyCall* call : shared_->calls)
    if (!call->has_header()) call->abort(Unavailable("server shutting down; no request was under way on this stream"));
}

bool SgemmService::wait_for_no_calls(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(shared_->calls_mu);
  return shared_->calls_cv.wait_until(lock, deadline, [&] { return shared_->calls.empty(); });
}

void SgemmService::cancel_all(const Status& why) {
  std::lock_guard lock(shared_->calls_mu);
  for (MultiplyCall* call : shared_->calls) call->abort(why);
}

void SgemmService::watchdog() {
  // Idle waits are checked ten times per --idle-timeout (at most every 250 ms).
  const auto tick = std::clamp<std::chrono::milliseconds>(options_.idle_timeout / 10, std::chrono::milliseconds(10),
                                                          std::chrono::milliseconds(250));
  std::unique_lock lock(watchdog_mu_);
  while (!watchdog_cv_.wait_for(lock, tick, [&] { return stopping_; })) {
    lock.unlock();
    {
      const auto now = std::chrono::steady_clock::now();
      std::lock_guard calls_lock(shared_->calls_mu);
      for (MultiplyCall* call : shared_->calls) call->check_idle(now);
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
