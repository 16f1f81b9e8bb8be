// The cluster plans: the row split's every row once and the K split's every
// element of K once, one shard per rank; the link between hosts decides
// whether a product leaves the coordinator, and which split it takes.
#include "server/planner/cluster_plan.h"

#include <gtest/gtest.h>

namespace sgemm {
namespace {

ClusterPlanRequest four_hosts(GemmShape s, double net_gbps, double local_ms) {
  ClusterPlanRequest r;
  r.shape = s;
  r.net_gbps = net_gbps;
  r.local_est_ms = local_ms;
  for (int h = 0; h < 4; ++h) r.ranks.push_back(ClusterRank{DeviceCaps{0}, h});
  return r;
}

TEST(ClusterPlan, EveryRowOnceInRankOrder) {
  for (GemmShape s : {GemmShape{1025, 777, 3001}, GemmShape{32768, 32768, 32768}, GemmShape{3, 5, 7}}) {
    const ClusterPlan p = make_cluster_plan(four_hosts(s, 3.0, 1e9));
    ASSERT_EQ(p.shards.size(), 4u);
    int64_t next = 0;
    for (size_t i = 0; i < p.shards.size(); ++i) {
      EXPECT_EQ(p.shards[i].device, int(i));
      EXPECT_EQ(p.shards[i].row_begin, next);
      EXPECT_EQ(p.shards[i].k_begin, 0);
      EXPECT_EQ(p.shards[i].k_end, s.k);
      next = p.shards[i].row_end;
    }
    EXPECT_EQ(next, s.m);
  }
}

TEST(ClusterPlan, LargeProductGoesToTheClusterSmallStaysLocal) {
  // 32768^3 on one GPU at 47 TFLOP/s is ~1.5 s; over 4 hosts at 10 GB/s the
  // kernel phase is ~0.4 s plus ~1.1 s of network: local wins at 10 GB/s, and
  // the cluster wins on a fast link.
  const GemmShape big{32768, 32768, 32768};
  EXPECT_FALSE(make_cluster_plan(four_hosts(big, 10.0, 1500)).use_cluster);
  EXPECT_TRUE(make_cluster_plan(four_hosts(big, 400.0, 1500)).use_cluster);
  EXPECT_FALSE(make_cluster_plan(four_hosts(GemmShape{256, 256, 256}, 400.0, 0.05)).use_cluster);
  // Forced runs on the cluster whatever the estimate; the reason says so.
  auto forced = four_hosts(GemmShape{256, 256, 256}, 400.0, 0.05);
  forced.forced = true;
  const ClusterPlan p = make_cluster_plan(forced);
  EXPECT_TRUE(p.use_cluster);
  EXPECT_NE(p.reason.find("requested"), std::string::npos) << p.reason;
  EXPECT_NE(p.reason.find("4 hosts"), std::string::npos) << p.reason;
}

TEST(ClusterPlan, NoMemberOrNoMeasuredLinkStaysLocal) {
  ClusterPlanRequest one = four_hosts(GemmShape{8192, 8192, 8192}, 100.0, 1e9);
  for (auto& r : one.ranks) r.host = 0;  // four GPUs, all on the coordinator
  EXPECT_FALSE(make_cluster_plan(one).use_cluster);
  EXPECT_FALSE(make_cluster_plan(four_hosts(GemmShape{8192, 8192, 8192}, 0.0, 1e9)).use_cluster);
}

TEST(ClusterPlan, KSplitSlicesCoverKOnceInRankOrderWithEveryRow) {
  for (GemmShape s :
       {GemmShape{1025, 777, 3001}, GemmShape{4096, 4096, 262144}, GemmShape{3, 5, 7}, GemmShape{17, 9, 4}}) {
    const std::vector<Shard> k = cluster_k_shards(four_hosts(s, 3.0, 1e9), PlannerOptions{});
    ASSERT_EQ(k.size(), 4u) << s.k;
    int64_t next = 0;
    for (size_t i = 0; i < k.size(); ++i) {
      EXPECT_EQ(k[i].device, int(i));
      EXPECT_EQ(k[i].row_begin, 0);
      EXPECT_EQ(k[i].row_end, s.m);
      EXPECT_EQ(k[i].k_begin, next);
      EXPECT_GT(k[i].k_end, k[i].k_begin);  // every rank a non-empty slice
      next = k[i].k_end;
    }
    EXPECT_EQ(next, s.k);
  }
  // Fewer elements of K than ranks: no K split.
  EXPECT_TRUE(cluster_k_shards(four_hosts(GemmShape{64, 64, 3}, 3.0, 1e9), PlannerOptions{}).empty());
}

TEST(ClusterPlan, SmallOutputWithLongKTakesTheKSplitLargeSquareTakesRows) {
  // 256 x 1024 x 1M over a fast link: the row split broadcasts all 4 GiB of B
  // and leaves each rank 64 rows (a thin, slow kernel); the K split sends each
  // remote rank a quarter of A and B, runs all 256 rows, reduces 1 MiB of C.
  const ClusterPlan k = make_cluster_plan(four_hosts(GemmShape{256, 1024, 1 << 20}, 300.0, 1e9));
  EXPECT_TRUE(k.use_cluster);
  EXPECT_EQ(k.split, SplitMode::kK);
  EXPECT_EQ(k.shards.back().k_end, int64_t(1) << 20);
  EXPECT_NE(k.reason.find("cluster K split: 4 GPUs on 4 hosts"), std::string::npos) << k.reason;
  EXPECT_NE(k.reason.find("vs cluster rows"), std::string::npos) << k.reason;
  // A square product: the K split's m x n partials cross the network; rows win.
  const ClusterPlan rows = make_cluster_plan(four_hosts(GemmShape{32768, 32768, 32768}, 300.0, 1e9));
  EXPECT_EQ(rows.split, SplitMode::kRows);
  EXPECT_NE(rows.reason.find("vs cluster K split"), std::string::npos) << rows.reason;
  // The K split costs what it moves: more network time for a slower link.
  const GemmShape s{1024, 1024, 1 << 20};
  const auto slow = four_hosts(s, 5.0, 1e9), fast = four_hosts(s, 300.0, 1e9);
  const auto shards = cluster_k_shards(fast, PlannerOptions{});
  EXPECT_LT(estimate_cluster_k_ms(fast, shards, PlannerOptions{}),
            estimate_cluster_k_ms(slow, shards, PlannerOptions{}));
  // Over sockets (~6 GB/s) the slices of A and B cost more than one GPU's whole product.
  const double one_gpu = 2.0 * 1024 * 1024 * double(1 << 20) / 47e12 * 1e3 + 8.0 * 1024 * (1 << 20) / 54e9 * 1e3;
  EXPECT_FALSE(make_cluster_plan(four_hosts(s, 6.0, one_gpu)).use_cluster);
}

TEST(ClusterPlan, SplitKRequestsGetTheKSplitOrStayLocal) {
  auto r = four_hosts(GemmShape{32768, 32768, 32768}, 300.0, 1e9);
  r.split = SplitMode::kK;  // rows would be cheaper, but the request named K
  ClusterPlan p = make_cluster_plan(r);
  EXPECT_TRUE(p.use_cluster);
  EXPECT_EQ(p.split, SplitMode::kK);
  EXPECT_EQ(p.reason.find("vs cluster rows"), std::string::npos) << p.reason;
  // Forced, with a slice for every rank.
  auto f = four_hosts(GemmShape{33, 17, 9}, 300.0, 0.01);
  f.split = SplitMode::kK;
  f.forced = true;
  p = make_cluster_plan(f);
  EXPECT_TRUE(p.use_cluster);
  EXPECT_EQ(p.split, SplitMode::kK);
  ASSERT_EQ(p.shards.size(), 4u);
  EXPECT_EQ(p.shards.back().k_end, 9);
  // K shorter than the rank count: not over the cluster, even forced.
  f.shape.k = 3;
  p = make_cluster_plan(f);
  EXPECT_FALSE(p.use_cluster);
  EXPECT_NE(p.reason.find("fewer elements"), std::string::npos) << p.reason;
  // A request that names rows gets the row split even where K would be cheaper.
  auto rows = four_hosts(GemmShape{256, 1024, 1 << 20}, 300.0, 1e9);
  rows.split = SplitMode::kRows;
  p = make_cluster_plan(rows);
  EXPECT_EQ(p.split, SplitMode::kRows);
  EXPECT_EQ(p.reason.find("K split"), std::string::npos) << p.reason;
}

TEST(ClusterPlan, KSplitScattersItsSlicesAtTheMeasuredFanOutRate) {
  // nvidia-h200-x4, 4 processes over sockets (bench/results/2026-11-22_h200x4_cluster-sockets):
  // the link measured at join 2.79 GB/s (broadcast); rank 0's sends of the
  // slices to the three other ranks ran 1.34x that, ~3.74 GB/s aggregate; the
  // service's compute for 4096x4096x131072 took 1045-1118 ms. Costed at the
  // broadcast's rate the estimate was 1294 ms; at the fan-out rate it falls
  // within the measured range's reach.
  const GemmShape s{4096, 4096, 131072};
  auto bcast_only = four_hosts(s, 2.79, 138.5);
  bcast_only.split = SplitMode::kK;
  auto fitted = bcast_only;
  fitted.fanout_gbps = 2.79 * 1.34;
  const auto shards = cluster_k_shards(fitted, PlannerOptions{});
  const double old_ms = estimate_cluster_k_ms(bcast_only, shards, PlannerOptions{});
  const double new_ms = estimate_cluster_k_ms(fitted, shards, PlannerOptions{});
  EXPECT_NEAR(old_ms, 1294.3, 1.0);  // the estimate the run printed
  EXPECT_GT(new_ms, 1045.0 * 0.9) << new_ms;
  EXPECT_LT(new_ms, 1118.0 * 1.05) << new_ms;
  // Only the scatter of the slices moves to the fan-out rate: 3/4 of A and B,
  // 3 x (4096 + 4096) x 32768 x 4 bytes.
  const double slices = 3.0 * (4096 + 4096) * 32768 * 4;
  EXPECT_NEAR(old_ms - new_ms, slices / 2.79e6 - slices / (2.79 * 1.34 * 1e6), 0.01);
  EXPECT_DOUBLE_EQ(cluster_fanout_gbps(fitted), 2.79 * 1.34);
  EXPECT_DOUBLE_EQ(cluster_fanout_gbps(bcast_only), 2.79);  // not measured: the broadcast's rate
  // The plan's reason names both rates; the row split's does not change.
  const ClusterPlan p = make_cluster_plan(fitted);
  EXPECT_EQ(p.split, SplitMode::kK);
  EXPECT_NE(p.reason.find("net 2.79 GB/s, fan-out 3.74 GB/s"), std::string::npos) << p.reason;
  auto rows = fitted;
  rows.split = SplitMode::kRows;
  auto rows_bcast = bcast_only;
  rows_bcast.split = SplitMode::kRows;
  EXPECT_DOUBLE_EQ(make_cluster_plan(rows).est_ms, make_cluster_plan(rows_bcast).est_ms);
  EXPECT_EQ(make_cluster_plan(rows).reason.find("fan-out"), std::string::npos);
  // A faster fan-out makes the K split cheaper, never dearer.
  auto faster = fitted;
  faster.fanout_gbps = 10.0;
  EXPECT_LT(estimate_cluster_k_ms(faster, shards, PlannerOptions{}), new_ms);
}

TEST(ClusterPlan, EstimateGrowsWithSlowerNetwork) {
  const GemmShape s{16384, 16384, 16384};
  const ClusterPlan fast = make_cluster_plan(four_hosts(s, 100.0, 1e9));
  const ClusterPlan slow = make_cluster_plan(four_hosts(s, 5.0, 1e9));
  EXPECT_LT(fast.est_ms, slow.est_ms);
}

}  // namespace
}  // namespace sgemm
