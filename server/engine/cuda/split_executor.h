// How each split strategy issues its work on the GPUs: the engine's half of
// the strategy table (the planner's half, what a strategy can run, costs and
// shards, is server/planner/strategy.h). Each executor is one file; adding a
// strategy adds a file here and a row in split_executors().
#pragma once

#include <span>

#include "common/gemm_types.h"
#include "common/status.h"

namespace sgemm {

class JobRun;

struct SplitExecutor {
  SplitMode mode;
  // The job spans every device of the pool: it takes the NCCL order and one
  // lane on each device (false: one lane on the shard's device).
  bool spans_pool;
  // Issues the job's work on JobRun::works() (one per shard, in rank order).
  Status (*issue)(JobRun& run);
  // The job's ranks reach other processes (cluster mode, docs/cluster.md):
  // works() holds this process's ranks, JobRun::rank_shards() every rank's,
  // and every process issues the same collectives in the same order.
  bool spans_processes = false;
};

extern const SplitExecutor kSingleExecutor;       // single_executor.cc
extern const SplitExecutor kRowsExecutor;         // rows_executor.cc
extern const SplitExecutor kKExecutor;            // k_executor.cc
extern const SplitExecutor kClusterRowsExecutor;  // cluster_rows_executor.cc
extern const SplitExecutor kClusterKExecutor;     // cluster_k_executor.cc

std::span<const SplitExecutor* const> split_executors();
// The executor of `mode` among those whose ranks are all in this process (or,
// with spans_processes, reach other processes); null when there is none.
const SplitExecutor* find_split_executor(SplitMode mode, bool spans_processes = false);

// The row pipeline single and rows share: B in over every device's host link
// (a slice each) and completed by NCCL broadcast when there are several
// devices, then A (and C) by row blocks, round-robin over the devices.
Status issue_row_pipeline(JobRun& run);

}  // namespace sgemm
