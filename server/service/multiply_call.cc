#include "server/service/multiply_call.h"

#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <cstdio>
#include <utility>

#include "proto/grpc_status.h"

namespace sgemm {

namespace {

double ms_between(MultiplyCall::Clock::time_point a, MultiplyCall::Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

std::string seconds_text(std::chrono::milliseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", d.count() / 1000.0);
  return buf;
}

}  // namespace

MultiplyCall::MultiplyCall(ServiceShared& shared, grpc::CallbackServerContext* ctx, Status refuse, AuthClient* client)
    : shared_(shared),
      ctx_(ctx),
      id_(std::to_string(shared.next_id.fetch_add(1))),
      t_start_(Clock::now()),
      client_(client) {
  shared_.requests_total.fetch_add(1);
  shared_.unanswered.fetch_add(1);
  {
    std::lock_guard lock(shared_.calls_mu);
    shared_.calls.insert(this);
  }
  std::unique_lock lock(mu_);
  if (!refuse.ok()) {
    finish(refuse);
    return;
  }
  start_read();
}

MultiplyCall::~MultiplyCall() = default;

std::string_view MultiplyCall::client_name() const { return client_ ? std::string_view(client_->name()) : "-"; }

void MultiplyCall::ref() {
  std::lock_guard lock(mu_);
  ++refs_;
}

void MultiplyCall::unref() {
  bool last;
  {
    std::lock_guard lock(mu_);
    last = --refs_ == 0;
  }
  if (last) delete this;  // buffers and the reservation go back here, no lock held
}

void MultiplyCall::after_unlock(std::unique_lock<std::mutex>& lock) {
  const uint64_t ticket = ticket_to_cancel_;
  ticket_to_cancel_ = 0;
  // Stripes: references and the group go, and a secondary's failure reaches its primary, with no lock held.
  std::vector<MultiplyCall*> unrefs;
  unrefs.swap(to_unref_);
  std::shared_ptr<StripeGroup> drop = std::move(group_to_drop_);
  std::shared_ptr<StripeGroup> report_to;
  Status report;
  if (report_failure_) {
    report_failure_ = false;
    report_to = group_;
    report = final_status_;
  }
  const int stripe = stripe_;
  const bool compute_here = std::exchange(compute_here_, false);
  ComputePool& pool = shared_.pool;
  lock.unlock();
  if (report_to) report_to->primary()->stripe_failed(stripe, report);
  for (MultiplyCall* m : unrefs) m->unref();
  drop.reset();
  if (ticket && shared_.budget.cancel(ticket)) unref();  // the waiter's reference
  if (compute_here) {  // start_compute() reserved the slot; the task's reference keeps `this` until its end
    run_compute();
    pool.end_here();
  }
}

void MultiplyCall::start_read() {
  if (reading_ || read_closed_) return;  // one read outstanding at a time; none after the half-close
  reading_ = true;
  read_since_ = Clock::now();
  in_.Clear();
  StartRead(&in_);
}

bool MultiplyCall::move_to(Phase to) {
  Status st = check_move(phase_, to);
  if (st.ok()) {
    phase_ = to;
    return true;
  }
  shared_.log.write(spdlog::level::err, "request id=" + id_ + ": " + st.message());
  finish(st);
  return false;
}

bool MultiplyCall::upload_complete() const {
  return phase_ == Phase::kQueued || phase_ == Phase::kComputing || phase_ == Phase::kSending || phase_ == Phase::kDone;
}

bool MultiplyCall::has_header() const {
  std::lock_guard lock(mu_);
  return phase_ != Phase::kHeader;
}

Status MultiplyCall::cancelled_status() const { return cancelled_status_in(phase_); }

Status MultiplyCall::cancelled_status_in(Phase phase) const {
  // A client whose deadline passes resets the stream a little before the
  // server's own copy of the deadline (which started when the call arrived):
  // so a cancel this close to the deadline is the deadline, as the client sees it.
  if (std::chrono::system_clock::now() + std::chrono::milliseconds(250) >= ctx_->deadline())
    return DeadlineExceeded(std::string("deadline expired while ") + phase_name(phase));
  // gRPC refuses a message over --max-message-bytes itself (the client gets
  // RESOURCE_EXHAUSTED "Received message larger than max") and tells the
  // service only that the call was cancelled: the log says so.
  if (phase == Phase::kHeader || phase == Phase::kReceiving)
    return Cancelled(std::string("client cancelled or went away while ") + phase_name(phase) +
                     " (or sent a message over --max-message-bytes " +
                     std::to_string(shared_.options.max_message_bytes) +
                     ", which gRPC refuses with RESOURCE_EXHAUSTED)");
  return Cancelled(std::string("client cancelled or went away while ") + phase_name(phase));
}

// ---- Reactions ---------------------------------------------------------------

void MultiplyCall::OnReadDone(bool ok) {
  std::unique_lock lock(mu_);
  reading_ = false;
  if (done()) return after_unlock(lock);
  if (stripe_ > 0) return on_stripe_read(lock, ok);
  if (!ok) {
    // Half-close (or the call is going away: OnCancel says so).
    read_closed_ = true;
    if (ctx_->IsCancelled())
      finish_stream(cancelled_status());
    else
      on_half_close();
    return after_unlock(lock);
  }
  ++messages_;
  auto msg = decode_request(in_, messages_, shared_.options.limits.max_chunk_bytes);
  may_compute_here_ = true;
  Status st = msg.ok() ? on_message(std::move(msg).value()) : msg.status();
  may_compute_here_ = false;
  if (!st.ok()) finish_stream(st);
  after_unlock(lock);  // may compute here: `this` may be gone after it
}

void MultiplyCall::on_half_close() {
  const bool striped = assembler_ && assembler_->stripes() > 1;
  if (phase_ == Phase::kHeader) {
    finish(InvalidArgument("the request stream ended before its header"));
  } else if (phase_ == Phase::kWaitMemory) {
    // Its last chunk may be the one waiting for memory: the grant looks again (read_closed_).
  } else if (striped && accepts_chunks()) {
    // Stripe 0's share must be in; the other stripes may still be uploading.
    Status st = assembler_->finish_stripe(0);
    if (!st.ok()) finish_stream(st);
  } else if (accepts_chunks()) {
    Status st = assembler_->finish();
    finish(st.ok() ? Internal("upload ended incomplete without a reason") : st);
  }
  // Otherwise the upload was complete: computing, queued or sending carries on.
}

void MultiplyCall::OnWriteDone(bool ok) {
  std::unique_lock lock(mu_);
  writing_ = false;
  if (!done()) {
    if (ok)
      send_more();
    else
      finish_stream(cancelled_status());
  }
  after_unlock(lock);
}

void MultiplyCall::OnCancel() {
  std::unique_lock lock(mu_);
  if (!done()) finish_stream(cancelled_status());
  after_unlock(lock);
}

void MultiplyCall::OnDone() {
  {
    // A failure is logged here, when gRPC knows whether the client reset the
    // stream: a reset can race a half-close (OnReadDone(false) before
    // OnCancel), and the log must show the code the client got. Success was
    // logged when the summary went out, unless the stream was reset after it.
    std::lock_guard lock(mu_);
    Status st = final_status_;
    if (!st.ok() && ctx_->IsCancelled() && !server_reset_ && st.code() != StatusCode::kCancelled &&
        st.code() != StatusCode::kDeadlineExceeded)
      st = cancelled_status_in(finish_phase_);
    if (!st.ok()) log_outcome(st);
  }
  {
    std::lock_guard lock(shared_.calls_mu);
    shared_.calls.erase(this);
    ++shared_.calls_ended;
  }
  shared_.calls_cv.notify_all();
  unref();
}

void MultiplyCall::check_idle(Clock::time_point now) {
  std::unique_lock lock(mu_);
  const auto idle = shared_.options.idle_timeout;
  if (done()) {
    // The summary (the last write, with the status) can be stuck behind flow
    // control too; then the stream is reset so C's buffer goes.
    if (writing_ && now - write_since_ >= idle) {
      writing_ = false;
      server_reset_ = true;
      ctx_->TryCancel();
      final_status_ =
          Cancelled("stream reset by the server: the client read neither the end of C nor the summary for " +
                    seconds_text(idle) + " (--idle-timeout)");
    }
    return after_unlock(lock);
  }
  const bool waiting_in = reading_ && (phase_ == Phase::kHeader || accepts_chunks());
  const int missing = group_ && now - t_start_ >= idle ? group_->first_missing() : -1;
  if (missing >= 0) {
    finish(DeadlineExceeded("stripe " + std::to_string(missing) + " of " + std::to_string(group_->stripes()) +
                            " never attached: no Multiply stream sent a StripeAttach for it within " +
                            seconds_text(idle) + " (--idle-timeout) of the header"));
  } else if (waiting_in && now - read_since_ >= idle) {
    finish_stream(DeadlineExceeded("no message from the client for " + seconds_text(idle) + " (--idle-timeout) while " +
                                   phase_name(phase_) + "; send the data without pauses or raise --idle-timeout"));
  } else if (writing_ && now - write_since_ >= idle) {
    // A write is stuck behind flow control: the status cannot follow it, so
    // the stream is reset and the reason goes to the log.
    server_reset_ = true;
    ctx_->TryCancel();
    // The client sees CANCELLED (RST_STREAM); the log shows the same code.
    finish_stream(Cancelled("stream reset by the server: the client read no part of C for " + seconds_text(idle) +
                            " (--idle-timeout); C's buffer is freed"));
  } else if (phase_ == Phase::kWaitMemory && now - memory_since_ >= idle) {
    finish(ResourceExhausted(
        "waited " + seconds_text(idle) + " (--idle-timeout) for " + std::to_string(footprint_bytes_) +
        " bytes of the host memory budget (--host-memory-bytes " + std::to_string(shared_.budget.capacity()) + ", " +
        std::to_string(shared_.budget.in_use()) + " in use); retry later"));
  }
  after_unlock(lock);
}

void MultiplyCall::abort(const Status& why) {
  std::unique_lock lock(mu_);
  if (!done()) {
    if (writing_) {
      server_reset_ = true;
      ctx_->TryCancel();
    }
    finish(why);
  }
  after_unlock(lock);
}

// ---- Steps -----------------------------------------------------------------

Status MultiplyCall::on_message(RequestMessage msg) {
  switch (msg.kind) {
    case RequestMessage::Kind::kEmpty:
      return InvalidArgument("message " + std::to_string(messages_) +
                             " of the stream is an empty MultiplyRequest: it carries neither `header` nor `chunk`");
    case RequestMessage::Kind::kHeader:
      if (phase_ != Phase::kHeader)
        return InvalidArgument("a Multiply stream carries one header; message " + std::to_string(messages_) +
                               " is a second `header`");
      if (msg.stripes < 0 || (msg.stripes > 1 && msg.regions.any()))
        return InvalidArgument("header.stripes " + std::to_string(msg.stripes) +
                               (msg.stripes < 0 ? " is negative"
                                                : " with shared-memory regions: a request naming regions has no "
                                                  "upload to spread; leave stripes 0"));
      trace_ = msg.trace;
      SGEMM_RETURN_IF_ERROR(on_header(msg.header, msg.regions, msg.resident));
      if (phase_ == Phase::kReceiving && msg.stripes > 1) {
        if (msg.resident.named())
          return InvalidArgument("header.stripes is " + std::to_string(msg.stripes) +
                                 " but the header names a matrix by handle: a request over several streams "
                                 "sends every operand; send this one on one stream (stripes 0 or 1)");
        SGEMM_RETURN_IF_ERROR(start_stripes(msg.stripes, msg.stripe_rows));
      }
      if (phase_ == Phase::kReceiving) start_read();
      return Status::Ok();
    case RequestMessage::Kind::kAttach:
      if (phase_ != Phase::kHeader)
        return InvalidArgument("message " + std::to_string(messages_) +
                               " is a StripeAttach; it may only be the first message of a stream");
      return on_attach(msg);
    case RequestMessage::Kind::kChunk:
      if (phase_ == Phase::kHeader)
        return InvalidArgument("the first message of a Multiply stream must carry `header`, not `chunk`");
      if (!accepts_chunks() && phase_ != Phase::kWaitMemory)  // waiting: another stripe's chunk waits too
        return InvalidArgument("message " + std::to_string(messages_) +
                               " is a chunk, but every declared matrix was already complete");
      {
        bool parked = false;
        SGEMM_RETURN_IF_ERROR(admit_memory(msg, &parked));
        if (parked) return Status::Ok();  // reading resumes when the memory is granted
      }
      SGEMM_RETURN_IF_ERROR(on_chunk(msg));
      return after_chunk();
  }
  return Internal("unknown message kind");
}

GemmRequest MultiplyCall::request() const { return header_; }

bool MultiplyCall::accepts_chunks() const { return phase_ == Phase::kReceiving || phase_ == Phase::kEarly; }

Status MultiplyCall::admit_memory(RequestMessage& msg, bool* parked) {
  *parked = false;
  if (reservation_.bytes() > 0) return Status::Ok();
  // A bad chunk is refused before it costs memory.
  SGEMM_RETURN_IF_ERROR(assembler_->check_chunk(msg.matrix, msg.offset, msg.data_bytes));
  bool waiting = false;
  SGEMM_RETURN_IF_ERROR(reserve_or_wait(&waiting));
  if (!waiting) return Status::Ok();
  pending_ = std::move(msg);
  *parked = true;
  return Status::Ok();
}

Status MultiplyCall::reserve_or_wait(bool* waiting) {
  *waiting = false;
  if (reservation_.bytes() > 0) return Status::Ok();
  SGEMM_RETURN_IF_ERROR(reserve_keep());
  if (memory_ticket_) {  // another stripe's chunk already queued the request for memory
    *waiting = true;
    return Status::Ok();
  }
  // try_reserve and enqueue lock only the budget; grants never run here.
  if (auto r = shared_.budget.try_reserve(footprint_bytes_)) {
    reservation_ = std::move(*r);
    return Status::Ok();
  }
  ++refs_;  // the waiter's reference
  const uint64_t ticket = shared_.budget.enqueue(
      footprint_bytes_, [this](MemoryBudget::Reservation r) { on_memory_granted(std::move(r)); });
  if (ticket == 0) {
    --refs_;
    return ResourceExhausted(
        "the host memory budget is full (--host-memory-bytes " + std::to_string(shared_.budget.capacity()) + ", " +
        std::to_string(shared_.budget.in_use()) + " in use) and " + std::to_string(shared_.options.max_queued) +
        " requests already wait for it (--max-queued); retry later");
  }
  memory_ticket_ = ticket;
  if (!move_to(Phase::kWaitMemory)) return Status::Ok();
  memory_since_ = Clock::now();
  *waiting = true;
  return Status::Ok();
}

void MultiplyCall::on_memory_granted(MemoryBudget::Reservation reservation) {
  std::unique_lock lock(mu_);
  memory_ticket_ = 0;
  if (done()) {
    lock.unlock();
    reservation.reset();  // may grant the next waiter: no lock held
    unref();
    return;
  }
  reservation_ = std::move(reservation);
  Status st = Status::Ok();
  if (!move_to(Phase::kReceiving)) st = final_status_;
  if (st.ok() &&
      pending_.kind == RequestMessage::Kind::kChunk) {  // with stripes, another stripe's chunk may have asked
    st = on_chunk(pending_);
    pending_ = {};
    if (st.ok()) st = after_chunk();
  }
  if (!st.ok()) finish(st);
  if (read_closed_ && !done()) on_half_close();  // the client half-closed while its chunk waited
  std::vector<ParkedChunk> parked;
  parked.swap(parked_);
  after_unlock(lock);
  // The secondaries' chunks that waited: copied now, then their streams read on.
  for (ParkedChunk& p : parked) {
    bool again = false;
    Status cs = stripe_chunk(p.from, p.stripe, p.msg, &again);
    if (!cs.ok()) {
      std::unique_lock relock(mu_);
      if (!done()) {
        fail_origin_ = p.stripe;
        finish(cs);
      }
      after_unlock(relock);
    } else if (!again) {
      p.from->resume_read();
    }
    p.from->unref();
  }
  unref();
}

Status MultiplyCall::on_chunk(RequestMessage& msg) {
  if (t_first_data_ == Clock::time_point{}) t_first_data_ = Clock::now();
  SGEMM_RETURN_IF_ERROR(ensure_buffer(msg.matrix, msg.offset, msg.data_bytes, 0));
  SGEMM_RETURN_IF_ERROR(
      assembler_->add_chunk(msg.matrix, msg.offset, msg.data_bytes, [&](void* dst) { msg.copy_data(dst); }));
  bytes_in_ += int64_t(msg.data_bytes);
  return Status::Ok();
}

Status MultiplyCall::ensure_buffer(MatrixId matrix, int64_t offset, std::size_t bytes, int stripe) {
  const int idx = static_cast<int>(matrix);
  if (buffers_[idx]) return Status::Ok();
  const int64_t elements = matrix_elements(header_.shape, matrix);
  // The check before allocating: a chunk that would be refused costs nothing.
  SGEMM_RETURN_IF_ERROR(assembler_->check_chunk(matrix, offset, bytes, stripe));
  auto got = shared_.engine.host_allocator().allocate(std::size_t(elements) * sizeof(float));
  if (!got.ok()) return got.status().with_context("allocating " + std::string(matrix_name(matrix)));
  buffers_[idx] = std::make_shared<HostBuffer>(std::move(got).value());
  assembler_->set_destination(matrix, buffers_[idx]->floats());
  return Status::Ok();
}

Status MultiplyCall::after_chunk() {
  // With stripes, the thread that sees the upload complete may not be the one
  // whose chunk completed it, and the others see it again: once is enough.
  if (upload_complete()) {
    start_read();
    return Status::Ok();
  }
  if (assembler_->complete()) {
    t_received_ = Clock::now();
    if (phase_ == Phase::kReceiving) return start_compute(/*early=*/false);
    // Computing started early and its data is all here: the running task no
    // longer waits for the client, so it keeps its slot.
    if (!move_to(Phase::kComputing)) return Status::Ok();
    if (pool_id_) shared_.pool.forget(pool_id_);
    pool_id_ = 0;
  } else if (phase_ == Phase::kReceiving && may_start_early()) {
    SGEMM_RETURN_IF_ERROR(start_compute(/*early=*/true));
  }
  start_read();
  return Status::Ok();
}

bool MultiplyCall::may_start_early() const {
  if (!assembler_) return false;  // no upload row: nothing arrives later
  const GemmShape& s = header_.shape;
  UploadFacts f;
  f.uploads_a = buffers_[0] != nullptr;
  f.has_c = header_.has_c;
  f.yields = yields_;
  f.a_received = assembler_->received(MatrixId::kA);
  f.a_elements = s.m * s.k;
  f.b_received = assembler_->received(MatrixId::kB);
  f.b_elements = s.k * s.n;
  f.bytes_in = bytes_in_;
  f.seconds_since_first_data = std::chrono::duration<double>(Clock::now() - t_first_data_).count();
  return shared_.slot_policy.start_early(f);
}

Status MultiplyCall::start_compute(bool early) {
  const GemmShape& s = header_.shape;
  const int c_idx = static_cast<int>(MatrixId::kC);
  if (!region_) {            // the region row and start_from_regions() set the job's matrices
    if (!buffers_[c_idx]) {  // C is output only: its memory was reserved with the rest
      auto got = shared_.engine.host_allocator().allocate(std::size_t(s.m * s.n) * sizeof(float));
      if (!got.ok()) return got.status().with_context("allocating C");
      buffers_[c_idx] = std::make_shared<HostBuffer>(std::move(got).value());
    }
    if (early && !buffers_[0]) return Status::Ok();
    job_.a = buffers_[0] ? buffers_[0]->floats() : nullptr;  // null: resident (job_.a_resident)
    job_.b = buffers_[1] ? buffers_[1]->floats() : nullptr;
    job_.c = buffers_[c_idx]->floats();
  }
  job_.request = request();
  job_.feed = early ? &*assembler_ : nullptr;  // early: the engine waits for A's rows
  job_.sink = this;
  job_.cancel = &cancel_;
  job_.origin = t_start_;  // the engine's steps line up with the service's phases
  if (early) assembler_->set_wait_budget(shared_.slot_policy.feed_wait_budget());
  ++refs_;  // the pool task's reference
  if (early) {
    // The assembler outlives the task (the task holds a reference on the call).
    if (!shared_.pool.submit_if_idle([this] { run_compute(); }, [this] { assembler_->yield_now(); }, &pool_id_)) {
      --refs_;
      assembler_->set_wait_budget(std::chrono::milliseconds(0));
      return Status::Ok();  // no idle slot: compute once the upload is complete
    }
    ++early_starts_;
  } else if (shared_.slot_policy.complete(may_compute_here_, group_ != nullptr,
                                          [this] { return shared_.engine.estimate_ms(job_); }) ==
                 ComputeSlotPolicy::Way::kHere &&
             shared_.pool.reserve_here()) {
    compute_here_ = true;  // after_unlock() runs it on this thread: no hand-off for a quick product
  } else if (!shared_.pool.submit([this] { run_compute(); })) {
    --refs_;
    return Unavailable("server busy: " + std::to_string(shared_.pool.running()) + " requests computing and " +
                       std::to_string(shared_.pool.queued()) + " queued (--max-in-flight " +
                       std::to_string(shared_.pool.threads()) + ", --max-queued " +
                       std::to_string(shared_.pool.max_queued()) + "); retry with backoff");
  }
  t_submit_ = Clock::now();
  if (!move_to(early ? Phase::kEarly : Phase::kQueued)) return Status::Ok();
  if (early) return Status::Ok();  // after_chunk() keeps reading
  // Keep a read posted: it sees the half-close, or a message that should not come.
  start_read();
  return Status::Ok();
}

void MultiplyCall::run_compute() {
  {
    std::lock_guard lock(mu_);
    t_compute_start_ = Clock::now();
    if (phase_ == Phase::kQueued) move_to(Phase::kComputing);  // kEarly stays until the upload is complete
  }
  StatusOr<GemmReport> result = cancel_.cancelled() ? StatusOr<GemmReport>(cancel_.status()) : shared_.engine.run(job_);
  if (result.ok() && keep_.keep) {
    if (Status kept = keep_result(); !kept.ok()) result = kept;
  }
  uint64_t pool_id;
  {
    std::lock_guard lock(mu_);
    pool_id = pool_id_;
    pool_id_ = 0;
  }
  if (pool_id) shared_.pool.forget(pool_id);
  shared_.pool.release_slot();  // computing is over: the rest only hands C and the summary to gRPC
  // The engine is done with the regions: an UnregisterRegion waiting on them may answer now.
  if (region_) region_->release();
  {
    std::unique_lock lock(mu_);
    if (!result.ok() && assembler_ && assembler_->yielded() && !done()) {
      // Started early, then waited too long for A or was asked for the slot:
      // the engine has stopped and holds nothing. Back to receiving; compute
      // again once the upload is complete (rows already reported are final
      // and are not sent twice).
      ++yields_;
      assembler_->set_wait_budget(std::chrono::milliseconds(0));
      sent_rows_.on_yield();
      if (phase_ == Phase::kComputing) {  // the upload completed meanwhile
        Status st = start_compute(/*early=*/false);
        if (!st.ok()) finish(st);
      } else {
        move_to(Phase::kReceiving);
      }
      after_unlock(lock);
      unref();
      return;
    }
    t_compute_end_ = Clock::now();
    for (auto& row : sources_) row->release();  // pins and mappings go (a deleted resident matrix is freed here)
    result_ = std::move(result);
    // Every row of C has been handed to its stripe: the secondaries finish once theirs are sent.
    if (group_ && result_.ok() && !done()) close_stripes(Status::Ok());
    if (!done() && move_to(Phase::kSending)) send_more();
    after_unlock(lock);
  }
  unref();
}

void MultiplyCall::rows_ready(int64_t row_begin, int64_t row_end) {
  std::unique_lock lock(mu_);
  if (c_in_region() || !keep_.send_c) return;  // C is in the caller's region, or kept resident: only the summary
  sent_rows_.record(row_begin, row_end);
  // After a yield, the new run reports rows the first run already sent: only the rest goes out.
  sent_rows_.for_each_unsent(row_begin, row_end, [this](int64_t b, int64_t e) { route_rows(b, e); });
  send_more();
  after_unlock(lock);
}

void MultiplyCall::send_more() {
  if (done() || writing_) return;
  const int64_t n = header_.shape.n;
  if (!rows_.empty()) {
    const auto [r0, r1] = rows_.front();
    if (send_next_ < 0) send_next_ = r0 * n;
    const int64_t end = r1 * n;
    const int64_t chunk_elems = std::max<int64_t>(1, shared_.options.response_chunk_bytes / int64_t(sizeof(float)));
    const int64_t count = std::min(chunk_elems, end - send_next_);
    out_ = encode_c_chunk(job_.c, send_next_, count, buffers_[static_cast<int>(MatrixId::kC)]);
    send_next_ += count;
    bytes_out_ += count * int64_t(sizeof(float));
    if (send_next_ >= end) {
      rows_.pop_front();
      send_next_ = -1;
    }
    writing_ = true;
    write_since_ = Clock::now();
    if (!t_first_send_) t_first_send_ = write_since_;
    StartWrite(&out_);
    return;
  }
  if (stripe_ > 0) {  // a secondary stripe: its rows are sent and the request succeeded
    if (end_ok_) {
      final_status_ = Status::Ok();
      set_finished();
      Finish(to_grpc(Status::Ok()));
    }
    return;
  }
  if (phase_ != Phase::kSending) return;  // the engine has not returned
  if (!result_.ok()) return finish(result_.status());
  // Everything sent: the summary goes with the status.
  // Every stripe's bytes: the assembler counts each chunk as it commits it.
  if (assembler_) bytes_in_ = assembler_->bytes_received();
  const Clock::time_point now = Clock::now();
  facts_.request_id = id_;
  facts_.unix_time = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  facts_.request = header_;
  facts_.received_ms = ms_between(t_start_, t_received_);
  facts_.submitted_ms = ms_between(t_start_, t_submit_);
  facts_.compute_start_ms = ms_between(t_start_, t_compute_start_);
  facts_.compute_end_ms = ms_between(t_start_, t_compute_end_);
  facts_.first_send_ms = t_first_send_ ? ms_between(t_start_, *t_first_send_) : -1.0;
  facts_.summary_ms = ms_between(t_start_, now);
  facts_.bytes_in = bytes_in_;
  facts_.bytes_out = bytes_out_;
  if (trace_ || !shared_.options.trace_dir.empty()) trace_json_ = chrome_trace_json(facts_, *result_);
  SummaryFigures f;
  f.request_id = id_;
  f.queue_ms = ms_between(t_submit_, t_compute_start_);
  f.receive_ms = ms_between(t_start_, t_received_);
  f.compute_ms = ms_between(t_compute_start_, t_compute_end_);
  f.total_ms = facts_.summary_ms;
  f.send_ms = facts_.first_send_ms >= 0 ? facts_.summary_ms - facts_.first_send_ms : 0.0;
  f.bytes_received = bytes_in_;
  f.bytes_sent = bytes_out_ + stripe_bytes_out_;
  f.stripes = assembler_ ? assembler_->stripes() : 0;
  if (trace_) f.trace_json = trace_json_;
  f.result_handle = result_handle_;
  out_ = encode_summary(*result_, f);
  final_status_ = Status::Ok();
  set_finished();
  log_outcome(final_status_);  // before the client has its result: the timing line is there when it looks
  writing_ = true;             // no OnWriteDone follows; the watchdog resets the stream if this never drains
  write_since_ = Clock::now();
  StartWriteAndFinish(&out_, grpc::WriteOptions(), to_grpc(Status::Ok()));
}

void MultiplyCall::set_finished() {
  finish_phase_ = phase_;
  t_finish_ = Clock::now();
  phase_ = Phase::kDone;  // from any phase but kDone (legal_move); callers check done() first
  shared_.unanswered.fetch_sub(1);
  client_lease_.reset();  // answered: the client may send its next request
}

void MultiplyCall::finish(const Status& status) {
  if (done()) return;
  Status own = status;
  if (group_ && stripe_ == 0) {
    // The other stripes end too: a failure of one stripe's stream is named to the rest.
    const int stripes = group_->stripes();
    close_stripes(status);
    if (fail_origin_ > 0) own = seen_by_other_stripes(fail_origin_, stripes, status);
  }
  for (ParkedChunk& p : parked_) to_unref_.push_back(p.from);
  parked_.clear();
  final_status_ = own;
  set_finished();
  cancel_.cancel(own);                    // the engine stops at its next block
  if (assembler_) assembler_->fail(own);  // or where it waits for A
  if (memory_ticket_) {
    ticket_to_cancel_ = memory_ticket_;  // cancelled once mu_ is released
    memory_ticket_ = 0;
  }
  Finish(to_grpc(own));
}

void MultiplyCall::finish_stream(const Status& status) {
  if (done()) return;
  if (stripe_ > 0)
    report_failure_ = true;  // after_unlock() tells the primary, which ends the other stripes
  else if (group_)
    fail_origin_ = 0;
  finish(status);
}

void MultiplyCall::log_outcome(const Status& st) {
  const double total_ms = ms_between(t_start_, t_finish_);
  const GemmShape& s = header_.shape;
  if (stripe_ > 0) {  // a secondary stripe: its request's line is the primary's; failures say which stripe
    if (st.ok() || !shared_.log.admit(spdlog::level::warn)) return;
    shared_.log.write(
        spdlog::level::warn,
        fmt::format("stripe {} of request id={} peer={} client={} status={} phase=\"{}\" total_ms={:.3f} "
                    "error=\"{}\"",
                    stripe_, group_ ? group_->primary()->id_ : std::string("?"), ctx_->peer(), client_name(),
                    status_code_name(st.code()), phase_name(finish_phase_), total_ms, st.message()));
    return;
  }
  if (!st.ok()) {
    shared_.requests_failed.fetch_add(1);
    if (shared_.metrics)
      shared_.metrics->record(st.code(), client_ ? client_->name() : std::string(), bytes_in_, bytes_out_, nullptr);
    // Streams that never sent anything are the cheapest to open: log them at debug level.
    const auto level =
        messages_ == 0 && st.code() == StatusCode::kCancelled ? spdlog::level::debug : spdlog::level::warn;
    if (!shared_.log.admit(level)) return;  // formatting is most of a reset stream's cost
    shared_.log.write(
        level, fmt::format("request id={} peer={} client={} m={} n={} k={} status={} phase=\"{}\" total_ms={:.3f} "
                           "bytes_in={} bytes_out={} error=\"{}\"",
                           id_, ctx_->peer(), client_name(), s.m, s.n, s.k, status_code_name(st.code()),
                           phase_name(finish_phase_), total_ms, bytes_in_, bytes_out_, st.message()));
    return;
  }
  const GemmReport& r = *result_;
  const double queue_ms = ms_between(t_submit_, t_compute_start_);
  const double receive_ms = ms_between(t_start_, t_received_);
  const double compute_ms = ms_between(t_compute_start_, t_compute_end_);
  shared_.log.logger().info(
      "request id={} peer={} client={} m={} n={} k={} alpha={} beta={} has_c={} backend={} kernel={} split={} "
      "status=OK queue_ms={:.3f} receive_ms={:.3f} compute_ms={:.3f} total_ms={:.3f} bytes_in={} "
      "bytes_out={} gflops={:.1f} devices={} early_start={} yields={} plan=\"{}\"",
      id_, ctx_->peer(), client_name(), s.m, s.n, s.k, header_.alpha, header_.beta, header_.has_c, r.backend,
      kernel_kind_name(r.kernel), split_mode_name(r.split), queue_ms, receive_ms, compute_ms, total_ms, bytes_in_,
      bytes_out_, s.flops() / (total_ms * 1e6), r.devices.size(), early_starts_ > 0, yields_, r.plan_reason);
  TimingRecord record = timing_record_of(facts_, r);
  if (client_) record.caller = client_->name();
  if (shared_.metrics) shared_.metrics->record(StatusCode::kOk, record.caller, bytes_in_, bytes_out_, &record);
  if (shared_.timing_log)
    shared_.timing_log->info(
        timing_record_json(record, "{\"early_start\":" + std::string(early_starts_ > 0 ? "true" : "false") +
                                       ",\"yields\":" + std::to_string(yields_) + "}"));
  if (!shared_.options.trace_dir.empty()) {
    const std::string path = shared_.options.trace_dir + "/trace-" + id_ + ".json";
    std::FILE* file = std::fopen(path.c_str(), "w");
    if (!file || std::fwrite(trace_json_.data(), 1, trace_json_.size(), file) != trace_json_.size())
      shared_.log.write(spdlog::level::warn, "request id=" + id_ + ": cannot write the trace " + path);
    if (file) std::fclose(file);
  }
}

}  // namespace sgemm
