// Which of the engine's GPUs are still fit to serve, and the test hooks that
// break them on purpose.
//
// A device is marked unhealthy, for the rest of the process, when a CUDA call
// on it returns a sticky error (the context is lost: every later call fails
// too) or when its NCCL communicator reports an asynchronous error. The engine
// then plans over the healthy devices only; with none left it refuses every
// request (UNAVAILABLE) and the service reports NOT_SERVING.
//
// Threads: DeviceHealth is thread-safe. FaultInjection is read once at start-up.
#pragma once

#include <cuda_runtime_api.h>

#include <string>
#include <vector>

#include "common/status.h"
#include "common/thread_annotations.h"

namespace sgemm {

// Errors after which the device's context is unusable (CUDA programming
// guide, "sticky" errors): the process must stop using that device.
bool is_sticky_cuda_error(cudaError_t e);

class DeviceHealth {
 public:
  explicit DeviceHealth(int devices) : healthy_(std::size_t(devices), true), reasons_(std::size_t(devices)) {}
  bool healthy(int index) const SGEMM_EXCLUDES(mu_);
  std::string reason(int index) const SGEMM_EXCLUDES(mu_);
  int healthy_count() const SGEMM_EXCLUDES(mu_);
  // Marks device `index` unhealthy with `reason`; false when it already was.
  bool mark_unhealthy(int index, std::string reason) SGEMM_EXCLUDES(mu_);

 private:
  mutable Mutex mu_;
  std::vector<bool> healthy_ SGEMM_GUARDED_BY(mu_);
  std::vector<std::string> reasons_ SGEMM_GUARDED_BY(mu_);
};

// Test hooks, compiled in and off unless SGEMM_FAULT_INJECT is set, e.g.
//   SGEMM_FAULT_INJECT=trap:1            a kernel that traps on CUDA ordinal 1 (its first job there)
//   SGEMM_FAULT_INJECT=fail:0            device 0 fails its first job as if its context were lost
//   SGEMM_FAULT_INJECT=hang-collective   the first split job's collective is left waiting on its
//                                        second device (released when the communicator is aborted)
// Items combine with commas. Each fault fires once.
struct FaultInjection {
  int trap_device = -1;
  int fail_device = -1;
  bool hang_collective = false;
  bool any() const { return trap_device >= 0 || fail_device >= 0 || hang_collective; }
  std::string describe() const;
  // INVALID_ARGUMENT naming the item it does not understand.
  static StatusOr<FaultInjection> parse(const std::string& text);
  static StatusOr<FaultInjection> from_env();  // empty when SGEMM_FAULT_INJECT is unset
};

}  // namespace sgemm
