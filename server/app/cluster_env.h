// A pod's cluster role from its LeaderWorkerSet (deploy/k8s/lws): the LWS
// controller sets LWS_WORKER_INDEX (0 = the group's leader), LWS_GROUP_SIZE
// (pods in the group) and LWS_LEADER_ADDRESS (the leader pod's DNS name) in
// every container. The leader becomes the coordinator, listening for members
// on kLwsClusterPort; every other pod joins LWS_LEADER_ADDRESS:kLwsClusterPort.
// Flags win: with --cluster-listen or --join given, the variables are ignored.
#pragma once

#include <functional>
#include <string>

#include "common/status.h"
#include "server/app/server.h"

namespace sgemm {

// The port a LeaderWorkerSet's leader listens on for its members (the
// manifest's containerPort "cluster").
constexpr int kLwsClusterPort = 50052;

// Reads a variable of the environment; null when it is not set.
using EnvLookup = std::function<const char*(const char* name)>;

// Fills options->cluster_listen or options->join from the LWS_* variables
// when the pod is in a LeaderWorkerSet (LWS_WORKER_INDEX set) and neither flag
// was given. Returns a line for the log saying what it did ("" when not in a
// LeaderWorkerSet); INVALID_ARGUMENT naming the variable when one is missing
// or malformed (an index not below the group size, a worker without a
// leader address).
StatusOr<std::string> apply_cluster_env(const EnvLookup& env, ServerOptions* options);

}  // namespace sgemm
