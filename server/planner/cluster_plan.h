// Planning one product over the GPUs of several hosts (docs/cluster.md).
// Pure C++, like the rest of the planner.
//
// The cluster row split: rank 0 (the coordinator's first GPU) takes B and the
// other hosts' rows of A from host memory, broadcasts B over NCCL, sends each
// remote rank its rows of A, every rank computes its rows of C, the remote
// ranks send theirs back and the coordinator copies C out. The coordinator's
// other GPUs copy their own rows of A and C over their own host links. The
// link between hosts is measured when the cluster forms (a timed broadcast).
// The estimate adds the phases (the engine does not overlap them yet).
//
// The cluster K split: every rank a slice of K. Rank 0 takes C and the other
// hosts' columns of A and rows of B from host memory and sends each remote
// rank its slices; every rank computes a partial C over all m x n; the
// partials are summed by a reduce-scatter over the network (equal blocks of
// rows, one per rank) and the remote blocks come back to rank 0. It moves
// (m + n) * K instead of the row split's K * n broadcast, at the price of
// m x n partials crossing the network: it pays for small m x n with long K.
// Rank 0 sends the slices to every remote rank at once, so they cost the
// measured fan-out rate (ClusterPlanRequest::fanout_gbps), not the broadcast's.
#pragma once

#include <string>
#include <vector>

#include "server/planner/plan.h"

namespace sgemm {

struct ClusterRank {
  DeviceCaps caps;
  int host = 0;  // 0: the coordinator; members 1, 2, ... in join order
};

struct ClusterPlanRequest {
  GemmShape shape;
  bool has_c = false;
  std::vector<ClusterRank> ranks;  // in NCCL rank order; rank 0 is on host 0
  double net_gbps = 0;             // between hosts: measured broadcast algBw (<= 0: unknown, the cluster is not used)
  // Rank 0's concurrent sends to every rank on another host, all bytes sent
  // over the time (measured at join next to the broadcast; <= 0: unknown, the
  // broadcast's net_gbps is used). Over sockets the sends to three hosts ran
  // ~1.3x the broadcast's rate: the K split scatters its slices this way.
  double fanout_gbps = 0;
  double local_est_ms = 0;  // the coordinator's own best plan for the request
  bool forced = false;      // run on the cluster whatever the estimate (tests, benchmarks)
  // The request's split: kRows or kK restricts the cluster to that split
  // (kK: the cluster K split or nothing); kAuto: the cheaper of the two.
  SplitMode split = SplitMode::kAuto;
};

struct ClusterPlan {
  bool use_cluster = false;
  SplitMode split = SplitMode::kRows;  // kRows or kK: the cluster strategy chosen
  // One per rank (Shard::device is the rank). kRows: rows, all of K each;
  // kK: every row, a non-empty slice of K each, in rank order.
  std::vector<Shard> shards;
  double est_ms = 0;
  std::string reason;  // "cluster rows: 4 GPUs on 4 hosts, est 900 ms (net 3.1 GB/s) vs local 2800 ms"
};

double estimate_cluster_rows_ms(const ClusterPlanRequest& req, const std::vector<Shard>& shards,
                                const PlannerOptions& o);
double estimate_cluster_k_ms(const ClusterPlanRequest& req, const std::vector<Shard>& shards, const PlannerOptions& o);
// The rate rank 0's sends to the remote ranks are costed at: fanout_gbps when
// measured, else net_gbps.
double cluster_fanout_gbps(const ClusterPlanRequest& req);
// The K split's slices (rank order, proportional to the ranks' rates, aligned
// to PlannerOptions::k_align); empty when K has fewer elements than ranks.
std::vector<Shard> cluster_k_shards(const ClusterPlanRequest& req, const PlannerOptions& o);
ClusterPlan make_cluster_plan(const ClusterPlanRequest& req, const PlannerOptions& o = {});

}  // namespace sgemm
