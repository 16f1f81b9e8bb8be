// Which GPUs of the CUDA engine serve, and what a failed job means for them:
// the devices' health, the NCCL communicator kept over exactly the healthy
// ones, the watchdog that aborts a split job's collectives past
// --collective-timeout, and the fault-injection hooks (SGEMM_FAULT_INJECT,
// device_health.h). Private to the CUDA engine (cuda_engine.cc), which asks it
// which devices to plan over and hands it each job's execution to guard.
//
// Threads: every method may be called from any of the engine's callers. The
// communicator's order mutex (NcclCommunicator::order_mutex) orders split jobs
// and rebuilds; guarded() and ensure_comm() take or expect it as they say.
// stop() ends the watchdog thread; the engine calls it before it tears down the
// communicator.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/cancel_token.h"
#include "common/status.h"
#include "server/comm/nccl_comm.h"
#include "server/devices/device_health.h"
#include "server/devices/device_pool.h"

namespace sgemm {

struct PoolHealthOptions {
  std::chrono::milliseconds collective_timeout{60000};
  std::function<void(std::string_view)> log;  // may be empty
};

class PoolHealth {
 public:
  // `comm` (null with one device) must outlive stop(); `pool` outlives this.
  PoolHealth(DevicePool* pool, NcclCommunicator* comm, FaultInjection faults, PoolHealthOptions options);
  ~PoolHealth();  // stop(), then frees the injected hang's flag
  PoolHealth(const PoolHealth&) = delete;
  PoolHealth& operator=(const PoolHealth&) = delete;

  // Ends the watchdog and releases a collective held back by fault injection.
  void stop();

  const DeviceHealth& devices() const { return health_; }
  // Pool indices of the devices still in service, in pool order.
  std::vector<int> healthy_devices() const;
  // UNAVAILABLE's message when none is: each device and why it left.
  std::string no_device_left() const;

  // Whether the communicator's ranks are exactly these pool indices, in order.
  bool comm_covers(const std::vector<int>& idx) const;
  // Rebuilds the communicator over `healthy` where it does not cover them (a
  // rebuild skipped when the failing job was cancelled first), once per change
  // in the healthy count. Takes the order mutex.
  void ensure_comm(const std::vector<int>& healthy, const CancelToken* cancel);
  // The communicator's order, waited for while the job is still wanted.
  StatusOr<std::unique_lock<std::mutex>> lock_order(const CancelToken* cancel);

  // Runs `execute` (a job on `leases`, whose pool indices are `used`): the
  // injected faults first, the watchdog around it where the job `spans_pool`
  // (its collectives; the caller holds `order`). After a failure or a timeout
  // it finds the devices at fault, marks them out of service, rebuilds the
  // communicator (taking `order` where the caller does not hold it) and
  // returns UNAVAILABLE naming them; a failure with no device at fault returns
  // execute's own status.
  Status guarded(bool spans_pool, std::vector<LaneLease>& leases, const std::vector<int>& used,
                 std::unique_lock<std::mutex>* order, const CancelToken* cancel,
                 const std::function<Status()>& execute);

 private:
  std::string device_name(int idx) const;
  void rebuild_comm();
  Status inject_faults(bool spans_pool, std::vector<LaneLease>& leases, const std::vector<int>& used);
  void release_spin();
  void mark_unhealthy(int idx, const std::string& why);
  Status on_job_failure(const Status& ran, bool timed_out, bool spans_pool, std::vector<LaneLease>& leases,
                        const std::vector<int>& used, std::unique_lock<std::mutex>* order, const CancelToken* cancel);
  void arm_watchdog();
  bool disarm_watchdog();  // whether it fired
  void watch_collectives();
  void log(const std::string& msg) const;

  DevicePool* const pool_;
  NcclCommunicator* const comm_;  // null with one device
  const FaultInjection faults_;
  const PoolHealthOptions options_;
  DeviceHealth health_;

  std::atomic<bool> trap_fired_{false}, fail_fired_{false}, hang_fired_{false};
  void* spin_flag_ = nullptr;  // host-mapped int releasing the injected hang; allocated on first use
  int rebuilt_for_ = -1;       // guarded by the order mutex: healthy count of the last rebuild attempt
  mutable std::mutex comm_state_mu_;
  std::vector<int> comm_ordinals_;  // guarded by comm_state_mu_: the devices the communicator spans now

  std::mutex watch_mu_;
  std::condition_variable watch_cv_;
  bool watch_stop_ = false;                               // guarded by watch_mu_
  bool watch_armed_ = false;                              // guarded by watch_mu_
  bool watch_fired_ = false;                              // guarded by watch_mu_
  std::chrono::steady_clock::time_point watch_deadline_;  // guarded by watch_mu_
  std::thread watchdog_;
};

}  // namespace sgemm
