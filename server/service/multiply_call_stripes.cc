// MultiplyCall's half for requests spread over several streams
// (GemmHeader.stripes; docs/transport.md "One request over several
// connections"). The primary (stripe 0) owns the request; secondaries attach
// by token, copy their chunks into the primary's assembler and send the rows
// of C of their blocks. Locking: multiply_call.h.
#include <algorithm>

#include "server/service/multiply_call.h"

namespace sgemm {

Status MultiplyCall::seen_by_other_stripes(int origin, int stripes, const Status& status) {
  // Their own clients did not cancel them: a cancelled stripe aborts the others.
  const StatusCode code = status.code() == StatusCode::kCancelled ? StatusCode::kAborted : status.code();
  return Status(code, "stripe " + std::to_string(origin) + " of " + std::to_string(stripes) +
                          " of this request failed (" + std::string(status_code_name(status.code())) +
                          "): " + status.message());
}

Status MultiplyCall::start_stripes(int stripes, int64_t stripe_rows) {
  const int max = shared_.options.max_stripes;
  if (stripes > max)
    return InvalidArgument("header.stripes " + std::to_string(stripes) + " is over this server's limit of " +
                           std::to_string(max) + " streams per request (--max-stripes, Limits.max_stripes)");
  if (stripe_rows < 1)
    return InvalidArgument("header.stripe_rows is " + std::to_string(stripe_rows) + "; with header.stripes " +
                           std::to_string(stripes) + " it must be at least 1 (rows per block)");
  // Each stripe answers with the rows of C of its blocks, so each needs one:
  // C's m rows bound the stripes. The stored A and B may have fewer blocks
  // (k x m under op_a = T, n x k under op_b = T); a stripe past their last
  // block sends none of them and still carries its blocks of C.
  const int64_t m = header_.shape.m;
  const int64_t blocks = m / stripe_rows + (m % stripe_rows != 0);
  if (blocks < stripes)
    return InvalidArgument("header.stripes " + std::to_string(stripes) + " exceeds the " + std::to_string(blocks) +
                           " blocks of C (m = " + std::to_string(m) +
                           " rows, stripe_rows = " + std::to_string(stripe_rows) +
                           "): every stripe answers with a block of C's rows; use fewer stripes or smaller blocks");
  ++refs_;  // the group's reference on this call, released when the group goes
  auto group = shared_.stripes.create(stripes, stripe_rows, header_, client_, this, [this] { unref(); });
  if (!group.ok()) {
    --refs_;
    return group.status();
  }
  group_ = std::move(group).value();
  assembler_->set_stripes(stripes, stripe_rows);
  // The token goes out first; chunks of C follow it (send_more waits for this write).
  out_ = encode_stripe_grant(group_->token(), stripes);
  writing_ = true;
  write_since_ = Clock::now();
  StartWrite(&out_);
  return Status::Ok();
}

Status MultiplyCall::on_attach(const RequestMessage& msg) {
  SGEMM_ASSIGN_OR_RETURN(std::shared_ptr<StripeGroup> group, shared_.stripes.find(msg.token));
  SGEMM_RETURN_IF_ERROR(group->attach(msg.stripe, client_, this));
  // Attached: the primary may hand this call rows from now on (it waits for mu_, held here).
  group_ = std::move(group);
  stripe_ = msg.stripe;
  header_ = group_->request();
  if (!move_to(Phase::kReceiving)) return Status::Ok();
  // The primary may have been waiting for this stripe alone (it had no block of A or B to send).
  defer([group = group_] { group->primary()->stripe_attached(); });
  ++refs_;                              // the primary's reference, released once it has posted the end
  shared_.requests_total.fetch_sub(1);  // part of the primary's request, not one of its own
  // The group keeps the primary alive (stripe_group.h): its id can be read.
  if (shared_.log.admit(spdlog::level::debug))
    shared_.log.write(spdlog::level::debug,
                      fmt::format("request id={} stripe {} of {} attached peer={}", group_->primary()->id_, stripe_,
                                  group_->stripes(), ctx_->peer()));
  start_read();
  return Status::Ok();
}

void MultiplyCall::on_stripe_read(std::unique_lock<std::mutex>& lock, bool ok) {
  if (!ok) {
    read_closed_ = true;
    if (ctx_->IsCancelled()) {
      finish_stream(cancelled_status());
      return after_unlock(lock);
    }
    // Its share is up: waiting for its rows of C.
    if (phase_ == Phase::kReceiving && !move_to(Phase::kSending)) return after_unlock(lock);
    std::shared_ptr<StripeGroup> group = group_;
    const int stripe = stripe_;
    lock.unlock();
    group->primary()->stripe_half_closed(stripe);
    return;
  }
  ++messages_;
  auto msg = decode_request(in_, messages_, shared_.options.limits.max_chunk_bytes);
  Status st = msg.status();
  if (msg.ok() && msg->kind != RequestMessage::Kind::kChunk)
    st = InvalidArgument("message " + std::to_string(messages_) + " of stripe " + std::to_string(stripe_) +
                         "'s stream is not a chunk: after its StripeAttach a stripe's stream carries only "
                         "`chunk`s (the header is stripe 0's)");
  if (!st.ok()) {
    finish_stream(st);
    return after_unlock(lock);
  }
  if (phase_ != Phase::kReceiving) {
    finish_stream(InvalidArgument("stripe " + std::to_string(stripe_) + " sent a chunk after its share was complete"));
    return after_unlock(lock);
  }
  std::shared_ptr<StripeGroup> group = group_;
  const int stripe = stripe_;
  lock.unlock();
  bool parked = false;
  st = group->primary()->stripe_chunk(this, stripe, *msg, &parked);
  lock.lock();
  if (!st.ok()) {
    finish_stream(st);
  } else if (!parked && !done()) {
    start_read();
  }
  after_unlock(lock);
}

Status MultiplyCall::stripe_chunk(MultiplyCall* from, int stripe, RequestMessage& msg, bool* parked) {
  *parked = false;
  std::unique_lock lock(mu_);
  // The request has ended: the end posted to the stripe tells it how (or has told it).
  if (done() || !assembler_) return Status::Ok();
  if (!accepts_chunks() && phase_ != Phase::kWaitMemory)
    return InvalidArgument("stripe " + std::to_string(stripe) + " sent a chunk for " +
                           std::string(matrix_name(msg.matrix)) + ", but every declared matrix was already complete");
  if (reservation_.bytes() == 0) {
    // A bad chunk is refused before it costs memory; the request's footprint is reserved once, by any stripe.
    SGEMM_RETURN_IF_ERROR(assembler_->check_chunk(msg.matrix, msg.offset, msg.data_bytes, stripe));
    bool waiting = false;
    Status st = reserve_or_wait(&waiting);
    if (!st.ok()) {  // the request's failure (its memory), not the stripe's
      finish(st);
      after_unlock(lock);
      return Status::Ok();
    }
    if (waiting) {
      from->ref();  // held until the grant takes the chunk (or the request ends)
      parked_.push_back({from, stripe, std::move(msg)});
      *parked = true;
      after_unlock(lock);
      return Status::Ok();
    }
  }
  if (t_first_data_ == Clock::time_point{}) t_first_data_ = Clock::now();
  Status st = ensure_buffer(msg.matrix, msg.offset, msg.data_bytes, stripe);
  if (!st.ok()) return st;
  MatrixAssembler* assembler = &*assembler_;  // lives as long as this call; the stripe holds the group
  after_unlock(lock);
  // The copy runs on the stripe's own thread with no lock of ours: stripes fill disjoint rows in parallel.
  SGEMM_RETURN_IF_ERROR(assembler->add_chunk(
      msg.matrix, msg.offset, msg.data_bytes, [&](void* dst) { msg.copy_data(dst); }, stripe));
  lock.lock();
  if (!done()) {
    bytes_in_ += int64_t(msg.data_bytes);
    st = after_chunk();  // may start computing (complete, or early); keeps stripe 0's read posted
    if (!st.ok()) finish(st);
  }
  after_unlock(lock);
  return Status::Ok();
}

void MultiplyCall::stripe_half_closed(int stripe) {
  std::unique_lock lock(mu_);
  if (!done() && assembler_) {
    Status st = assembler_->finish_stripe(stripe);
    if (!st.ok()) {
      fail_origin_ = stripe;
      finish(st);
    }
  }
  after_unlock(lock);
}

void MultiplyCall::stripe_attached() {
  std::unique_lock lock(mu_);
  // Only a complete upload waits on attaches; a parked chunk (kWaitMemory) sees them at its grant.
  if (!done() && assembler_ && accepts_chunks() && assembler_->complete()) {
    Status st = after_chunk();
    if (!st.ok()) finish(st);
  }
  after_unlock(lock);
}

void MultiplyCall::stripe_failed(int stripe, const Status& why) {
  std::unique_lock lock(mu_);
  if (!done()) {
    fail_origin_ = stripe;
    finish(why);
  }
  after_unlock(lock);
}

void MultiplyCall::close_stripes(const Status& status) {
  std::vector<MultiplyCall*> members = group_->close();
  shared_.stripes.remove(group_->token());
  const int stripes = group_->stripes();
  for (int s = 1; s < int(members.size()); ++s) {
    MultiplyCall* m = members[std::size_t(s)];
    if (!m) continue;
    const bool as_is = status.ok() || fail_origin_ < 0 || fail_origin_ == s;
    group_->post_end(s, as_is ? status : seen_by_other_stripes(fail_origin_, stripes, status));
    defer([m] {  // it takes its end under its own lock; then the reference taken at attach goes
      m->take_mail();
      m->unref();
    });
  }
  defer([group = std::move(group_)]() mutable { group.reset(); });  // may release this call (the group's reference)
}

void MultiplyCall::route_rows(int64_t b, int64_t e) {
  if (!assembler_ || assembler_->stripes() == 1) {
    rows_.emplace_back(b, e);
    return;
  }
  if (!group_) return;  // the request has ended: nothing more goes out
  const int64_t block = group_->stripe_rows();
  const int64_t n = header_.shape.n;
  for (int64_t r = b; r < e;) {
    const int64_t end = std::min(e, (r / block + 1) * block);
    const int owner = group_->owner_of_row(r);
    if (owner == 0) {
      rows_.emplace_back(r, end);
    } else if (MultiplyCall* m = group_->member(owner)) {
      // Posted in order under the group's leaf lock; the stripe takes it, under
      // its own lock, once this call's lock is released (after_unlock).
      group_->post_rows(owner, {r, end, job_.c, buffers_[static_cast<int>(MatrixId::kC)]});
      m->ref();  // held until the wake
      defer([m] {
        m->take_mail();
        m->unref();
      });
      stripe_bytes_out_ += (end - r) * n * int64_t(sizeof(float));
    }
    r = end;
  }
}

void MultiplyCall::take_mail() {
  std::unique_lock lock(mu_);
  if (done() || !group_) return after_unlock(lock);
  StripeGroup::Mail mail = group_->take_mail(stripe_);
  for (StripeGroup::Rows& r : mail.rows) {
    job_.c = const_cast<float*>(r.c);
    buffers_[static_cast<int>(MatrixId::kC)] = std::move(r.keep);
    rows_.emplace_back(r.begin, r.end);
  }
  if (mail.end && !mail.end->ok())
    finish(*mail.end);
  else
    send_more();  // with an OK end, finishes once the rows are sent
  after_unlock(lock);
}

void MultiplyCall::resume_read() {
  std::lock_guard lock(mu_);
  if (!done()) start_read();
}

}  // namespace sgemm
