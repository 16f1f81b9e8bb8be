// The coordinator's Engine: requests whose cluster plan beats the local one
// (server/planner/cluster_plan.h, the measured link between hosts) run over
// every GPU of the cluster; the rest, and every request while no member has
// joined, run on the local engine. docs/cluster.md.
//
// Threads: run() is thread-safe; cluster jobs run one at a time (the
// coordinator's job lock), local jobs as the local engine allows.
#pragma once

#include <memory>

#include "server/cluster/coordinator.h"
#include "server/engine/engine.h"
#include "server/planner/plan.h"

namespace sgemm {

struct ClusterEngineOptions {
  // Per-GPU capabilities the cluster plan assumes for every rank (the CUDA
  // engine's defaults, docs/engine.md).
  DeviceCaps caps;
  PlannerOptions planner;
};

std::unique_ptr<Engine> make_cluster_engine(std::unique_ptr<Engine> local, ClusterCoordinator& coordinator,
                                            ClusterEngineOptions options = {});

}  // namespace sgemm
