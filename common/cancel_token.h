// CancelToken: how a request's caller tells the code running it to stop.
#pragma once

#include <atomic>
#include <mutex>

#include "common/status.h"

namespace sgemm {

// Set by the service when a request's deadline passes or its client goes away;
// engines read it at every block boundary (and while they wait for their
// GPUs) and stop with status(). Thread-safe; the first cancel() wins.
class CancelToken {
 public:
  void cancel(Status why) {
    std::lock_guard lock(mu_);
    if (cancelled_.load(std::memory_order_relaxed)) return;
    why_ = std::move(why);
    cancelled_.store(true, std::memory_order_release);
  }
  bool cancelled() const { return cancelled_.load(std::memory_order_acquire); }
  // OK while not cancelled, else the reason given to cancel().
  Status status() const {
    if (!cancelled()) return Status::Ok();
    std::lock_guard lock(mu_);
    return why_;
  }

 private:
  mutable std::mutex mu_;
  std::atomic<bool> cancelled_{false};
  Status why_;  // guarded by mu_
};

}  // namespace sgemm
