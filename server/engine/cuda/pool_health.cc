// The CUDA engine's devices in and out of service (pool_health.h).
#include "server/engine/cuda/pool_health.h"

#include <cuda_runtime_api.h>

#include <utility>

#include "kernels/cuda_status.h"
#include "kernels/fault_kernels.h"

namespace sgemm {

PoolHealth::PoolHealth(DevicePool* pool, NcclCommunicator* comm, FaultInjection faults, PoolHealthOptions options)
    : pool_(pool), comm_(comm), faults_(faults), options_(std::move(options)), health_(pool->size()) {
  if (comm_) {
    comm_ordinals_ = pool_->ordinals();
    watchdog_ = std::thread([this] { watch_collectives(); });
  }
}

PoolHealth::~PoolHealth() {
  stop();
  if (spin_flag_) (void)cudaFreeHost(spin_flag_);
}

void PoolHealth::stop() {
  {
    std::lock_guard lock(watch_mu_);
    watch_stop_ = true;
  }
  watch_cv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
  release_spin();
}

std::vector<int> PoolHealth::healthy_devices() const {
  std::vector<int> healthy;
  for (int i = 0; i < pool_->size(); ++i)
    if (health_.healthy(i)) healthy.push_back(i);
  return healthy;
}

std::string PoolHealth::device_name(int idx) const {
  return "GPU " + std::to_string(pool_->ordinal(idx)) + " (" + pool_->info(idx).name + ")";
}

std::string PoolHealth::no_device_left() const {
  std::string msg = "no healthy GPU left on this server:";
  // Appended piece by piece: GCC 12's -Wrestrict misreads the temporaries of a chained + here.
  for (int i = 0; i < pool_->size(); ++i) {
    msg += ' ';
    msg += device_name(i);
    msg += ": ";
    msg += health_.reason(i);
    msg += ';';
  }
  msg += " restart it (or send requests to another replica)";
  return msg;
}

// Reads the copy of the communicator's devices (comm_state_mu_), so no order mutex is needed.
bool PoolHealth::comm_covers(const std::vector<int>& idx) const {
  std::lock_guard lock(comm_state_mu_);
  if (comm_ordinals_.size() != idx.size()) return false;
  for (std::size_t r = 0; r < idx.size(); ++r)
    if (comm_ordinals_[r] != pool_->ordinal(idx[r])) return false;
  return true;
}

StatusOr<std::unique_lock<std::mutex>> PoolHealth::lock_order(const CancelToken* cancel) {
  std::unique_lock<std::mutex> lock(comm_->order_mutex(), std::defer_lock);
  while (!lock.try_lock()) {
    if (cancel) SGEMM_RETURN_IF_ERROR(cancel->status());
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return lock;
}

// With the order mutex held.
void PoolHealth::rebuild_comm() {
  if (!comm_) return;
  std::vector<int> ordinals;
  for (int i = 0; i < pool_->size(); ++i)
    if (health_.healthy(i)) ordinals.push_back(pool_->ordinal(i));
  rebuilt_for_ = int(ordinals.size());
  Status s = InvalidArgument("fewer than 2 healthy GPUs");
  if (ordinals.size() < 2) {
    comm_->abort();  // nothing to rebuild over: single-GPU jobs only from now on
  } else {
    s = comm_->rebuild(ordinals);
  }
  {
    std::lock_guard lock(comm_state_mu_);
    comm_ordinals_ = s.ok() ? ordinals : std::vector<int>();
  }
  log(s.ok() ? "NCCL communicator rebuilt over " + std::to_string(ordinals.size()) + " healthy GPU(s)"
             : "NCCL communicator retired (split jobs off): " + s.message());
}

void PoolHealth::ensure_comm(const std::vector<int>& healthy, const CancelToken* cancel) {
  if (!comm_ || healthy.size() < 2 || comm_covers(healthy)) return;
  auto order = lock_order(cancel);
  if (!order.ok() || rebuilt_for_ == health_.healthy_count() || comm_covers(healthy)) return;
  rebuild_comm();
}

Status PoolHealth::guarded(bool spans_pool, std::vector<LaneLease>& leases, const std::vector<int>& used,
                           std::unique_lock<std::mutex>* order, const CancelToken* cancel,
                           const std::function<Status()>& execute) {
  SGEMM_RETURN_IF_ERROR(inject_faults(spans_pool, leases, used));
  if (spans_pool) arm_watchdog();
  Status ran = execute();
  const bool timed_out = spans_pool && disarm_watchdog();
  if (!timed_out && ran.ok()) return ran;
  const Status fault = on_job_failure(ran, timed_out, spans_pool, leases, used, order, cancel);
  return fault.ok() ? ran : fault;
}

// SGEMM_FAULT_INJECT: each hook fires once, on the first job that uses its device.
Status PoolHealth::inject_faults(bool spans_pool, std::vector<LaneLease>& leases, const std::vector<int>& used) {
  if (!faults_.any()) return Status::Ok();
  for (std::size_t i = 0; i < used.size(); ++i) {
    const int ordinal = pool_->ordinal(used[i]);
    if (ordinal == faults_.fail_device && !fail_fired_.exchange(true)) {
      const std::string why = "injected failure (SGEMM_FAULT_INJECT=fail:" + std::to_string(ordinal) + ")";
      mark_unhealthy(used[i], why);
      if (spans_pool) rebuild_comm();  // the order mutex is held
      return Unavailable(device_name(used[i]) + " failed and is out of service: " + why + "; retry");
    }
    if (ordinal == faults_.trap_device && !trap_fired_.exchange(true)) {
      SGEMM_CUDA_TRY(cudaSetDevice(ordinal));
      SGEMM_CUDA_TRY(launch_trap_kernel(leases[i]->compute()));
      log("fault injection: a trapping kernel launched on " + device_name(used[i]));
    }
  }
  if (spans_pool && faults_.hang_collective && leases.size() > 1 && !hang_fired_.exchange(true)) {
    if (!spin_flag_) {
      SGEMM_CUDA_TRY(cudaHostAlloc(&spin_flag_, sizeof(int), cudaHostAllocMapped | cudaHostAllocPortable));
    }
    *static_cast<volatile int*>(spin_flag_) = 0;
    SGEMM_CUDA_TRY(cudaSetDevice(leases[1]->device()));
    SGEMM_CUDA_TRY(launch_spin_kernel(static_cast<const volatile int*>(spin_flag_), leases[1]->comm()));
    log("fault injection: the collective's second rank held back on " + device_name(used[1]));
  }
  return Status::Ok();
}

void PoolHealth::release_spin() {
  if (spin_flag_) *static_cast<volatile int*>(spin_flag_) = 1;
}

void PoolHealth::mark_unhealthy(int idx, const std::string& why) {
  if (health_.mark_unhealthy(idx, why))
    log(device_name(idx) + " marked unhealthy: " + why + " (" + std::to_string(health_.healthy_count()) +
        " healthy GPU(s) left)");
}

// Returns the job's status when a fault was found (UNAVAILABLE naming the
// device), else OK (the error stands).
Status PoolHealth::on_job_failure(const Status& ran, bool timed_out, bool spans_pool, std::vector<LaneLease>& leases,
                                  const std::vector<int>& used, std::unique_lock<std::mutex>* order,
                                  const CancelToken* cancel) {
  std::string failed;
  for (std::size_t i = 0; i < used.size(); ++i) {
    (void)cudaSetDevice(pool_->ordinal(used[i]));
    const cudaError_t e = cudaStreamQuery(leases[i]->compute());
    if (is_sticky_cuda_error(e)) {
      // CUDA: after a sticky error "the process must be terminated and
      // relaunched" (measured on 4 H200s: a trap on GPU 0 made every later
      // call on GPUs 1-3 fail with it too). So every GPU of the process goes
      // out of service at once, health turns NOT_SERVING, and the
      // orchestrator's liveness probe restarts the server.
      const std::string why = std::string("sticky CUDA error ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) +
                              ") on " + device_name(used[i]) + "; CUDA needs the process restarted";
      for (int d = 0; d < pool_->size(); ++d) mark_unhealthy(d, why);
      failed += (failed.empty() ? "" : ", ") + device_name(used[i]);
      continue;
    }
    (void)cudaGetLastError();
    if (spans_pool && !timed_out && comm_) {
      const Status a = comm_->async_error(int(i));
      if (!a.ok()) {
        mark_unhealthy(used[i], "NCCL error on its rank: " + a.message());
        failed += (failed.empty() ? "" : ", ") + device_name(used[i]);
      }
    }
  }
  if (failed.empty() && !timed_out) return Status::Ok();
  if (comm_) {
    if (!order->owns_lock()) {
      auto lock = lock_order(cancel);
      if (lock.ok()) *order = std::move(lock).value();
    }
    if (order->owns_lock()) rebuild_comm();
  }
  const std::string left = std::to_string(health_.healthy_count()) + " healthy GPU(s) left";
  if (timed_out)
    return Unavailable("a collective did not finish within --collective-timeout (" +
                       std::to_string(options_.collective_timeout.count() / 1000.0) +
                       " s): the NCCL communicator was aborted and rebuilt over the healthy GPUs" +
                       (failed.empty() ? "" : "; failed: " + failed) + "; " + left + "; retry");
  return Unavailable(failed + " failed and is out of service (" + ran.message() + "); " + left + "; retry");
}

void PoolHealth::log(const std::string& msg) const {
  if (options_.log) options_.log("cuda engine: " + msg);
}

// One watchdog thread; at most one split job is armed at a time (they hold the order mutex).
void PoolHealth::arm_watchdog() {
  std::lock_guard lock(watch_mu_);
  watch_deadline_ = std::chrono::steady_clock::now() + options_.collective_timeout;
  watch_armed_ = true;
  watch_fired_ = false;
  watch_cv_.notify_all();
}

bool PoolHealth::disarm_watchdog() {
  std::lock_guard lock(watch_mu_);
  watch_armed_ = false;
  return watch_fired_;
}

void PoolHealth::watch_collectives() {
  std::unique_lock lock(watch_mu_);
  while (!watch_stop_) {
    if (!watch_armed_) {
      watch_cv_.wait(lock);
      continue;
    }
    const auto deadline = watch_deadline_;
    watch_cv_.wait_until(lock, deadline);
    if (watch_stop_ || !watch_armed_ || std::chrono::steady_clock::now() < watch_deadline_) continue;
    watch_armed_ = false;
    watch_fired_ = true;
    // Aborted with watch_mu_ held: the job's disarm_watchdog() (and so its
    // rebuild of the communicator) waits until the abort is over.
    log("a split job's collectives did not finish within the collective timeout: aborting the NCCL communicator");
    // A collective held back by fault injection is released just before its rank is aborted.
    comm_->abort([this](int rank) {
      if (rank == 1) release_spin();
    });
  }
}

}  // namespace sgemm
