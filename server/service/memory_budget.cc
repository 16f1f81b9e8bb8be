#include "server/service/memory_budget.h"

#include <utility>
#include <vector>

namespace sgemm {

void MemoryBudget::Reservation::reset() {
  if (budget_ && bytes_ > 0) budget_->release(bytes_);
  budget_ = nullptr;
  bytes_ = 0;
}

int64_t MemoryBudget::in_use() const {
  std::lock_guard lock(mu_);
  return in_use_;
}

int MemoryBudget::waiters() const {
  std::lock_guard lock(mu_);
  return int(waiters_.size());
}

std::optional<MemoryBudget::Reservation> MemoryBudget::try_reserve(int64_t bytes) {
  std::lock_guard lock(mu_);
  if (!waiters_.empty() || bytes > capacity_ - in_use_) return std::nullopt;
  in_use_ += bytes;
  return Reservation(this, bytes);
}

uint64_t MemoryBudget::enqueue(int64_t bytes, Grant grant) {
  std::lock_guard lock(mu_);
  if (int(waiters_.size()) >= max_waiters_) return 0;
  const uint64_t ticket = next_ticket_++;
  waiters_.push_back({ticket, bytes, std::move(grant)});
  return ticket;
}

bool MemoryBudget::cancel(uint64_t ticket) {
  std::vector<Waiter> granted;
  bool found = false;
  {
    std::lock_guard lock(mu_);
    for (auto it = waiters_.begin(); it != waiters_.end(); ++it) {
      if (it->ticket == ticket) {
        const bool was_head = it == waiters_.begin();
        waiters_.erase(it);
        found = true;
        // The head leaving may let the next ones fit.
        while (was_head && !waiters_.empty() && waiters_.front().bytes <= capacity_ - in_use_) {
          in_use_ += waiters_.front().bytes;
          granted.push_back(std::move(waiters_.front()));
          waiters_.pop_front();
        }
        break;
      }
    }
  }
  for (Waiter& w : granted) w.grant(Reservation(this, w.bytes));
  return found;
}

void MemoryBudget::release(int64_t bytes) {
  std::vector<Waiter> granted;
  {
    std::lock_guard lock(mu_);
    in_use_ -= bytes;
    while (!waiters_.empty() && waiters_.front().bytes <= capacity_ - in_use_) {
      in_use_ += waiters_.front().bytes;
      granted.push_back(std::move(waiters_.front()));
      waiters_.pop_front();
    }
  }
  for (Waiter& w : granted) w.grant(Reservation(this, w.bytes));
}

}  // namespace sgemm
