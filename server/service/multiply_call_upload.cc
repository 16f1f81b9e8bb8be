// MultiplyCall's upload: the request's memory is reserved at its first data
// chunk (or queued for, holding nothing), each chunk is copied once into its
// matrix's buffer (allocated at the matrix's first chunk), and after each
// chunk the compute-slot policy says whether computing starts (complete, or
// early while A arrives).
#include <algorithm>

#include "server/service/multiply_call.h"
#include "server/service/request_checks.h"

namespace sgemm {

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
  SGEMM_ASSIGN_OR_RETURN(memory_ticket_,
                         queue_for_memory(shared_, footprint_bytes_, refs_,
                                          [this](MemoryBudget::Reservation r) { on_memory_granted(std::move(r)); }));
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
  const int64_t elements = request_matrix_elements(header_, matrix);
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
  // With stripes, every stripe must also have attached: one past the last
  // block of the stored A and B (and with no C to send) completes nothing,
  // but the rows of C of its blocks go out on its stream.
  if (assembler_->complete() && (!group_ || group_->first_missing() < 0)) {
    t_received_ = Clock::now();
    if (phase_ == Phase::kReceiving) return start_compute(/*early=*/false);
    // Computing started early and its data is all here: the running task no
    // longer waits for the client, so it keeps its slot.
    if (!move_to(Phase::kComputing)) return Status::Ok();
    if (pool_id_) shared_.pool.forget(pool_id_);
    pool_id_ = 0;
  } else if (phase_ == Phase::kReceiving && !assembler_->complete() && may_start_early()) {
    SGEMM_RETURN_IF_ERROR(start_compute(/*early=*/true));
  }
  start_read();
  return Status::Ok();
}

bool MultiplyCall::may_start_early() const {
  if (!assembler_) return false;  // no upload row: nothing arrives later
  // With op(A) = A^T every row of C needs every row of the stored A: nothing
  // could be computed before A is complete.
  if (header_.op_a == Op::kT) return false;
  // A batch's products are launched together once every operand is in.
  if (header_.batch) return false;
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

}  // namespace sgemm
