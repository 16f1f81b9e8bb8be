// Placement of resident matrices (server/planner/placement.h): the layout a
// plan needs for B, whether a layout satisfies it, and the copies that turn
// one layout into another.
#include "server/planner/placement.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace sgemm {
namespace {

Plan rows_plan(int64_t m, int64_t k, std::vector<int> devices) {
  Plan p;
  p.mode = devices.size() > 1 ? SplitMode::kRows : SplitMode::kSingle;
  const int64_t step = m / int64_t(devices.size());
  for (std::size_t i = 0; i < devices.size(); ++i)
    p.shards.push_back(Shard{devices[i], int64_t(i) * step, i + 1 == devices.size() ? m : int64_t(i + 1) * step, 0, k});
  return p;
}

Plan k_plan(int64_t m, std::vector<int64_t> bounds, std::vector<int> devices) {
  Plan p;
  p.mode = SplitMode::kK;
  for (std::size_t i = 0; i < devices.size(); ++i)
    p.shards.push_back(Shard{devices[i], 0, m, bounds[i], bounds[i + 1]});
  return p;
}

// Every row of every target piece is written exactly once by the copies or
// comes with a reused piece.
void expect_complete(const Move& mv, const Layout& have) {
  ASSERT_TRUE(mv.ok) << mv.why;
  for (std::size_t i = 0; i < mv.target.size(); ++i) {
    const Piece& t = mv.target[i];
    if (mv.reuse[i] >= 0) {
      EXPECT_EQ(have[std::size_t(mv.reuse[i])], t);
      continue;
    }
    std::vector<int> seen(std::size_t(t.rows()), 0);
    for (const PieceCopy& c : mv.copies) {
      if (c.dst != int(i)) continue;
      const Piece& s = have[std::size_t(c.src)];
      EXPECT_LE(s.row_begin, c.row_begin);
      EXPECT_GE(s.row_end, c.row_end);
      EXPECT_EQ(c.across_devices, s.device != t.device);
      for (int64_t r = c.row_begin; r < c.row_end; ++r) ++seen[std::size_t(r - t.row_begin)];
    }
    EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; })) << "target piece " << i;
  }
}

TEST(PlacementTest, RowSplitNeedsBWholeOnEveryDevice) {
  const Layout need = layout_needed_for_b(rows_plan(1000, 4096, {0, 1, 2}), 4096);
  ASSERT_EQ(need.size(), 3u);
  for (int d = 0; d < 3; ++d) EXPECT_EQ(need[std::size_t(d)], (Piece{d, 0, 4096}));
}

TEST(PlacementTest, KSplitNeedsEachDevicesSliceAndNothingForEmptyOnes) {
  const Layout need = layout_needed_for_b(k_plan(64, {0, 2048, 4096, 4096}, {0, 1, 2}), 4096);
  ASSERT_EQ(need.size(), 2u);
  EXPECT_EQ(need[0], (Piece{0, 0, 2048}));
  EXPECT_EQ(need[1], (Piece{1, 2048, 4096}));
}

TEST(PlacementTest, ReplicatedSatisfiesSingleRowsAndK) {
  const Layout replicated = {{0, 0, 4096}, {1, 0, 4096}};
  EXPECT_TRUE(satisfies(replicated, layout_needed_for_b(rows_plan(8, 4096, {1}), 4096)));
  EXPECT_TRUE(satisfies(replicated, layout_needed_for_b(rows_plan(8, 4096, {0, 1}), 4096)));
  EXPECT_TRUE(satisfies(replicated, layout_needed_for_b(k_plan(8, {0, 2048, 4096}, {0, 1}), 4096)));
}

TEST(PlacementTest, WholeOnOneGpuDoesNotSatisfyAnotherOrARowSplit) {
  const Layout whole = whole_on(0, 4096);
  EXPECT_TRUE(satisfies(whole, layout_needed_for_b(rows_plan(8, 4096, {0}), 4096)));
  EXPECT_FALSE(satisfies(whole, layout_needed_for_b(rows_plan(8, 4096, {1}), 4096)));
  EXPECT_FALSE(satisfies(whole, layout_needed_for_b(rows_plan(8, 4096, {0, 1}), 4096)));
  EXPECT_EQ(device_with_whole(whole, 4096), 0);
  EXPECT_EQ(device_with_whole(whole, 4096, 0), 0);
  EXPECT_EQ(device_with_whole(Layout{{0, 0, 2048}, {1, 2048, 4096}}, 4096), -1);
}

