// One process's ranks of a communicator that spans several processes (cluster
// mode, docs/cluster.md): ncclCommInitRankConfig for each local GPU inside one
// group, non-blocking, so that building it, and any collective on it, can be
// given up on: a rank on another host that died leaves the others waiting,
// and abort() (ncclCommAbort) releases them.
//
// Ownership and threads: the cluster data plane owns it and uses it from one
// thread at a time; abort() is called by that same thread when it gives up
// waiting (its abort token was cancelled from another thread, or a deadline
// passed). Destroying it aborts it (no collective may be running then).
#pragma once

#include <nccl.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/cancel_token.h"
#include "common/status.h"
#include "server/comm/communicator.h"

namespace sgemm {

class NcclClusterComm final : public Communicator {
 public:
  // A fresh ncclUniqueId's bytes (rank 0's process makes it; everyone joins with it).
  static StatusOr<std::string> new_unique_id();
  // Pays NCCL's one-time costs on `devices` (its state, its kernels loaded
  // into each GPU's context: 350 MiB of host memory on an H100, the context
  // busy meanwhile) with a single-process communicator over them, made and
  // destroyed. One device is enough. Paid later, beside requests, they stalled
  // one (122 ms) and looked like memory a joining member had left behind.
  static Status warm_up(const std::vector<int>& devices);
  // Joins `devices` (CUDA ordinals) as ranks first_rank, first_rank + 1, ... of
  // `nranks`. Waits until every rank has joined, polling `abort` (its status
  // is returned) and the deadline (UNAVAILABLE); a failed join is aborted.
  static StatusOr<std::unique_ptr<NcclClusterComm>> create(const std::string& unique_id, int nranks, int first_rank,
                                                           const std::vector<int>& devices, const CancelToken* abort,
                                                           int64_t timeout_ms);
  ~NcclClusterComm() override;
  NcclClusterComm(const NcclClusterComm&) = delete;
  NcclClusterComm& operator=(const NcclClusterComm&) = delete;

  int size() const override { return nranks_; }
  int first_rank() const override { return first_rank_; }
  int local_size() const override { return int(comms_.size()); }
  int device(int local) const { return devices_[size_t(local)]; }
  ncclComm_t comm(int rank) const override { return comms_[size_t(rank - first_rank_)]; }

  // After ncclGroupEnd (or a single call) returned ncclSuccess or
  // ncclInProgress: waits until every local communicator has issued it.
  Status wait_issued(const CancelToken* abort, int64_t timeout_ms) override;
  // An error NCCL found asynchronously on any local communicator (a peer gone,
  // a network error): UNAVAILABLE naming it; OK otherwise.
  Status async_error() const override;
  // ncclCommAbort on every local communicator: collectives under way end.
  void abort() override;
  bool aborted() const override { return aborted_; }

 private:
  NcclClusterComm() = default;
  std::vector<int> devices_;
  std::vector<ncclComm_t> comms_;
  int nranks_ = 0;
  int first_rank_ = 0;
  bool aborted_ = false;
};

}  // namespace sgemm
