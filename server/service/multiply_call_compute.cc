// MultiplyCall's compute: the job is handed to a compute slot as the
// compute-slot policy says (queued, here, or early and preemptible), runs
// Engine::run on that thread, and goes back to receiving when an early run
// yields; the engine's finished rows go to their streams (route_rows).
#include "server/service/compute_start.h"
#include "server/service/multiply_call.h"

namespace sgemm {

Status MultiplyCall::start_compute(bool early) {
  const int c_idx = static_cast<int>(MatrixId::kC);
  if (!caller_memory_) {     // the caller-memory rows and start_from_caller_memory() set the job's matrices
    if (!buffers_[c_idx]) {  // C is output only: its memory was reserved with the rest
      const int64_t c_elements = request_matrix_elements(header_, MatrixId::kC);
      auto got = shared_.engine.host_allocator().allocate(std::size_t(c_elements) * sizeof(float));
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
  } else {
    // Complete: coalesced, here or queued (compute_start.h, as MultiplyUnary decides).
    CompleteRequest facts;
    facts.job = &job_;
    facts.footprint_bytes = footprint_bytes_;
    facts.may_coalesce = !group_ && !keep_.keep;
    facts.receiver = may_compute_here_ ? Receiver::kGrpc : Receiver::kOther;
    facts.striped = group_ != nullptr;
    auto start = start_complete_request(shared_, facts, this, [this] { run_compute(); });
    if (!start.ok()) {
      --refs_;
      return start.status();
    }
    // Run on this thread once mu_ is released; the task's reference keeps `this` until run_compute()'s end.
    if (*start == ComputeStart::kHereCoalesced)
      run_here_ = [coalescer = &shared_.coalescer, pool = &shared_.pool] { coalescer->run_here(*pool); };
    else if (*start == ComputeStart::kHereAlone)
      run_here_ = [this, pool = &shared_.pool] {
        run_compute();
        pool->end_here();
      };
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
  if (caller_memory_) {
    if (Status intact = caller_memory_->check_after_run(); !intact.ok()) result = intact;
    // The engine is done with the caller's memory: an UnregisterRegion waiting on it may answer now.
    caller_memory_->release();
  }
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
  }
  computed(std::move(result));
}

void MultiplyCall::computed(StatusOr<GemmReport> result) {
  {
    std::unique_lock lock(mu_);
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

void MultiplyCall::coalesced_started() {
  std::lock_guard lock(mu_);
  t_compute_start_ = Clock::now();
  if (phase_ == Phase::kQueued) move_to(Phase::kComputing);
}

void MultiplyCall::coalesced_done(StatusOr<GemmReport> result, int launch_products) {
  {
    std::lock_guard lock(mu_);
    launch_products_ = launch_products;
    // Answered without a launch (cancelled while waiting, or refused): the outcome goes out from computing.
    if (phase_ == Phase::kQueued) move_to(Phase::kComputing);
  }
  // A shared launch wrote C whole and reported no rows: all of them are final now.
  if (result.ok() && launch_products > 1) rows_ready(0, header_.shape.m);
  computed(std::move(result));
}

void MultiplyCall::rows_ready(int64_t row_begin, int64_t row_end) {
  std::unique_lock lock(mu_);
  if (c_in_caller_memory() || !keep_.send_c) return;  // C is in the caller's memory, or kept resident: only the summary
  sent_rows_.record(row_begin, row_end);
  // After a yield, the new run reports rows the first run already sent: only the rest goes out.
  sent_rows_.for_each_unsent(row_begin, row_end, [this](int64_t b, int64_t e) { route_rows(b, e); });
  send_more();
  after_unlock(lock);
}

}  // namespace sgemm
