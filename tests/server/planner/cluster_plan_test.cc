// The cluster row split's plan: every row once, one shard per rank, the link
// between hosts decides whether a product leaves the coordinator.
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

TEST(ClusterPlan, EstimateGrowsWithSlowerNetwork) {
  const GemmShape s{16384, 16384, 16384};
  const ClusterPlan fast = make_cluster_plan(four_hosts(s, 100.0, 1e9));
  const ClusterPlan slow = make_cluster_plan(four_hosts(s, 5.0, 1e9));
  EXPECT_LT(fast.est_ms, slow.est_ms);
}

}  // namespace
}  // namespace sgemm
