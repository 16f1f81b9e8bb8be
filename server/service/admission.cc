#include "server/service/admission.h"

#include <string>

namespace sgemm {

void AdmissionQueue::Ticket::release() {
  if (q_) q_->release_slot();
  q_ = nullptr;
}

void AdmissionQueue::release_slot() {
  {
    std::lock_guard lock(mu_);
    --in_flight_;
  }
  cv_.notify_all();
}

StatusOr<AdmissionQueue::Ticket> AdmissionQueue::admit(std::chrono::steady_clock::time_point deadline,
                                                       const std::function<bool()>& cancelled) {
  std::unique_lock lock(mu_);
  if (in_flight_ < max_in_flight_ && queued_ == 0) {
    ++in_flight_;
    return Ticket(this);
  }
  if (queued_ >= max_queued_)
    return Unavailable("server busy: " + std::to_string(in_flight_) + " requests in flight and " +
                       std::to_string(queued_) + " queued (limits: --max-in-flight " +
                       std::to_string(max_in_flight_) + ", --max-queued " + std::to_string(max_queued_) +
                       "); retry later");
  ++queued_;
  while (true) {
    if (in_flight_ < max_in_flight_) {
      --queued_;
      ++in_flight_;
      return Ticket(this);
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      --queued_;
      return DeadlineExceeded("deadline expired while queued for a compute slot");
    }
    if (cancelled && cancelled()) {
      --queued_;
      return Cancelled("request cancelled while queued for a compute slot");
    }
    cv_.wait_until(lock, std::min(deadline, now + std::chrono::milliseconds(20)));
  }
}

int AdmissionQueue::in_flight() const {
  std::lock_guard lock(mu_);
  return in_flight_;
}

int AdmissionQueue::queued() const {
  std::lock_guard lock(mu_);
  return queued_;
}

}  // namespace sgemm
