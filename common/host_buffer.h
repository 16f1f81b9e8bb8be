// Host memory for one request's matrices. The engine that will run the request
// hands these out (HostAllocator), so the CUDA engine can give page-locked
// memory from a reused pool (no pageable copies on the hot path) and the CPU
// engine plain aligned memory. A HostBuffer returns its memory to the
// allocator when destroyed, whatever the request's fate.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

#include "common/status.h"

namespace sgemm {

class HostBuffer {
 public:
  using Release = std::function<void(void*, std::size_t)>;
  HostBuffer() = default;
  HostBuffer(void* data, std::size_t bytes, Release release)
      : data_(data), bytes_(bytes), release_(std::move(release)) {}
  HostBuffer(HostBuffer&& o) noexcept { *this = std::move(o); }
  HostBuffer& operator=(HostBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      data_ = o.data_;
      bytes_ = o.bytes_;
      release_ = std::move(o.release_);
      o.data_ = nullptr;
      o.bytes_ = 0;
      o.release_ = nullptr;
    }
    return *this;
  }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  ~HostBuffer() { reset(); }

  float* floats() const { return static_cast<float*>(data_); }
  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  explicit operator bool() const { return data_ != nullptr; }

  void reset() {
    if (data_ && release_) release_(data_, bytes_);
    data_ = nullptr;
    bytes_ = 0;
    release_ = nullptr;
  }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  Release release_;
};

class HostAllocator {
 public:
  virtual ~HostAllocator() = default;
  // RESOURCE_EXHAUSTED when the memory cannot be had. Thread-safe.
  virtual StatusOr<HostBuffer> allocate(std::size_t bytes) = 0;
};

// 64-byte aligned pageable memory; the CPU engine's allocator and a fallback.
class AlignedHostAllocator final : public HostAllocator {
 public:
  StatusOr<HostBuffer> allocate(std::size_t bytes) override;
};

}  // namespace sgemm
