#include "server/service/multiply_call.h"

#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <utility>

#include "proto/grpc_status.h"
#include "server/service/request_checks.h"

namespace sgemm {

MultiplyCall::MultiplyCall(ServiceShared& shared, grpc::CallbackServerContext* ctx, Status refuse, AuthClient* client,
                           StreamAdmission::Ticket ticket)
    : shared_(shared),
      ctx_(ctx),
      id_(std::to_string(shared.next_id.fetch_add(1))),
      t_start_(Clock::now()),
      client_(client),
      stream_ticket_(std::move(ticket)) {
  shared_.requests_total.fetch_add(1);
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

void MultiplyCall::ref() { refs_.fetch_add(1); }

void MultiplyCall::unref() {
  if (refs_.fetch_sub(1) == 1) delete this;  // buffers and the reservation go back here, no lock held
}

void MultiplyCall::defer(std::function<void()> work) { deferred_.push_back(std::move(work)); }

void MultiplyCall::after_unlock(std::unique_lock<std::mutex>& lock) {
  std::vector<std::function<void()>> work;
  work.swap(deferred_);
  std::function<void()> compute = std::move(run_here_);
  run_here_ = nullptr;
  lock.unlock();
  for (auto& w : work) w();  // in the order deferred
  // Last: `this` may be gone once the compute's task reference is released.
  if (compute) compute();
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
  } else if (Status pace = accepts_chunks() && reservation_.bytes() > 0 && t_first_data_ != Clock::time_point{}
                               ? check_upload_pace(assembler_->bytes_received(), now - t_first_data_, idle,
                                                   reservation_.bytes(), shared_.options.limits, "the request")
                               : Status::Ok();
             !pace.ok()) {
    finish(pace);  // the memory goes back now, not when the last byte would have come
  } else if (writing_ && now - write_since_ >= idle) {
    // A write is stuck behind flow control: the status cannot follow it, so
    // the stream is reset and the reason goes to the log.
    server_reset_ = true;
    ctx_->TryCancel();
    // The client sees CANCELLED (RST_STREAM); the log shows the same code.
    finish_stream(Cancelled("stream reset by the server: the client read no part of C for " + seconds_text(idle) +
                            " (--idle-timeout); C's buffer is freed"));
  } else if (phase_ == Phase::kWaitMemory && now - memory_since_ >= idle) {
    finish(memory_wait_timed_out(shared_, footprint_bytes_));
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
      SGEMM_RETURN_IF_ERROR(check_device_refs(msg.header, msg.device, msg.stripes,
                                              msg.regions.any()    ? "shared-memory regions (header.a_region ...)"
                                              : msg.resident.any() ? "resident handles or keep_result"
                                                                   : "",
                                              shared_.engine.max_leading_dimension()));
      SGEMM_RETURN_IF_ERROR(on_header(msg.header, msg.regions, msg.resident, msg.device));
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

void MultiplyCall::set_finished() {
  finish_phase_ = phase_;
  t_finish_ = Clock::now();
  phase_ = Phase::kDone;  // from any phase but kDone (legal_move); callers check done() first
  client_lease_.reset();  // answered: the client may send its next request
  stream_ticket_.reset();
}

void MultiplyCall::finish(const Status& status) {
  if (done()) return;
  Status own = status;
  if (group_ && stripe_ == 0) {
    // The other stripes end too: a failure of one stripe's stream is named to the rest.
    const int stripes = group_->stripes();
    close_stripes(status);
    if (fail_origin_ > 0) {
      origin_code_ = status.code();
      own = seen_by_other_stripes(fail_origin_, stripes, status);
    }
  }
  for (ParkedChunk& p : parked_) defer([m = p.from] { m->unref(); });
  parked_.clear();
  final_status_ = own;
  set_finished();
  cancel_.cancel(own);                    // the engine stops at its next block
  if (assembler_) assembler_->fail(own);  // or where it waits for A
  if (memory_ticket_) {
    defer([this, ticket = memory_ticket_] {        // cancelled once mu_ is released: a cancel may run another grant
      if (shared_.budget.cancel(ticket)) unref();  // the waiter's reference
    });
    memory_ticket_ = 0;
  }
  Finish(to_grpc(own));
}

void MultiplyCall::finish_stream(const Status& status) {
  if (done()) return;
  if (stripe_ > 0)
    // The primary ends the other stripes; told with this call's lock released.
    defer([group = group_, stripe = stripe_, status] { group->primary()->stripe_failed(stripe, status); });
  else if (group_)
    fail_origin_ = 0;
  finish(status);
}

}  // namespace sgemm
