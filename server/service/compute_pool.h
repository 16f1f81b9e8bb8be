// The compute threads: Engine::run blocks, so it runs here, on as many
// threads as compute slots (--max-in-flight), never on a thread per stream.
// A task is accepted while a thread is idle or the queue has room
// (--max-queued); so admission never refuses while a slot is free.
//
// Threads: submit() from any thread; tasks run on the pool's threads. The
// destructor runs what is still queued (callers cancel it first) and joins.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace sgemm {

class ComputePool {
 public:
  ComputePool(int threads, int max_queued);
  ~ComputePool();
  ComputePool(const ComputePool&) = delete;
  ComputePool& operator=(const ComputePool&) = delete;

  // False (and `task` dropped unrun) when every thread is busy and the queue is full.
  bool submit(std::function<void()> task);
  // Accepted only when the whole pool is idle now (false, `task` dropped,
  // otherwise), as a preemptible task: while it is registered (until
  // forget(id)), the next submit() calls its `preempt` once (under the
  // pool's lock: it must only signal), and is accepted even beyond
  // --max-queued, taking the place the preempted task will free. For work
  // that started early and may wait for its client (MultiplyCall): it must
  // not hold the engine's locks or GPU lanes while another request could run.
  bool submit_if_idle(std::function<void()> task, std::function<void()> preempt, uint64_t* id);
  // The preemptible task `id` no longer holds its slot for its client.
  void forget(uint64_t id);
  // Called by a task on its pool thread when its compute is done and what is
  // left is quick (handing the result to gRPC): its slot counts as free from
  // now on, so a request that arrives as the result goes out is not refused.
  void release_slot();
  // For a quick task run on the calling thread rather than handed to a pool
  // thread (the hand-off costs a thread wake-up): takes a slot when a thread
  // is idle, nothing is queued and no preemptible task runs (false
  // otherwise, and on the pool's own threads). The task runs, then
  // end_here(); it may call release_slot() as pool tasks do. While the
  // slot is held, tasks submitted meanwhile queue behind it (no pool thread
  // starts one past the slots).
  bool reserve_here();
  void end_here();

  int running() const;
  int queued() const;
  int threads() const { return int(threads_.size()); }
  int max_queued() const { return max_queued_; }

 private:
  void loop();

  const int max_queued_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;  // guarded by mu_
  int running_ = 0;                          // guarded by mu_
  bool stopping_ = false;                    // guarded by mu_
  struct Preemptible {
    uint64_t id;
    std::function<void()> preempt;
  };
  std::vector<Preemptible> preemptible_;  // guarded by mu_
  uint64_t next_id_ = 1;                  // guarded by mu_
  std::vector<std::thread> threads_;
  static thread_local bool slot_released_;  // the running task called release_slot()
  static thread_local bool pool_thread_;    // this thread is one of threads_
};

}  // namespace sgemm