TEST(PlacementTest, WholeToReplicatedReusesThePieceAndCopiesOverPeers) {
  const Layout have = whole_on(0, 4096);
  const Layout need = layout_needed_for_b(rows_plan(100, 4096, {0, 1, 2, 3}), 4096);
  const Move mv = plan_move(have, need, 4 * 4096);
  expect_complete(mv, have);
  EXPECT_EQ(mv.reuse[0], 0);
  EXPECT_TRUE(mv.freed.empty());
  EXPECT_EQ(mv.copies.size(), 3u);
  EXPECT_EQ(mv.copied_bytes(), 3 * 4096 * 4 * 4096);
  EXPECT_EQ(mv.allocated_bytes_on(0), 0);
  EXPECT_EQ(mv.allocated_bytes_on(2), 4096 * 4 * 4096);
}

TEST(PlacementTest, WholeToKShardedCopiesSlicesAndFreesTheWhole) {
  const Layout have = whole_on(1, 1000);
  const Layout need = layout_needed_for_b(k_plan(64, {0, 496, 1000}, {0, 1}), 1000);
  const Move mv = plan_move(have, need, 40);
  expect_complete(mv, have);
  ASSERT_EQ(mv.copies.size(), 2u);
  EXPECT_TRUE(mv.copies[0].across_devices);   // GPU 1 -> GPU 0
  EXPECT_FALSE(mv.copies[1].across_devices);  // GPU 1's slice from its own whole copy
  EXPECT_EQ(mv.freed, std::vector<int>{0});
}

TEST(PlacementTest, KShardedToReplicatedGathersFromEveryDevice) {
  const Layout have = {{0, 0, 500}, {1, 500, 1000}};
  const Layout need = layout_needed_for_b(rows_plan(64, 1000, {0, 1}), 1000);
  const Move mv = plan_move(have, need, 4);
  expect_complete(mv, have);
  EXPECT_EQ(mv.copies.size(), 4u);  // each device: its own slice and the peer's
  EXPECT_EQ(mv.freed.size(), 2u);
}

TEST(PlacementTest, RowsHeldByNoPieceAreRefused) {
  const Move mv = plan_move(Layout{{0, 0, 10}}, whole_on(1, 20), 4);
  EXPECT_FALSE(mv.ok);
  EXPECT_NE(mv.why.find("rows from 10"), std::string::npos) << mv.why;
}

TEST(PlacementTest, SourcesAreSpreadOverTheDevicesHoldingTheRows) {
  const Layout have = {{0, 0, 100}, {1, 0, 100}};
  const Layout need = {{2, 0, 100}, {3, 0, 100}};
  const Move mv = plan_move(have, need, 4);
  expect_complete(mv, have);
  ASSERT_EQ(mv.copies.size(), 2u);
  EXPECT_NE(have[std::size_t(mv.copies[0].src)].device, have[std::size_t(mv.copies[1].src)].device);
}

TEST(PlacementTest, ResidentFractionAndDescription) {
  const Layout have = {{0, 0, 512}, {1, 512, 1024}};
  EXPECT_DOUBLE_EQ(resident_fraction_on(have, 0, 1024), 0.5);
  EXPECT_DOUBLE_EQ(resident_fraction_on(have, 2, 1024), 0.0);
  EXPECT_EQ(describe_layout(have), "GPU 0 rows 0-512, GPU 1 rows 512-1024");
  EXPECT_EQ(describe_layout(whole_on(-1, 3)), "host rows 0-3");
}

TEST(PlacementTest, TheCostModelSendsARequestToTheGpuHoldingB) {
  PlanRequest req;
  req.shape = {1, 4096, 4096};
  req.devices = {DeviceCaps{0}, DeviceCaps{1}};
  req.devices[0].busy_lanes = 1;  // without residency GPU 0, busy, is not the single choice
  const Plan before = make_plan(req);
  EXPECT_FALSE(before.mode == SplitMode::kSingle && before.shards[0].device == 0) << before.reason;
  req.devices[0].b_resident_fraction = resident_fraction_on(whole_on(0, 4096), 0, 4096);
  const Plan p = make_plan(req);
  EXPECT_EQ(p.mode, SplitMode::kSingle);
  EXPECT_EQ(p.shards[0].device, 0) << p.reason;
}

}  // namespace
}  // namespace sgemm
