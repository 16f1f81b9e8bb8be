#include "server/service/multiply_unary_call.h"

#include <algorithm>
#include <string>
#include <utility>

#include "proto/grpc_status.h"
#include "server/service/batch_request.h"
#include "server/service/codec.h"
#include "server/service/compute_start.h"
#include "server/service/request_checks.h"

namespace sgemm {

namespace {

// A header field the unary call refuses, and why: what only the stream carries.
Status stream_only(const std::string& field, const std::string& what) {
  return InvalidArgument(field + ": " + what +
                         " is not carried by MultiplyUnary, which takes one product sent whole; "
                         "use the Multiply stream");
}

}  // namespace

MultiplyUnaryCall::MultiplyUnaryCall(ServiceShared& shared, grpc::CallbackServerContext* ctx,
                                     grpc::ByteBuffer* response, Status refuse, AuthClient* client,
                                     StreamAdmission::Ticket ticket)
    : shared_(shared),
      ctx_(ctx),
      response_(response),
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

Status MultiplyUnaryCall::receive(const grpc::ByteBuffer& request) {
  const int64_t max_chunk = shared_.options.limits.max_chunk_bytes;
  // The unary limit, checked at the header, bounds the message: the chunk
  // limit applies through the assembler, after it.
  SGEMM_ASSIGN_OR_RETURN(std::vector<RequestMessage> messages,
                         decode_unary_request(request, std::max<int64_t>(max_chunk, int64_t(request.Length()))));
  if (messages.empty() || messages.front().kind != RequestMessage::Kind::kHeader)
    return InvalidArgument("MultiplyUnaryRequest.header is missing: the header comes first, then the chunks");
  RequestMessage& h = messages.front();
  // What only the stream carries: stripes, batches, device buffers and a kept result.
  if (h.stripes > 1) return stream_only("header.stripes", "a request over several connections");
  if (h.header.batch) return stream_only("header.batch / header.group", "a batch or group of products");
  if (h.device.any()) return stream_only("header.a_device ...", "an operand in device memory");
  if (h.resident.keep) return stream_only("header.keep_result", "a result kept resident");
  header_ = h.header;
  trace_ = h.trace;
  // Operands named by handle (resident_source.cc) are not sent, and a C named
  // by handle is an input C; operands in shared-memory regions
  // (region_source.cc) are not sent either, and a C written into an output
  // region does not come back.
  const ResidentOperands& named = h.resident;
  if (!named.c.empty()) header_.has_c = true;
  const bool regions = h.regions.any();
  SGEMM_RETURN_IF_ERROR(check_product_header(shared_, header_, /*c_in_caller_memory=*/h.regions.out.has_value()));
  const GemmShape& s = header_.shape;
  const int64_t in_bytes = regions ? 0
                                   : ((named.a.empty() ? s.m * s.k : 0) + (named.b.empty() ? s.k * s.n : 0) +
                                      (header_.has_c && named.c.empty() ? s.m * s.n : 0)) *
                                         int64_t(sizeof(float));
  const int64_t out_bytes = h.regions.out.has_value() ? 0 : s.m * s.n * int64_t(sizeof(float));
  if (in_bytes > kMaxUnaryBytes || out_bytes > kMaxUnaryBytes)
    return InvalidArgument("header: a " + std::to_string(s.m) + " x " + std::to_string(s.n) + " x " +
                           std::to_string(s.k) + " product sends " + std::to_string(in_bytes) +
                           " bytes of matrices and receives " + std::to_string(out_bytes) +
                           ", over MultiplyUnary's limit of " + std::to_string(kMaxUnaryBytes) +
                           " bytes each way (Limits.max_unary_bytes); use the Multiply stream");
  if (!move_to(Phase::kReceiving)) return Status::Ok();
  if (!regions) assembler_.emplace(s, header_.has_c, nullptr, nullptr, nullptr, max_chunk, header_.op_a, header_.op_b);
  // The stream's rows and their checks (an offset such as header.b_at without
  // its handle; regions and handles together).
  SGEMM_ASSIGN_OR_RETURN(sources_, make_input_sources(h.regions, h.resident, {}, assembler_ ? &*assembler_ : nullptr));
  if (regions && messages.size() > 1)
    return InvalidArgument(
        "MultiplyUnaryRequest.chunks: the header names shared-memory regions for A and B (and C), "
        "so no chunk may follow");
  const SourceContext source_ctx{shared_, client_, ctx_->peer(), header_};
  for (auto& row : sources_) {
    SGEMM_RETURN_IF_ERROR(row->bind(source_ctx, job_));
    if (auto* held = dynamic_cast<CallerMemorySource*>(row.get())) caller_memory_ = held;
  }
  if (caller_memory_) {
    // Only a C sent back needs the budget; a request holding the caller's
    // memory is refused rather than queued for it, as on the stream.
    footprint_bytes_ = caller_memory_->writes_c() ? 0 : s.m * s.n * int64_t(sizeof(float));
  } else {
    SGEMM_ASSIGN_OR_RETURN(footprint_bytes_, request_footprint(shared_, s, sources_));
  }
  if (client_) {
    SGEMM_ASSIGN_OR_RETURN(client_lease_, client_->admit(footprint_bytes_));
  }
  for (std::size_t i = 1; i < messages.size(); ++i)
    if (messages[i].kind != RequestMessage::Kind::kChunk)
      return InvalidArgument("MultiplyUnaryRequest carries one header; field " + std::to_string(i + 1) +
                             " is a second header");
  if (messages.size() > 1) {  // a bad chunk is refused before it costs memory
    const RequestMessage& first = messages[1];
    SGEMM_RETURN_IF_ERROR(assembler_->check_chunk(first.matrix, first.offset, first.data_bytes));
  }
  pending_ = std::move(messages);
  if (auto r = shared_.budget.try_reserve(footprint_bytes_)) {
    reservation_ = std::move(*r);
    return Status::Ok();
  }
  if (caller_memory_) return c_budget_full(shared_, footprint_bytes_);
  // No room now: the request waits for it as a stream's first chunk does,
  // holding its message (and nothing of the budget), until the memory is
  // granted or --idle-timeout passes (check_idle).
  ++refs_;  // the waiter's reference
  const uint64_t ticket = shared_.budget.enqueue(
      footprint_bytes_, [this](MemoryBudget::Reservation r) { on_memory_granted(std::move(r)); });
  if (ticket == 0) {
    --refs_;
    return memory_queue_full(shared_);
  }
  memory_ticket_ = ticket;
  memory_since_ = Clock::now();
  move_to(Phase::kWaitMemory);
  return Status::Ok();
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
    // The answer went to gRPC (Finish) --idle-timeout ago and gRPC has not
    // reported the call done: the client is not taking it (an answer larger
    // than the HTTP/2 flow-control window waits for the client to read).
    // Only gRPC refers to the call (no compute task, no memory waiter), so
    // nothing uses the buffers: the call is reset and its memory goes back
    // now (C's last reference, gRPC's copy of the answer, goes as the cancel
    // completes). The reservation leaves reservation_: this happens once, and
    // the destructor (after OnDone) has nothing left to release. Logged and
    // counted (CANCELLED, as the client sees it) before the cancel, which
    // leaves the context without its peer.
    record_failure(shared_, outcome(), StatusCode::kCancelled,
                   "call reset by the server: the client did not take its answer within " + seconds_text(idle) +
                       " (--idle-timeout); its buffers are freed",
                   phase_name(finish_phase_), spdlog::level::warn);
    ctx_->TryCancel();
    freed = std::move(reservation_);
    for (int i = 0; i < 3; ++i) dropped[i] = std::move(buffers_[i]);
  }
  after_unlock(lock);
}

