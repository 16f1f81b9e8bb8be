#include "server/service/multiply_unary_call.h"

#include <string>
#include <utility>

#include "proto/grpc_status.h"
#include "server/service/codec.h"
#include "server/service/compute_start.h"
#include "server/service/reactor_handoff.h"
#include "server/service/request_checks.h"

namespace sgemm {

MultiplyUnaryCall::MultiplyUnaryCall(ServiceShared& shared, std::unique_ptr<UnaryReply> reply, Status refuse,
                                     AuthClient* client, StreamAdmission::Ticket ticket)
    : shared_(shared),
      reply_(std::move(reply)),
      id_(std::to_string(shared.next_id.fetch_add(1))),
      t_start_(Clock::now()),
      client_(client),
      refuse_(std::move(refuse)),
      stream_ticket_(std::move(ticket)) {
  shared_.requests_total.fetch_add(1);
  std::lock_guard lock(shared_.calls_mu);
  shared_.unary.insert(this);
}

MultiplyUnaryCall::~MultiplyUnaryCall() = default;

void MultiplyUnaryCall::unref() {
  if (refs_.fetch_sub(1) == 1) delete this;  // buffers and the reservation go back here, no lock held
}

void MultiplyUnaryCall::start(const grpc::ByteBuffer& request) {
  std::unique_lock lock(mu_);
  Status st = refuse_.ok() ? receive(request) : refuse_;
  // Not waiting for memory: computing starts now, and may run on this thread.
  if (st.ok() && phase_ == Phase::kReceiving) st = assemble_and_submit(/*on_handler_thread=*/true);
  if (!st.ok()) finish(st);
  after_unlock(lock);
}

void MultiplyUnaryCall::after_unlock(std::unique_lock<std::mutex>& lock) {
  ServiceShared& shared = shared_;  // `this` may be gone once the waiter's reference is released
  const uint64_t ticket = std::exchange(cancel_ticket_, 0);
  const RunHere here = std::exchange(run_here_, RunHere::kNo);
  lock.unlock();
  if (ticket && shared.budget.cancel(ticket)) unref();  // the memory waiter's reference
  // The engine on this thread, no lock held: no hand-off for a quick product
  // (the compute task's reference keeps `this`).
  if (here == RunHere::kCoalesced) {
    shared.coalescer.run_here(shared.pool);
  } else if (here == RunHere::kAlone) {
    run_compute();
    shared.pool.end_here();
  }
}

void MultiplyUnaryCall::on_memory_granted(MemoryBudget::Reservation reservation) {
  std::unique_lock lock(mu_);
  memory_ticket_ = 0;
  if (done()) {
    lock.unlock();
    reservation.reset();  // may grant the next waiter: no lock held
    unref();
    return;
  }
  reservation_ = std::move(reservation);
  // On the thread that freed the memory: computing is handed over, never run here.
  Status st = move_to(Phase::kReceiving) ? assemble_and_submit(/*on_handler_thread=*/false) : Status::Ok();
  if (!st.ok()) finish(st);
  after_unlock(lock);
  unref();  // the waiter's reference
}

void MultiplyUnaryCall::check_idle(Clock::time_point now) {
  // Declared before the lock: freed after it is released (the buffers first,
  // then the reservation, which may grant the next waiter).
  MemoryBudget::Reservation freed;
  std::shared_ptr<HostBuffer> dropped[3];
  std::unique_lock lock(mu_);
  const auto idle = shared_.options.idle_timeout;
  if (phase_ == Phase::kWaitMemory && now - memory_since_ >= idle) {
    finish(memory_wait_timed_out(shared_, footprint_bytes_));
  } else if (done() && refs_.load() == 1 && reservation_.bytes() > 0 && now - t_finish_ >= idle) {
    // The answer went to the transport --idle-timeout ago and it has not
    // reported the call done: the client is not taking it (an answer larger
    // than the HTTP/2 flow-control window waits for the client to read).
    // Only the transport refers to the call (no compute task, no memory
    // waiter), so nothing uses the buffers: the call is reset and its memory
    // goes back now (C's last reference, the transport's copy of the answer,
    // goes as the reset completes). The reservation leaves reservation_: this
    // happens once, and the destructor (after transport_done) has nothing
    // left to release. Logged and counted (CANCELLED, as the client sees it)
    // before the reset.
    record_failure(shared_, outcome(), StatusCode::kCancelled,
                   "call reset by the server: the client did not take its answer within " + seconds_text(idle) +
                       " (--idle-timeout); its buffers are freed",
                   phase_name(finish_phase_), spdlog::level::warn);
    reply_->reset();
    freed = std::move(reservation_);
    for (int i = 0; i < 3; ++i) dropped[i] = std::move(buffers_[i]);
  }
  after_unlock(lock);
}

Status MultiplyUnaryCall::submit(bool on_handler_thread) {
  // The stream's decision (compute_start.h), on this request's facts: complete
  // (on the thread that received it, unless memory was granted later), unstriped.
  CompleteRequest facts;
  facts.job = &job_;
  facts.footprint_bytes = footprint_bytes_;
  facts.may_coalesce = true;
  facts.receiver = on_handler_thread ? reply_->receiver() : Receiver::kOther;
  ++refs_;  // the compute task's reference
  auto start = start_complete_request(shared_, facts, this, [this] { run_compute(); });
  if (!start.ok()) {
    --refs_;
    return start.status();
  }
  if (*start == ComputeStart::kHereAlone) run_here_ = RunHere::kAlone;
  if (*start == ComputeStart::kHereCoalesced) run_here_ = RunHere::kCoalesced;
  t_submit_ = Clock::now();
  move_to(Phase::kQueued);
  return Status::Ok();
}

void MultiplyUnaryCall::run_compute() {
  {
    std::lock_guard lock(mu_);
    t_compute_start_ = Clock::now();
    if (phase_ == Phase::kQueued) move_to(Phase::kComputing);
  }
  StatusOr<GemmReport> result = cancel_.cancelled() ? StatusOr<GemmReport>(cancel_.status()) : shared_.engine.run(job_);
  shared_.pool.release_slot();  // computing is over: the rest only hands the answer to gRPC
  computed(std::move(result));
}

void MultiplyUnaryCall::coalesced_started() {
  std::lock_guard lock(mu_);
  t_compute_start_ = Clock::now();
  if (phase_ == Phase::kQueued) move_to(Phase::kComputing);
}

void MultiplyUnaryCall::coalesced_done(StatusOr<GemmReport> result, int launch_products) {
  {
    std::lock_guard lock(mu_);
    launch_products_ = launch_products;
    if (phase_ == Phase::kQueued) move_to(Phase::kComputing);  // answered without a launch
  }
  computed(std::move(result));
}

void MultiplyUnaryCall::computed(StatusOr<GemmReport> result) {
  if (caller_memory_) {  // set at the header, read-only since
    if (Status intact = caller_memory_->check_after_run(); result.ok() && !intact.ok()) result = intact;
    // The engine is done with the caller's memory: an UnregisterRegion waiting on it may answer now.
    caller_memory_->release();
  }
  {
    std::unique_lock lock(mu_);
    t_compute_end_ = Clock::now();
    for (auto& row : sources_) row->release();
    if (!done() && move_to(Phase::kSending)) {
      if (!result.ok()) {
        finish(result.status());
      } else if (caller_memory_ && caller_memory_->writes_c()) {
        t_first_send_ = Clock::now();  // C is in the caller's output region: the summary alone
        finish(Status::Ok(), answer_success(shared_, outcome(), *result));
      } else {
        const int64_t count = header_.shape.m * header_.shape.n;
        grpc::ByteBuffer c = encode_c_chunk(job_.c, 0, count, buffers_[static_cast<int>(MatrixId::kC)]);
        bytes_out_ = count * int64_t(sizeof(float));
        t_first_send_ = Clock::now();  // C goes out with the summary, in one message
        grpc::ByteBuffer summary = answer_success(shared_, outcome(), *result);
        finish(Status::Ok(), concat_messages(c, summary));
      }
    }
    after_unlock(lock);
  }
  unref();
}

bool MultiplyUnaryCall::move_to(Phase to) {
  Status st = check_move(phase_, to);
  if (st.ok()) {
    phase_ = to;
    return true;
  }
  shared_.log.write(spdlog::level::err, "request id=" + id_ + ": " + st.message());
  finish(st);
  return false;
}

void MultiplyUnaryCall::finish(const Status& status, grpc::ByteBuffer answer) {
  if (done()) return;
  finish_phase_ = phase_;
  t_finish_ = Clock::now();
  phase_ = Phase::kDone;
  client_lease_.reset();  // answered: the client may send its next request
  stream_ticket_.reset();
  pending_.clear();
  cancel_ticket_ = std::exchange(memory_ticket_, 0);  // cancelled once mu_ is released (after_unlock)
  if (!status.ok()) {
    cancel_.cancel(status);  // the engine stops at its next block
    record_failure(shared_, outcome(), status.code(), status.message(), phase_name(finish_phase_), spdlog::level::warn);
  }
  reply_->send(status, answer);  // a ByteBuffer copy shares its slices
}

RequestOutcome MultiplyUnaryCall::outcome() const {
  RequestOutcome o;
  o.id = id_;
  o.peer = reply_->peer();
  o.client = client_;
  o.header = header_;
  o.rpc = reply_->rpc();
  o.start = t_start_;
  o.received = t_received_;
  o.submitted = t_submit_;
  o.compute_start = t_compute_start_;
  o.compute_end = t_compute_end_;
  o.finished = t_finish_;
  if (bytes_out_ > 0) o.first_send = t_first_send_;
  o.bytes_in = bytes_in_;
  o.bytes_out = bytes_out_;
  o.trace_asked = trace_;
  o.launch_products = launch_products_;
  return o;
}

void MultiplyUnaryCall::transport_cancelled(bool deadline) {
  std::unique_lock lock(mu_);
  if (!done()) {
    if (deadline)
      finish(DeadlineExceeded(std::string("deadline expired while ") + phase_name(phase_)));
    else
      finish(Cancelled(std::string("client cancelled or went away while ") + phase_name(phase_)));
  }
  after_unlock(lock);
}

void MultiplyUnaryCall::abort(const Status& why) {
  std::unique_lock lock(mu_);
  finish(why);
  after_unlock(lock);
}

void MultiplyUnaryCall::transport_done() {
  // The call's lock orders what the handler's thread wrote (start()) before
  // this reaction reads it: gRPC's own hand-off between its threads is not
  // visible to ThreadSanitizer.
  { std::lock_guard lock(mu_); }
  {
    std::lock_guard lock(shared_.calls_mu);
    shared_.unary.erase(this);
  }
  shared_.calls_cv.notify_all();
  unref();
}

GrpcUnaryReply::GrpcUnaryReply(grpc::CallbackServerContext* ctx, grpc::ByteBuffer* response)
    : ctx_(ctx), response_(response), peer_(ctx->peer()) {}

void GrpcUnaryReply::send(const Status& status, grpc::ByteBuffer answer) {
  if (status.ok()) *response_ = answer;
  Finish(to_grpc(status));
}

void GrpcUnaryReply::OnCancel() {
  call_.load(std::memory_order_acquire)
      ->transport_cancelled(std::chrono::system_clock::now() + std::chrono::milliseconds(250) >= ctx_->deadline());
}

bool GrpcUnaryReply::InternalInlineable() {
  reactor_handoff_release(this);
  return false;
}

void GrpcUnaryReply::OnDone() {
  reactor_handoff_acquire(this);  // after every look gRPC took at this reactor before handing it here
  call_.load(std::memory_order_acquire)->transport_done();
}  // may delete the call, and this reply with it

}  // namespace sgemm
