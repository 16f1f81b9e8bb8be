#include "server/service/compute_pool.h"

namespace sgemm {

thread_local bool ComputePool::slot_released_ = false;
thread_local bool ComputePool::pool_thread_ = false;

ComputePool::ComputePool(int threads, int max_queued) : max_queued_(max_queued) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { loop(); });
}

ComputePool::~ComputePool() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

bool ComputePool::submit(std::function<void()> task) {
  {
    std::lock_guard lock(mu_);
    // Tasks beyond the idle threads wait; at most max_queued_ of them.
    const int idle = int(threads_.size()) - running_;
    if (stopping_) return false;
    // Tasks that hold a slot (and the engine's locks or GPU lanes, which may
    // be fewer than the slots) only for their clients' sake give them up.
    const bool preempted = !preemptible_.empty();
    for (auto& p : preemptible_) p.preempt();
    preemptible_.clear();
    if (int(tasks_.size()) >= idle + max_queued_ && !preempted) return false;
    tasks_.push_back(std::move(task));
  }
  cv_.notify_one();
  return true;
}

bool ComputePool::submit_if_idle(std::function<void()> task, std::function<void()> preempt, uint64_t* id) {
  {
    std::lock_guard lock(mu_);
    if (stopping_ || running_ > 0 || !tasks_.empty()) return false;
    tasks_.push_back(std::move(task));
    *id = next_id_++;
    preemptible_.push_back({*id, std::move(preempt)});
  }
  cv_.notify_one();
  return true;
}

void ComputePool::forget(uint64_t id) {
  std::lock_guard lock(mu_);
  for (auto it = preemptible_.begin(); it != preemptible_.end(); ++it) {
    if (it->id == id) {
      preemptible_.erase(it);
      return;
    }
  }
}

bool ComputePool::reserve_here() {
  if (pool_thread_) return false;
  std::lock_guard lock(mu_);
  if (stopping_ || !tasks_.empty() || !preemptible_.empty() || running_ >= int(threads_.size())) return false;
  ++running_;
  slot_released_ = false;
  return true;
}

void ComputePool::end_here() {
  {
    std::lock_guard lock(mu_);
    if (!slot_released_) --running_;
    slot_released_ = false;
  }
  cv_.notify_one();  // a queued task may have waited for this slot
}

void ComputePool::release_slot() {
  {
    std::lock_guard lock(mu_);
    if (slot_released_) return;
    slot_released_ = true;
    --running_;
  }
  cv_.notify_one();
}

int ComputePool::running() const {
  std::lock_guard lock(mu_);
  return running_;
}

int ComputePool::queued() const {
  std::lock_guard lock(mu_);
  return int(tasks_.size());
}

void ComputePool::loop() {
  pool_thread_ = true;
  std::unique_lock lock(mu_);
  while (true) {
    // A task starts only in a free slot: a slot reserved by reserve_here()
    // on another thread counts, though no pool thread runs it.
    cv_.wait(lock, [&] { return stopping_ || (!tasks_.empty() && running_ < int(threads_.size())); });
    if (tasks_.empty()) return;  // stopping, nothing left
    auto task = std::move(tasks_.front());
    tasks_.pop_front();
    ++running_;
    slot_released_ = false;
    lock.unlock();
    task();
    task = nullptr;
    lock.lock();
    if (!slot_released_) --running_;
  }
}

}  // namespace sgemm
