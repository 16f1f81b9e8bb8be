// How a Multiply takes a compute slot (docs/lifecycle.md), decided in one
// place from the request's facts:
//
//   early   while A is still arriving: B (and no input C) complete, A's rest
//           due within half the feed-wait budget at the rate seen so far, and
//           never again after a yield (the client has shown it may stall).
//           Only on an idle slot, and preemptibly: the run yields the slot
//           (the engine stops, holding nothing) when another request asks for
//           it or when it has waited the budget in all for A; the request goes
//           back to receiving, and rows of C already sent are not sent again.
//   here    a complete upload whose product the engine estimates within
//           --inline-compute-ms, on the gRPC thread that received its last
//           message; or any complete request on a request ring's own thread
//           (ring_call.h), which serves one caller and would only poll the
//           ring meanwhile (unstriped only; the pool must have a slot idle)
//   queued  every other complete upload: a pool thread, in FIFO order
//
// An input C never starts early: a second run after a yield would need C's
// input rows, which the first may have overwritten.
//
// Threads: ComputeSlotPolicy is immutable; SentRows is guarded by its owner.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

namespace sgemm {

// What the early-start rule looks at, as the request knows it now.
struct UploadFacts {
  bool uploads_a = false;  // A comes as chunks (not from a region or the resident store)
  bool has_c = false;      // an input C
  int yields = 0;          // times a run of this request has yielded its slot
  int64_t a_received = 0, a_elements = 0;
  int64_t b_received = 0, b_elements = 0;  // B's elements present and declared (0/0 when B is not uploaded)
  int64_t bytes_in = 0;                    // payload bytes received so far
  double seconds_since_first_data = 0;
};

// The thread a complete request is decided on.
enum class Receiver {
  kOther,  // not one that received the request (the thread that freed memory, say)
  kGrpc,   // the gRPC thread that received its last message (shared by every caller)
  kRing,   // a request ring's own thread (one caller's)
};

class ComputeSlotPolicy {
 public:
  enum class Way { kHere, kQueued };

  // `feed_wait_budget` <= 0: never early; `inline_compute_ms` <= 0: never here.
  ComputeSlotPolicy(std::chrono::milliseconds feed_wait_budget, double inline_compute_ms)
      : budget_(feed_wait_budget), inline_ms_(inline_compute_ms) {}

  bool start_early(const UploadFacts& f) const;
  // A complete upload: here or queued. `estimate_ms()` (< 0: the engine
  // cannot say) is asked only when it decides.
  Way complete(Receiver receiver, bool striped, const std::function<double()>& estimate_ms) const;
  // How long an early run may wait for A, in all, before it yields.
  std::chrono::milliseconds feed_wait_budget() const { return budget_; }

 private:
  const std::chrono::milliseconds budget_;
  const double inline_ms_;
};

// Rows of C the engine has reported, so that a run after a yield sends only
// the rows the yielded run did not (they are final and went out already).
class SentRows {
 public:
  void record(int64_t begin, int64_t end) { reported_.emplace_back(begin, end); }
  // A run yielded: what it reported is skipped from now on.
  void on_yield();
  // Calls `send(b, e)` for each part of [begin, end) not reported before the last yield, in order.
  template <typename F>
  void for_each_unsent(int64_t begin, int64_t end, F&& send) const {
    int64_t b = begin;
    for (const auto& [s0, s1] : skip_) {
      if (s1 <= b) continue;
      if (s0 >= end) break;
      if (s0 > b) send(b, s0);
      if (s1 > b) b = s1;
    }
    if (b < end) send(b, end);
  }

 private:
  std::vector<std::pair<int64_t, int64_t>> reported_;  // every range reported, in order
  std::vector<std::pair<int64_t, int64_t>> skip_;      // reported before the last yield: sorted, merged
};

}  // namespace sgemm
