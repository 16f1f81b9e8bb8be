// Wraps the engine's HostAllocator and counts the bytes that requests hold, so
// GetInfo can show that a failed or cancelled request gave everything back.
#pragma once

#include <atomic>
#include <memory>

#include "common/host_buffer.h"

namespace sgemm {

class TrackingAllocator final : public HostAllocator {
 public:
  explicit TrackingAllocator(HostAllocator& inner) : inner_(inner), in_use_(std::make_shared<std::atomic<int64_t>>(0)) {}

  StatusOr<HostBuffer> allocate(std::size_t bytes) override {
    auto inner = inner_.allocate(bytes);
    if (!inner.ok()) return inner.status();
    HostBuffer buf = std::move(inner).value();
    in_use_->fetch_add(int64_t(bytes));
    // The wrapped buffer keeps the inner release; ours adds the accounting.
    auto holder = std::make_shared<HostBuffer>(std::move(buf));
    void* data = holder->data();
    auto counter = in_use_;
    return HostBuffer(data, bytes, [holder, counter](void*, std::size_t n) mutable {
      counter->fetch_sub(int64_t(n));
      holder->reset();
    });
  }

  int64_t bytes_in_use() const { return in_use_->load(); }

 private:
  HostAllocator& inner_;
  std::shared_ptr<std::atomic<int64_t>> in_use_;
};

}  // namespace sgemm