Status MultiplyUnaryCall::assemble_and_submit(bool on_handler_thread) {
  std::vector<RequestMessage> messages = std::move(pending_);
  pending_.clear();
  if (caller_memory_) return submit_from_caller_memory(on_handler_thread);
  for (std::size_t i = 1; i < messages.size(); ++i) {
    RequestMessage& msg = messages[i];
    const int idx = static_cast<int>(msg.matrix);
    if (!buffers_[idx]) {
      // The check before allocating: a chunk that would be refused costs nothing.
      SGEMM_RETURN_IF_ERROR(assembler_->check_chunk(msg.matrix, msg.offset, msg.data_bytes));
      const int64_t elements = request_matrix_elements(header_, msg.matrix);
      auto got = shared_.engine.host_allocator().allocate(std::size_t(elements) * sizeof(float));
      if (!got.ok()) return got.status().with_context("allocating " + std::string(matrix_name(msg.matrix)));
      buffers_[idx] = std::make_shared<HostBuffer>(std::move(got).value());
      assembler_->set_destination(msg.matrix, buffers_[idx]->floats());
    }
    SGEMM_RETURN_IF_ERROR(
        assembler_->add_chunk(msg.matrix, msg.offset, msg.data_bytes, [&](void* dst) { msg.copy_data(dst); }));
    bytes_in_ += int64_t(msg.data_bytes);
  }
  if (!assembler_->complete()) return assembler_->finish();  // names the matrix that is short
  t_received_ = Clock::now();
  const int c_idx = static_cast<int>(MatrixId::kC);
  if (!buffers_[c_idx]) {
    auto got = shared_.engine.host_allocator().allocate(std::size_t(header_.shape.m * header_.shape.n) * sizeof(float));
    if (!got.ok()) return got.status().with_context("allocating C");
    buffers_[c_idx] = std::make_shared<HostBuffer>(std::move(got).value());
  }
  // A and B not uploaded are resident (job_.a_resident, job_.b_resident).
  if (buffers_[0]) job_.a = buffers_[0]->floats();
  if (buffers_[1]) job_.b = buffers_[1]->floats();
  job_.c = buffers_[c_idx]->floats();
  job_.request = header_;
  job_.cancel = &cancel_;
  job_.origin = t_start_;
  return submit(on_handler_thread);
}

