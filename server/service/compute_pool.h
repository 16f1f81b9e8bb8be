// The compute threads: Engine::run blocks, so it runs here, on as many
// threads as compute slots (--max-in-flight), never on a thread per stream.
// A task is accepted while a thread is idle or the queue has room
// (--max-queued); so admission never refuses while a slot is free.
//
// Threads: submit() from any thread; tasks run on the pool's threads. The
// destructor runs what is still queued (callers cancel it first) and joins.
#pragma once

#include <condition_variable>
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
  // Called by a task on its pool thread when its compute is done and what is
  // left is quick (handing the result to gRPC): its slot counts as free from
  // now on, so a request that arrives as the result goes out is not refused.
  void release_slot();

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
  std::vector<std::thread> threads_;
  static thread_local bool slot_released_;  // the running task called release_slot()
};

}  // namespace sgemm
