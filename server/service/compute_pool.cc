#include "server/service/compute_pool.h"

namespace sgemm {

thread_local bool ComputePool::slot_released_ = false;

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
    if (stopping_ || int(tasks_.size()) >= idle + max_queued_) return false;
    tasks_.push_back(std::move(task));
  }
  cv_.notify_one();
  return true;
}

void ComputePool::release_slot() {
  std::lock_guard lock(mu_);
  if (slot_released_) return;
  slot_released_ = true;
  --running_;
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
  std::unique_lock lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
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
