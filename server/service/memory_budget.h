// The one budget for the host memory that requests hold (page-locked and
// pageable together): input buffers, C, and results a client has not read
// yet. A request reserves against it as its data arrives, never at the header;
// a request that cannot fit now waits in a bounded FIFO of waiters (holding
// nothing), and one that can never fit is refused by the caller.
//
// Threads: every method is thread-safe. A waiter's `grant` runs on the thread
// that released the memory or cancelled the waiter ahead of it, with no lock
// of the budget held (enqueue() only queues, it never grants).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>

namespace sgemm {

class MemoryBudget {
 public:
  // Bytes held until destroyed (or reset()); move-only.
  class Reservation {
   public:
    Reservation() = default;
    Reservation(MemoryBudget* budget, int64_t bytes) : budget_(budget), bytes_(bytes) {}
    Reservation(Reservation&& o) noexcept : budget_(o.budget_), bytes_(o.bytes_) {
      o.budget_ = nullptr;
      o.bytes_ = 0;
    }
    Reservation& operator=(Reservation&& o) noexcept {
      if (this != &o) {
        reset();
        budget_ = o.budget_;
        bytes_ = o.bytes_;
        o.budget_ = nullptr;
        o.bytes_ = 0;
      }
      return *this;
    }
    Reservation(const Reservation&) = delete;
    Reservation& operator=(const Reservation&) = delete;
    ~Reservation() { reset(); }
    int64_t bytes() const { return bytes_; }
    void reset();

   private:
    MemoryBudget* budget_ = nullptr;
    int64_t bytes_ = 0;
  };
  using Grant = std::function<void(Reservation)>;

  // `capacity` bytes in all; at most `max_waiters` requests wait for memory.
  MemoryBudget(int64_t capacity, int max_waiters) : capacity_(capacity), max_waiters_(max_waiters) {}

  int64_t capacity() const { return capacity_; }
  int64_t in_use() const;
  int waiters() const;

  // Reserves at once, or nothing when it does not fit now (or others wait
  // before it: first come, first served).
  std::optional<Reservation> try_reserve(int64_t bytes);
  // Queues a waiter; `grant` is called once, when `bytes` fit. Returns a ticket
  // for cancel(), or 0 when max_waiters already wait (the caller refuses).
  uint64_t enqueue(int64_t bytes, Grant grant);
  // Drops a waiter. False when it was already granted (its grant runs or ran).
  bool cancel(uint64_t ticket);

 private:
  struct Waiter {
    uint64_t ticket;
    int64_t bytes;
    Grant grant;
  };
  void release(int64_t bytes);

  const int64_t capacity_;
  const int max_waiters_;
  mutable std::mutex mu_;
  int64_t in_use_ = 0;          // guarded by mu_
  uint64_t next_ticket_ = 1;    // guarded by mu_
  std::deque<Waiter> waiters_;  // guarded by mu_
};

}  // namespace sgemm
