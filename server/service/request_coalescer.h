// Server-side coalescing of small requests (docs/lifecycle.md, "Coalescing"),
// as Triton's dynamic batcher does for models: single-product requests whose
// operands are all in host memory and whose footprint (A + B + C) is at most
// --coalesce-max-bytes wait here instead of on the compute pool. One launch
// task at a time is queued on the pool for them; when a compute slot takes it,
// it takes every waiting request that shares the first one's arithmetic
// (alpha, beta, has_c, op(A), op(B), precision, kernel, split), up to
// --coalesce-max-products, and runs them as ONE group through the engine's
// batch path (server/engine/batch.h, Engine::run): natural batching, what
// queued while the slots were busy goes together. --coalesce-window-us makes a
// launch that found fewer than the largest batch wait that long, at most, for
// more; 0 (the default) adds no wait, so an idle server runs a lone request at
// once, alone and without a copy.
//
// A launch of several requests copies their operands into the launch's
// concatenated A, B and C (buffers from the engine's host allocator, kept and
// reused from launch to launch), and copies each product's C back into its
// request's buffer. Each request keeps its own status: one cancelled before
// the launch is not computed; one cancelled during it gets its cancellation;
// a product the engine reports failed fails only its request; and when the
// group launch itself fails (logged), or the engine would refuse the group
// (Engine::validate: its own limits on a launch), each of its requests runs
// alone, so that only a request that fails on its own fails.
//
// Threads: submit() from gRPC's threads (any thread); launches run on the
// compute pool's threads, or on the submitting thread when the caller runs
// run_here(). The coalescer must outlive the pool that runs its launches (the
// pool's destructor runs what is still queued).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "server/engine/engine.h"
#include "server/service/compute_pool.h"

namespace sgemm {

// What a request waiting in the coalescer offers it (MultiplyCall implements it).
class CoalescedRequest {
 public:
  // The request's job: one product, operands dense in host memory (eligible()
  // said so). Its cancel token is looked at before and after the launch.
  virtual const GemmJob& coalesced_job() const = 0;
  // A launch took the request: its compute starts (the launch's thread).
  virtual void coalesced_started() = 0;
  // The launch is over: the request's outcome, and how many products shared
  // its launch (1: it ran alone, as its own job). With launch_products > 1 and
  // an OK result, C is in the job's `c` and the job's sink was not called.
  virtual void coalesced_done(StatusOr<GemmReport> result, int launch_products) = 0;

 protected:
  ~CoalescedRequest() = default;
};

struct CoalesceOptions {
  // How long a launch that found fewer than max_products waits for more
  // (0: it takes what is waiting and runs at once). At most kMaxWindow.
  std::chrono::microseconds window{0};
  int max_products = 1;           // largest launch, in products; 1: coalescing is off
  int64_t max_bytes = 1LL << 20;  // a request's A + B + C at most this many bytes may wait here
  static constexpr std::chrono::microseconds kMaxWindow{100000};  // 100 ms: a window is short by design
};

// Start-up check of the options: INVALID_ARGUMENT naming the flag.
Status check_coalesce_options(const CoalesceOptions& options);

class RequestCoalescer {
 public:
  // `max_waiting`: requests that may wait at once (more are refused, as a
  // full pool queue refuses). `on_launch(products, report)` is called once per
  // launch (for the metrics; `report` is the launch's, null where it failed), `warn(line)` when a group launch failed
  // as a whole (its requests then run alone), both on the launch's thread.
  RequestCoalescer(Engine& engine, CoalesceOptions options, int max_waiting,
                   std::function<void(int, const GemmReport*)> on_launch, std::function<void(const std::string&)> warn);
  ~RequestCoalescer();
  RequestCoalescer(const RequestCoalescer&) = delete;
  RequestCoalescer& operator=(const RequestCoalescer&) = delete;

  const CoalesceOptions& options() const { return options_; }
  // Whether a request with `job` and `footprint_bytes` of host memory may
  // wait here: coalescing on, one product, every operand in dense host
  // memory, nothing fed while computing, no caller or resident memory, no
  // kernel or split named (the engine chooses how a group runs).
  bool eligible(const GemmJob& job, int64_t footprint_bytes) const;

  enum class Start {
    kQueued,  // a launch will take it on a pool thread
    kHere,    // the caller holds a reserved slot (ComputePool::reserve_here) and calls run_here()
  };
  // Queues `request` (it must stay alive until coalesced_done). With
  // `may_run_here`, when nothing else waits and a slot is idle, the slot is
  // reserved for the caller's thread. UNAVAILABLE when too many wait.
  StatusOr<Start> submit(CoalescedRequest* request, ComputePool& pool, bool may_run_here);
  // After submit() said kHere: runs one launch on this thread, then ends the slot.
  void run_here(ComputePool& pool);

  int waiting() const;
  // What the service's `queued` gauge adds for the coalescer: the waiting
  // requests, less the one launch task of theirs the pool's queue counts.
  int queued_beyond_pool() const;

 private:
  struct Arena;  // a launch's concatenated operands
  void launch(ComputePool& pool);
  // Queues a launch task when requests wait and none is queued; false when the pool refused it. mu_ held.
  bool schedule_locked(ComputePool& pool);
  // Takes the next launch's requests (waits out the window first). mu_ held via `lock`.
  std::vector<CoalescedRequest*> take(std::unique_lock<std::mutex>& lock);
  // Each ends the launch's slot (ComputePool::release_slot) once computing is over, then answers.
  void run_alone(CoalescedRequest* request, ComputePool& pool);
  void run_group(std::vector<CoalescedRequest*>& requests, ComputePool& pool);

  Engine& engine_;
  const CoalesceOptions options_;
  const int max_waiting_;
  const std::function<void(int, const GemmReport*)> on_launch_;
  const std::function<void(const std::string&)> warn_;

  mutable std::mutex mu_;
  std::condition_variable arrived_;  // a request was queued (a launch in its window waits on it)
  struct Waiting {
    CoalescedRequest* request;
    std::chrono::steady_clock::time_point since;
  };
  std::deque<Waiting> waiting_;  // guarded by mu_, in arrival order
  bool scheduled_ = false;       // guarded by mu_: a launch task is queued and has not yet taken requests
  bool here_ = false;            // guarded by mu_: a slot is reserved for a submitter's run_here()
  int launching_ = 0;            // guarded by mu_: launches running
  std::vector<std::unique_ptr<Arena>> arenas_;  // guarded by mu_: buffers of finished launches, for reuse
};

}  // namespace sgemm
