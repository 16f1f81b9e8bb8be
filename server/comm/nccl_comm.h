// One NCCL communicator over the engine's device pool, made once at start-up
// with ncclCommInitAll (single process, one rank per device) and destroyed
// with the pool.
//
// Ownership and threads: the engine owns it. NCCL requires that collectives
// on a communicator are enqueued in the same order on every rank and that the
// per-rank calls of one collective are issued from one thread inside
// ncclGroupStart/End; callers therefore hold `order_mutex()` from the first
// enqueue of a multi-GPU job until its last collective is enqueued (the CUDA
// engine holds it for the whole split job). It is blocking: ncclGroupEnd
// returns once the group is issued.
#pragma once

#include <nccl.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "common/status.h"
#include "server/comm/communicator.h"
#include "server/comm/nccl_status.h"

namespace sgemm {

class NcclCommunicator final : public Communicator {
 public:
  // `devices`: CUDA ordinals; rank i is devices[i]. Needs at least 2 devices.
  static StatusOr<std::unique_ptr<NcclCommunicator>> create(const std::vector<int>& devices);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int size() const override { return aborted_ ? 0 : int(comms_.size()); }
  int first_rank() const override { return 0; }
  int local_size() const override { return size(); }
  int device(int rank) const { return devices_[size_t(rank)]; }
  ncclComm_t comm(int rank) const override { return comms_[size_t(rank)]; }
  // Serialises jobs that enqueue collectives (see the header comment).
  std::mutex& order_mutex() { return order_mutex_; }

  // Fault handling (docs/lifecycle.md#gpu-faults). Called with order_mutex()
  // held by the job that owns the collectives, except abort(), which the
  // engine's collective watchdog calls from its thread while that job waits.
  //
  // ncclCommAbort on every rank, in rank order (`before_rank(r)`, when given,
  // runs just before rank r is aborted): kernels waiting in a collective
  // return, and the communicator is unusable (size() is 0) until rebuild().
  void abort(const std::function<void(int rank)>& before_rank);
  void abort() override { abort(nullptr); }
  bool aborted() const override { return aborted_; }
  // The asynchronous error NCCL recorded for `rank` (OK when none).
  Status async_error(int rank) const;
  // Any rank's asynchronous error (OK when none).
  Status async_error() const override;
  // Blocking: every group is issued when ncclGroupEnd returns.
  Status wait_issued(const CancelToken* /*abort*/, int64_t /*timeout_ms*/) override { return Status::Ok(); }
  // A new communicator over `devices` (>= 2; the old one is destroyed, or was
  // aborted). On failure size() is 0 and the error says why.
  Status rebuild(const std::vector<int>& devices);
  // Start-up: one broadcast, reduce and reduce-scatter of `bytes` per rank,
  // so NCCL sets up its connections (lazily, on a collective's first use)
  // before the first request needs them (measured on 4 H200s: the first
  // 4096^3 row split's broadcast took 69 ms, later ones 0.3 ms). Call with
  // order_mutex() held, or before the communicator is shared.
  Status warm_up(std::size_t bytes = std::size_t(64) << 20);

 private:
  NcclCommunicator() = default;
  std::vector<int> devices_;
  std::vector<ncclComm_t> comms_;
  std::mutex order_mutex_;
  std::atomic<bool> aborted_{false};
  void destroy();
};

// ncclGroupStart in the constructor; end() runs ncclGroupEnd and reports its
// result (ncclInProgress, which only a non-blocking communicator returns, is
// OK: the caller then waits with Communicator::wait_issued). A group not
// ended explicitly is ended by the destructor.
class NcclGroup {
 public:
  NcclGroup();
  ~NcclGroup();
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;
  Status start_status() const { return start_; }
  Status end();

 private:
  Status start_;
  bool open_ = false;
};

}  // namespace sgemm
