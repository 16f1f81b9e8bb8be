// Split strategies as rows of a table, the way NCCL puts each transport behind
// `struct ncclTransport`: each strategy lives in its own file and says whether
// it can run a request, how it shards it and what it costs. make_plan() walks
// the table; the CUDA engine has the matching table of how each one issues its
// work (server/engine/cuda/split_executor.h).
//
// Adding a strategy: a SplitMode value (common/gemm_types.h), a file here that
// defines its PlanStrategy, a row in plan_strategies() (strategy_table.cc),
// and its executor file in the engine.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "server/planner/plan.h"

namespace sgemm {

struct PlanStrategy {
  SplitMode mode;
  // Whether it can run `req` at all on req.devices (a split needs two or more).
  bool (*applicable)(const PlanRequest& req);
  // Its shards over req.devices (kSingle: one shard on the device it picked).
  std::vector<Shard> (*shards)(const PlanRequest& req, const PlannerOptions& o);
  // Estimated time of `req` run with `shards` (ms).
  double (*estimate_ms)(const PlanRequest& req, const std::vector<Shard>& shards, const PlannerOptions& o);
  // What it does with these shards, for the plan's reason: "rows: 4 GPUs".
  std::string (*describe)(const PlanRequest& req, const std::vector<Shard>& shards);
};

extern const PlanStrategy kSingleStrategy;  // single_strategy.cc
extern const PlanStrategy kRowsStrategy;    // rows_strategy.cc
extern const PlanStrategy kKStrategy;       // k_strategy.cc

// Every strategy in order of preference: on equal estimates the earlier wins.
std::span<const PlanStrategy* const> plan_strategies();
// The row for `mode`; null for kAuto or a mode with no row.
const PlanStrategy* find_plan_strategy(SplitMode mode);

}  // namespace sgemm
