#include "server/planner/cluster_plan.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <set>

#include "server/planner/cost_model.h"

namespace sgemm {

double estimate_cluster_rows_ms(const ClusterPlanRequest& req, const std::vector<Shard>& shards,
                                const PlannerOptions& o) {
  const auto& s = req.shape;
  if (req.ranks.empty() || shards.size() != req.ranks.size() || !(req.net_gbps > 0))
    return std::numeric_limits<double>::infinity();
  const double e = cost::kBytesPerElement;
  const DeviceCaps& root = req.ranks[0].caps;
  int64_t remote_rows = 0;
  double local_in = 0, local_out = 0, kernel = 0;
  for (size_t i = 0; i < shards.size(); ++i) {
    const int64_t rows = shards[i].row_end - shards[i].row_begin;
    const DeviceCaps& d = req.ranks[i].caps;
    if (req.ranks[i].host != 0) {
      remote_rows += rows;
    } else {
      local_in = std::max(local_in, cost::transfer_ms(e * rows * (s.k + (req.has_c ? s.n : 0)), cost::link_gbps(d, o)));
      local_out = std::max(local_out, cost::transfer_ms(e * rows * s.n, cost::link_gbps(d, o)));
    }
    if (rows > 0) kernel = std::max(kernel, 2.0 * rows * s.n * s.k / cost::rate_flops(d, rows, s.n, s.k, o) * 1e3);
  }
  // Rank 0 brings in B and the remote rows of A (and C); every byte for another
  // host then crosses the network once, and the remote rows of C come back.
  const double root_in =
      cost::transfer_ms(e * (s.k * s.n + remote_rows * (s.k + (req.has_c ? s.n : 0))), cost::link_gbps(root, o));
  const double bcast = cost::transfer_ms(e * s.k * s.n, req.net_gbps) + o.nccl_latency_ms;
  const double sends = cost::transfer_ms(e * remote_rows * (s.k + (req.has_c ? s.n : 0)), req.net_gbps);
  const double back = cost::transfer_ms(e * remote_rows * s.n, req.net_gbps);
  const double root_out = cost::transfer_ms(e * remote_rows * s.n, cost::link_gbps(root, o));
  return o.split_overhead_ms + std::max(root_in, local_in) + bcast + sends + kernel + back +
         std::max(root_out, local_out);
}

ClusterPlan make_cluster_plan(const ClusterPlanRequest& req, const PlannerOptions& o) {
  ClusterPlan plan;
  std::set<int> hosts;
  for (const auto& r : req.ranks) hosts.insert(r.host);
  if (req.ranks.size() < 2 || hosts.size() < 2) {
    plan.reason = "cluster: no member has joined";
    return plan;
  }
  std::vector<double> w;
  for (const auto& r : req.ranks) w.push_back(cost::rate_flops(r.caps, req.shape.m, req.shape.n, req.shape.k, o));
  const auto b = split_range(req.shape.m, w, o.row_align);
  for (size_t i = 0; i < req.ranks.size(); ++i) plan.shards.push_back(Shard{int(i), b[i], b[i + 1], 0, req.shape.k});
  plan.est_ms = estimate_cluster_rows_ms(req, plan.shards, o);
  char net[48];
  std::snprintf(net, sizeof net, "net %.2f GB/s", req.net_gbps);
  const std::string what =
      "cluster rows: " + std::to_string(req.ranks.size()) + " GPUs on " + std::to_string(hosts.size()) + " hosts";
  if (!(req.net_gbps > 0)) {
    plan.use_cluster = req.forced;
    plan.reason = what + (req.forced ? " (requested)" : "") + ", link between hosts not measured";
    return plan;
  }
  plan.use_cluster = req.forced || plan.est_ms < req.local_est_ms;
  plan.reason = what + (req.forced ? " (requested)" : "") + ", est " + cost::fmt_ms(plan.est_ms) + " (" + net +
                ") vs local " + cost::fmt_ms(req.local_est_ms);
  return plan;
}

}  // namespace sgemm
