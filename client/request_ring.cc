#include "client/request_ring.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "proto/grpc_status.h"

namespace sgemm {

namespace {

using Clock = std::chrono::steady_clock;

int64_t us_until(Clock::time_point t) {
  return std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::microseconds>(t - Clock::now()).count());
}

}  // namespace

RequestRing::RequestRing(ring::RingView view, RingOptions options) : view_(view), options_(options) {
  for (int i = options_.slots - 1; i >= 0; --i) free_.push_back(i);
  abandoned_.assign(std::size_t(options_.slots), false);
}

StatusOr<std::unique_ptr<RequestRing>> RequestRing::open(const std::shared_ptr<grpc::Channel>& channel,
                                                         const std::function<void(grpc::ClientContext&)>& prepare,
                                                         const std::string& region, void* memory, RingOptions options) {
  SGEMM_RETURN_IF_ERROR(
      ring::check_layout(0, options.slots, options.slot_bytes, ring::ring_bytes(options.slots, options.slot_bytes)));
  std::unique_ptr<RequestRing> r(new RequestRing(ring::RingView(memory, options.slots, options.slot_bytes), options));
  r->view_.format();
  r->stub_ = v1::Sgemm::NewStub(channel);
  if (prepare) prepare(r->ctx_);
  v1::OpenRingRequest req;
  req.set_region(region);
  req.set_offset(0);
  req.set_slots(options.slots);
  req.set_slot_bytes(options.slot_bytes);
  r->reader_ = r->stub_->OpenRing(&r->ctx_, req);
  v1::RingEvent first;
  if (!r->reader_->Read(&first) || !first.opened()) {
    const grpc::Status st = r->reader_->Finish();
    if (!st.ok()) return from_grpc(st);
    return Unavailable("the server closed the request ring before opening it");
  }
  r->watcher_ = std::thread([p = r.get()] { p->watch(); });
  return r;
}

RequestRing::~RequestRing() {
  ctx_.TryCancel();
  if (watcher_.joinable()) watcher_.join();
}

void RequestRing::watch() {
  v1::RingEvent event;
  while (reader_->Read(&event)) {
  }
  const grpc::Status st = reader_->Finish();
  {
    std::lock_guard lock(mu_);
    closed_ = st.ok() ? Unavailable("the server closed the request ring") : from_grpc(st);
    open_.store(false, std::memory_order_seq_cst);
  }
  free_cv_.notify_all();
  // Requests asleep on their slots learn of it from the flag.
  for (int i = 0; i < view_.slots(); ++i) ring::futex_wake_all(&view_.slot(i)->state);
}

StatusOr<int> RequestRing::take_slot(Clock::time_point deadline) {
  std::unique_lock lock(mu_);
  for (;;) {
    if (!open_.load()) return closed_;
    // A slot given up on is free again once the server has answered it.
    for (int i = 0; i < view_.slots(); ++i)
      if (abandoned_[std::size_t(i)] && view_.slot(i)->state.load(std::memory_order_acquire) == ring::kAnswered) {
        abandoned_[std::size_t(i)] = false;
        view_.slot(i)->state.store(ring::kFree, std::memory_order_relaxed);
        free_.push_back(i);
      }
    if (!free_.empty()) {
      const int i = free_.back();
      free_.pop_back();
      return i;
    }
    // Abandoned slots are looked at again every millisecond.
    const auto until = std::min(deadline, Clock::now() + std::chrono::milliseconds(1));
    free_cv_.wait_until(lock, until);
    if (Clock::now() >= deadline) return DeadlineExceeded("no free slot in the request ring before the deadline");
  }
}

void RequestRing::give_back(int slot) {
  view_.slot(slot)->state.store(ring::kFree, std::memory_order_relaxed);
  {
    std::lock_guard lock(mu_);
    free_.push_back(slot);
  }
  free_cv_.notify_one();
}

Status RequestRing::exchange(const grpc::ByteBuffer& request, grpc::ByteBuffer* response, Clock::time_point deadline) {
  const std::size_t capacity = std::size_t(view_.payload_capacity());
  if (request.Length() > capacity)
    return InvalidArgument("the request (" + std::to_string(request.Length()) +
                           " bytes) exceeds the request ring's slot payload of " + std::to_string(capacity) + " bytes");
  SGEMM_ASSIGN_OR_RETURN(const int i, take_slot(deadline));
  ring::SlotHeader* h = view_.slot(i);
  uint8_t* payload = view_.payload(i);
  std::vector<grpc::Slice> slices;
  if (!request.Dump(&slices).ok()) {
    give_back(i);
    return Internal("the request's bytes are unreadable");
  }
  std::size_t n = 0;
  for (const grpc::Slice& s : slices) {
    std::memcpy(payload + n, s.begin(), s.size());
    n += s.size();
  }
  h->request_bytes = uint32_t(n);
  h->caller_waiting.store(0, std::memory_order_relaxed);
  h->state.store(ring::kPosted, std::memory_order_seq_cst);
  ring::RingHeader* rh = view_.header();
  rh->doorbell.fetch_add(1, std::memory_order_seq_cst);
  if (rh->server_waiting.load(std::memory_order_seq_cst) != 0) ring::futex_wake_all(&rh->doorbell);

  // Poll for the answer, then sleep on the slot's state.
  const auto spin_until = Clock::now() + options_.spin;
  uint32_t state = h->state.load(std::memory_order_acquire);
  while (state != ring::kAnswered && open_.load(std::memory_order_relaxed) && Clock::now() < spin_until) {
    ring::poll_pause();
    state = h->state.load(std::memory_order_acquire);
  }
  while (state != ring::kAnswered) {
    if (!open_.load(std::memory_order_seq_cst) || Clock::now() >= deadline) {
      std::lock_guard lock(mu_);
      abandoned_[std::size_t(i)] = true;  // the server may still answer it
      return open_.load() ? DeadlineExceeded("no answer from the request ring before the deadline") : closed_;
    }
    h->caller_waiting.store(1, std::memory_order_seq_cst);
    state = h->state.load(std::memory_order_seq_cst);
    if (state != ring::kAnswered) ring::futex_wait(&h->state, state, std::min<int64_t>(us_until(deadline), 50000));
    h->caller_waiting.store(0, std::memory_order_relaxed);
    state = h->state.load(std::memory_order_acquire);
  }
  const int32_t code = h->status_code;
  const std::size_t got = std::min<std::size_t>(h->answer_bytes, capacity);
  Status st;
  if (code == 0) {
    grpc::Slice bytes(payload, got);
    *response = grpc::ByteBuffer(&bytes, 1);
  } else {
    st = from_grpc(grpc::Status(grpc::StatusCode(code), std::string(reinterpret_cast<const char*>(payload), got)));
  }
  give_back(i);
  return st;
}

}  // namespace sgemm
