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

double cluster_fanout_gbps(const ClusterPlanRequest& req) {
  return req.fanout_gbps > 0 ? req.fanout_gbps : req.net_gbps;
}

double estimate_cluster_k_ms(const ClusterPlanRequest& req, const std::vector<Shard>& shards, const PlannerOptions& o) {
  const auto& s = req.shape;
  const int64_t p = int64_t(req.ranks.size());
  if (p == 0 || int64_t(shards.size()) != p || !(req.net_gbps > 0)) return std::numeric_limits<double>::infinity();
  const double e = cost::kBytesPerElement;
  const DeviceCaps& root = req.ranks[0].caps;
  const int64_t block = (s.m + p - 1) / p;  // rows of C each rank ends with (the reduce-scatter's blocks)
  int64_t remote_k = 0, root_local_ranks = 0;
  double local_in = 0, local_out = 0, kernel = 0;
  for (size_t i = 0; i < shards.size(); ++i) {
    const int64_t ks = shards[i].k_end - shards[i].k_begin;
    if (ks < 1) return std::numeric_limits<double>::infinity();  // every rank needs a slice
    const DeviceCaps& d = req.ranks[i].caps;
    if (req.ranks[i].host != 0) {
      remote_k += ks;
    } else {
      ++root_local_ranks;
      if (i > 0) {
        local_in = std::max(local_in, cost::transfer_ms(e * ks * (s.m + s.n), cost::link_gbps(d, o)));
        local_out = std::max(local_out, cost::transfer_ms(e * block * s.n, cost::link_gbps(d, o)));
      }
    }
    kernel = std::max(kernel, 2.0 * s.m * s.n * ks / cost::rate_flops(d, s.m, s.n, ks, o) * 1e3);
  }
  const int64_t k0 = shards[0].k_end - shards[0].k_begin;
  const int64_t remote_rows = std::max<int64_t>(0, s.m - root_local_ranks * block);
  // Rank 0 brings in its slices, C, and the remote ranks' slices; those cross
  // the network once, sent to every remote rank at once (the fan-out rate). The reduce-scatter is a ring: each rank
  // sends and receives (p - 1) / p of the padded m x n partial. The remote blocks of C come back to rank 0, which
  // copies them out with its own block.
  const double root_in =
      cost::transfer_ms(e * ((k0 + remote_k) * (s.m + s.n) + (req.has_c ? s.m * s.n : 0)), cost::link_gbps(root, o));
  const double sends = cost::transfer_ms(e * remote_k * (s.m + s.n), cluster_fanout_gbps(req)) + o.nccl_latency_ms;
  const double reduce =
      cost::transfer_ms(e * double(p * block) * s.n * double(p - 1) / double(p), req.net_gbps) + o.nccl_latency_ms;
  const double back = cost::transfer_ms(e * remote_rows * s.n, req.net_gbps);
  const double root_out = cost::transfer_ms(e * (std::min(block, s.m) + remote_rows) * s.n, cost::link_gbps(root, o));
  return o.split_overhead_ms + std::max(root_in, local_in) + sends + kernel + reduce + back +
         std::max(root_out, local_out);
}

std::vector<Shard> cluster_k_shards(const ClusterPlanRequest& req, const PlannerOptions& o) {
  const auto& s = req.shape;
  if (req.ranks.empty() || s.k < int64_t(req.ranks.size())) return {};
  std::vector<double> w;
  for (const auto& r : req.ranks) w.push_back(cost::rate_flops(r.caps, s.m, s.n, s.k, o));
  const auto b = split_range(s.k, w, o.k_align);
  std::vector<Shard> shards;
  for (size_t i = 0; i < req.ranks.size(); ++i) shards.push_back(Shard{int(i), 0, s.m, b[i], b[i + 1]});
  return shards;
}

ClusterPlan make_cluster_plan(const ClusterPlanRequest& req, const PlannerOptions& o) {
  ClusterPlan plan;
  std::set<int> hosts;
  for (const auto& r : req.ranks) hosts.insert(r.host);
  if (req.ranks.size() < 2 || hosts.size() < 2) {
    plan.reason = "cluster: no member has joined";
    return plan;
  }
  // The row split (unless the request named split K) and the K split (when
  // K has a slice for every rank): the cheaper is the cluster's candidate.
  std::vector<Shard> rows;
  double rows_ms = std::numeric_limits<double>::infinity();
  const bool only_k = req.split == SplitMode::kK, only_rows = req.split == SplitMode::kRows;
  if (!only_k) {
    std::vector<double> w;
    for (const auto& r : req.ranks) w.push_back(cost::rate_flops(r.caps, req.shape.m, req.shape.n, req.shape.k, o));
    const auto b = split_range(req.shape.m, w, o.row_align);
    for (size_t i = 0; i < req.ranks.size(); ++i) rows.push_back(Shard{int(i), b[i], b[i + 1], 0, req.shape.k});
    rows_ms = estimate_cluster_rows_ms(req, rows, o);
  }
  std::vector<Shard> k = only_rows ? std::vector<Shard>{} : cluster_k_shards(req, o);
  const double k_ms = k.empty() ? std::numeric_limits<double>::infinity() : estimate_cluster_k_ms(req, k, o);
  const std::string gpus = std::to_string(req.ranks.size()) + " GPUs on " + std::to_string(hosts.size()) + " hosts";
  if (only_k && k.empty()) {
    plan.reason = "cluster K split: K " + std::to_string(req.shape.k) + " has fewer elements than the " + gpus;
    return plan;
  }
  const bool use_k = only_k || (!k.empty() && k_ms < rows_ms);
  plan.split = use_k ? SplitMode::kK : SplitMode::kRows;
  plan.shards = use_k ? std::move(k) : std::move(rows);
  plan.est_ms = use_k ? k_ms : rows_ms;
  char net[80];
  if (use_k && req.fanout_gbps > 0)
    std::snprintf(net, sizeof net, "net %.2f GB/s, fan-out %.2f GB/s", req.net_gbps, req.fanout_gbps);
  else
    std::snprintf(net, sizeof net, "net %.2f GB/s", req.net_gbps);
  const std::string what = std::string(use_k ? "cluster K split: " : "cluster rows: ") + gpus;
  if (!(req.net_gbps > 0)) {
    plan.use_cluster = req.forced;
    plan.reason = what + (req.forced ? " (requested)" : "") + ", link between hosts not measured";
    return plan;
  }
  plan.use_cluster = req.forced || plan.est_ms < req.local_est_ms;
  const double other_ms = use_k ? rows_ms : k_ms;
  std::string other;
  if (other_ms < std::numeric_limits<double>::infinity())
    other = std::string(use_k ? " vs cluster rows " : " vs cluster K split ") + cost::fmt_ms(other_ms);
  plan.reason = what + (req.forced ? " (requested)" : "") + ", est " + cost::fmt_ms(plan.est_ms) + " (" + net + ")" +
                other + " vs local " + cost::fmt_ms(req.local_est_ms);
  return plan;
}

}  // namespace sgemm
