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
};

extern const SplitExecutor kSingleExecutor;  // single_executor.cc
extern const SplitExecutor kRowsExecutor;    // rows_executor.cc
extern const SplitExecutor kKExecutor;       // k_executor.cc

std::span<const SplitExecutor* const> split_executors();
// The executor of `mode`; null when there is none (kAuto).
const SplitExecutor* find_split_executor(SplitMode mode);

// The row pipeline single and rows share: B in over every device's host link
// (a slice each) and completed by NCCL broadcast when there are several
// devices, then A (and C) by row blocks, round-robin over the devices.
Status issue_row_pipeline(JobRun& run);

}  // namespace sgemm