// A, B (and C) in the caller's regions: nothing was sent. C goes into the
// output region, or into a buffer the answer carries.
Status MultiplyUnaryCall::submit_from_caller_memory(bool on_handler_thread) {
  t_received_ = Clock::now();
  float* host_c = nullptr;
  if (!caller_memory_->writes_c()) {
    const int c_idx = static_cast<int>(MatrixId::kC);
    auto got = shared_.engine.host_allocator().allocate(std::size_t(footprint_bytes_));
    if (!got.ok()) return got.status().with_context("allocating C");
    buffers_[c_idx] = std::make_shared<HostBuffer>(std::move(got).value());
    host_c = buffers_[c_idx]->floats();
  }
  job_.request = header_;
  caller_memory_->prepare_c(job_, host_c);
  job_.cancel = &cancel_;
  job_.origin = t_start_;
  return submit(on_handler_thread);
}

Status MultiplyUnaryCall::submit(bool on_handler_thread) {
  // The stream's decision (compute_start.h), on this request's facts: complete
  // (on the thread that received it, unless memory was granted later), unstriped.
  CompleteRequest facts;
  facts.job = &job_;
  facts.footprint_bytes = footprint_bytes_;
  facts.may_coalesce = true;
  facts.on_receiving_thread = on_handler_thread;
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
        *response_ = answer_success(shared_, outcome(), *result);
        finish(Status::Ok());
      } else {
        const int64_t count = header_.shape.m * header_.shape.n;
        grpc::ByteBuffer c = encode_c_chunk(job_.c, 0, count, buffers_[static_cast<int>(MatrixId::kC)]);
        bytes_out_ = count * int64_t(sizeof(float));
        t_first_send_ = Clock::now();  // C goes to gRPC with the summary, in one message
        grpc::ByteBuffer summary = answer_success(shared_, outcome(), *result);
        *response_ = concat_messages(c, summary);
        finish(Status::Ok());
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

void MultiplyUnaryCall::finish(const Status& status) {
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
  Finish(to_grpc(status));
}

RequestOutcome MultiplyUnaryCall::outcome() const {
  RequestOutcome o;
  o.id = id_;
  o.peer = ctx_->peer();
  o.client = client_;
  o.header = header_;
  o.rpc = "unary";
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

void MultiplyUnaryCall::OnCancel() {
  std::unique_lock lock(mu_);
  if (!done()) {
    if (std::chrono::system_clock::now() + std::chrono::milliseconds(250) >= ctx_->deadline())
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

void MultiplyUnaryCall::OnDone() {
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

}  // namespace sgemm
