// The engine's GPUs, set up once at start-up and torn down with the engine.
//
// Per device: its properties, the default stream-ordered memory pool with a
// release threshold high enough that freed memory stays cached in the pool
// (cudaMallocAsync/cudaFreeAsync then cost no cudaMalloc per request), and
// `lanes_per_device` lanes. A lane is what one request uses on one device:
// four non-blocking streams (host->device copies, kernels, NCCL,
// device->host copies), a growing pool of reusable CUDA events, one
// GemmBackend per available kernel kind (a cuBLAS handle inside, not
// thread-safe, hence one per lane), and the backends' workspace (kernels/ keeps
// no scratch of its own: the lane owns it, grown to the largest request seen).
//
// Ownership and threads: DevicePool owns devices and lanes. acquire() is
// thread-safe and waits until a lane of that device is free; the LaneLease
// gives its holder exclusive use of the lane (streams, events, backends)
// until it is destroyed. Everything else on Lane is for the lease holder only.
#pragma once

#include <cuda_runtime_api.h>

#include <condition_variable>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "common/cancel_token.h"
#include "common/gemm_types.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "kernels/gemm_backend.h"

namespace sgemm {

struct DevicePoolOptions {
  std::vector<int> devices;         // CUDA ordinals; empty = every visible GPU
  int lanes_per_device = 2;         // concurrent requests per GPU
  std::vector<KernelKind> kernels;  // backends made per lane; empty = every kind that builds
  // Bytes the device memory pool keeps cached after frees (default: all).
  uint64_t mempool_release_threshold = std::numeric_limits<uint64_t>::max();
};

// Device memory from the current device's stream-ordered pool, freed (stream
// ordered, on the stream it was allocated on) when destroyed. The owner must
// have synchronised every stream that used it before destroying it.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  static StatusOr<DeviceBuffer> allocate(int device, std::size_t bytes, cudaStream_t stream);
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  ~DeviceBuffer() { reset(); }
  float* floats() const { return static_cast<float*>(ptr_); }
  void reset();

 private:
  void* ptr_ = nullptr;
  int device_ = -1;
  cudaStream_t stream_ = nullptr;
};

class Lane {
 public:
  ~Lane();
  Lane(const Lane&) = delete;
  Lane& operator=(const Lane&) = delete;

  int device() const { return device_; }
  cudaStream_t h2d() const { return h2d_; }
  cudaStream_t compute() const { return compute_; }
  cudaStream_t comm() const { return comm_; }
  cudaStream_t d2h() const { return d2h_; }
  std::vector<cudaStream_t> streams() const { return {h2d_, compute_, comm_, d2h_}; }

  // The backend of `kind`; null when that kind is not available.
  GemmBackend* backend(KernelKind kind) const;

  // At least `bytes` of device scratch for GemmBackend::run on compute(),
  // kept for later jobs; grown (stream-ordered on compute()) when too small.
  StatusOr<void*> workspace(std::size_t bytes);
  std::size_t workspace_bytes() const { return workspace_bytes_; }

  // Events for the current job: next_event() hands out the next one (creating
  // more as needed); reset_events() at the start of a job recycles them all.
  StatusOr<cudaEvent_t> next_event();
  void reset_events() { next_event_ = 0; }

 private:
  friend class DevicePool;
  Lane() = default;
  int device_ = -1;
  cudaStream_t h2d_ = nullptr, compute_ = nullptr, comm_ = nullptr, d2h_ = nullptr;
  std::vector<std::unique_ptr<GemmBackend>> backends_;
  std::vector<cudaEvent_t> events_;
  size_t next_event_ = 0;
  DeviceBuffer workspace_;  // before the streams are destroyed: see ~Lane
  std::size_t workspace_bytes_ = 0;
};

class DevicePool;

// Exclusive use of one lane; gives it back on destruction.
class LaneLease {
 public:
  LaneLease() = default;
  LaneLease(DevicePool* pool, int index, int lane) : pool_(pool), index_(index), lane_(lane) {}
  LaneLease(LaneLease&& o) noexcept { *this = std::move(o); }
  LaneLease& operator=(LaneLease&& o) noexcept;
  ~LaneLease() { release(); }
  Lane* operator->() const;
  Lane& operator*() const { return *operator->(); }
  int index() const { return index_; }  // device's position in the pool
  void release();

 private:
  DevicePool* pool_ = nullptr;
  int index_ = -1;
  int lane_ = -1;
};

class DevicePool {
 public:
  // UNAVAILABLE when no GPU is visible or none of the kernel kinds builds.
  static StatusOr<std::unique_ptr<DevicePool>> create(const DevicePoolOptions& options);
  ~DevicePool();

  int size() const { return int(devices_.size()); }
  int ordinal(int index) const { return devices_[size_t(index)]->info.index; }
  const DeviceInfo& info(int index) const { return devices_[size_t(index)]->info; }
  // Bytes in use on device `index` now, by every process (cudaMemGetInfo's
  // total - free); -1 when the driver does not answer. Any thread may ask.
  int64_t memory_used(int index) const;
  std::vector<int> ordinals() const;
  // Kinds with a backend on every lane of every device, in gpu_kernel_kinds() order.
  const std::vector<KernelKind>& kernels() const { return kernels_; }

  // Waits until a lane of device `index` is free; `cancel`'s status if the
  // caller is cancelled first (null: waits as long as it takes).
  StatusOr<LaneLease> acquire(int index, const CancelToken* cancel = nullptr);
  // A backend of `kind` to ask can_implement() (pure, so any thread may);
  // null when the pool has none. Never run() it: that needs a lease.
  const GemmBackend* probe_backend(KernelKind kind) const;
  int busy_lanes(int index) const;

  // Warm start: on every lane of every device, one small product with each
  // backend (loads the module's kernels, initialises each cuBLAS handle and
  // its workspace, touches the memory pool), then synchronises, so the first
  // request runs like the tenth. Call once, before serving; not concurrently
  // with acquire(). Returns the first error.
  Status warm_up();

 private:
  friend class LaneLease;
  struct Device {
    DeviceInfo info;
    std::vector<std::unique_ptr<Lane>> lanes;
    mutable Mutex mu;
    std::condition_variable cv;
    std::vector<bool> in_use SGEMM_GUARDED_BY(mu);
    int busy SGEMM_GUARDED_BY(mu) = 0;
  };
  DevicePool() = default;
  void give_back(int index, int lane);
  std::vector<std::unique_ptr<Device>> devices_;
  std::vector<KernelKind> kernels_;
};

}  // namespace sgemm
