// Bounds the work the server takes on: at most `max_in_flight` requests run at
// once, at most `max_queued` more wait for a slot; beyond that a request is
// refused at once with UNAVAILABLE (retryable). Protobuf- and CUDA-free.
//
// Threads: admit() is called from RPC threads concurrently; a Ticket releases
// its slot when destroyed, on whatever thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>

#include "common/status.h"

namespace sgemm {

class AdmissionQueue {
 public:
  class Ticket {
   public:
    Ticket() = default;
    explicit Ticket(AdmissionQueue* q) : q_(q) {}
    Ticket(Ticket&& o) noexcept : q_(o.q_) { o.q_ = nullptr; }
    Ticket& operator=(Ticket&& o) noexcept {
      if (this != &o) { release(); q_ = o.q_; o.q_ = nullptr; }
      return *this;
    }
    ~Ticket() { release(); }
    void release();

   private:
    AdmissionQueue* q_ = nullptr;
  };

  AdmissionQueue(int max_in_flight, int max_queued) : max_in_flight_(max_in_flight), max_queued_(max_queued) {}

  // Takes a slot, waiting in the queue if needed. UNAVAILABLE when the queue is
  // full; DEADLINE_EXCEEDED when `deadline` passes while waiting; CANCELLED when
  // `cancelled()` turns true (polled while waiting).
  StatusOr<Ticket> admit(std::chrono::steady_clock::time_point deadline, const std::function<bool()>& cancelled);

  int in_flight() const;
  int queued() const;
  int max_in_flight() const { return max_in_flight_; }
  int max_queued() const { return max_queued_; }

 private:
  void release_slot();

  const int max_in_flight_;
  const int max_queued_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int in_flight_ = 0;  // guarded by mu_
  int queued_ = 0;     // guarded by mu_
};

}  // namespace sgemm
