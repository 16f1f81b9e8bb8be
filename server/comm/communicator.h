// The NCCL communicator a job's collectives run on, whoever made it: the
// local engine's (NcclCommunicator: every rank a GPU of this process) or a
// cluster's (NcclClusterComm: this process's GPUs are some of the ranks, the
// others belong to other processes, docs/cluster.md). Executors issue their
// collectives through this interface; which one it is decides only how long a
// wait may take and how a job that gives up ends (abort()).
//
// Threads: a job uses it from the thread that issues the job; abort() may be
// called from another thread only where the implementation says so.
#pragma once

#include <nccl.h>

#include <cstdint>

#include "common/cancel_token.h"
#include "common/status.h"

namespace sgemm {

class Communicator {
 public:
  virtual ~Communicator() = default;

  // Ranks over every process (the local communicator: 0 once aborted).
  virtual int size() const = 0;
  // This process's ranks are [first_rank(), first_rank() + local_size()).
  virtual int first_rank() const = 0;
  virtual int local_size() const = 0;
  bool is_local(int rank) const { return rank >= first_rank() && rank < first_rank() + local_size(); }
  // The communicator handle of `rank`, which must be one of this process's.
  virtual ncclComm_t comm(int rank) const = 0;

  // After ncclGroupEnd returned ncclSuccess or ncclInProgress: waits until
  // every local rank has issued the group, polling `abort` (its status is
  // returned) and giving up after `timeout_ms` (UNAVAILABLE). A blocking
  // communicator has issued it when ncclGroupEnd returns: OK at once.
  virtual Status wait_issued(const CancelToken* abort, int64_t timeout_ms) = 0;
  // An error NCCL recorded asynchronously on any local rank (a peer gone, a
  // network error); OK when none.
  virtual Status async_error() const = 0;
  // ncclCommAbort on every local rank: collectives under way end, and the
  // communicator is unusable until it is made again.
  virtual void abort() = 0;
  virtual bool aborted() const = 0;
};

}  // namespace sgemm
