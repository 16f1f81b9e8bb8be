// CancelToken: how a request's caller tells the code running it to stop.
#pragma once

#include <atomic>

#include "common/status.h"
#include "common/thread_annotations.h"

namespace sgemm {

// Set by the service when a request's deadline passes or its client goes away;
// engines read it at every block boundary (and while they wait for their
// GPUs) and stop with status(). Thread-safe; the first cancel() wins.
class CancelToken {
 public:
  void cancel(Status why) SGEMM_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    if (cancelled_.load(std::memory_order_relaxed)) return;
    why_ = std::move(why);
    cancelled_.store(true, std::memory_order_release);
  }
  bool cancelled() const { return cancelled_.load(std::memory_order_acquire); }
  // OK while not cancelled, else the reason given to cancel().
  Status status() const SGEMM_EXCLUDES(mu_) {
    if (!cancelled()) return Status::Ok();
    MutexLock lock(mu_);
    return why_;
  }

 private:
  mutable Mutex mu_;
  std::atomic<bool> cancelled_{false};
  Status why_ SGEMM_GUARDED_BY(mu_);
};

}  // namespace sgemm
