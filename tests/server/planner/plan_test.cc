#include "server/planner/plan.h"

#include <gtest/gtest.h>

#include <vector>

namespace sgemm {
namespace {

std::vector<DeviceCaps> gpus(int n) {
  std::vector<DeviceCaps> d;
  for (int i = 0; i < n; ++i) d.push_back(DeviceCaps{.device = i});
  return d;
}

PlanRequest request(int64_t m, int64_t n, int64_t k, int devices, SplitMode forced = SplitMode::kAuto) {
  PlanRequest r;
  r.shape = GemmShape{m, n, k};
  r.forced = forced;
  r.devices = gpus(devices);
  return r;
}

// Every row (kRows) or every K index (kK) is covered exactly once, shards in
// device order, and the other dimension is whole.
void expect_cover(const Plan& p, const GemmShape& s) {
  ASSERT_FALSE(p.shards.empty());
  if (p.mode == SplitMode::kSingle) {
    ASSERT_EQ(p.shards.size(), 1u);
    EXPECT_EQ(p.shards[0], (Shard{p.shards[0].device, 0, s.m, 0, s.k}));
    return;
  }
  std::vector<int> rows(size_t(s.m), 0), ks(size_t(s.k), 0);
  for (const Shard& sh : p.shards) {
    EXPECT_LE(sh.row_begin, sh.row_end);
    EXPECT_LE(sh.k_begin, sh.k_end);
    for (int64_t r = sh.row_begin; r < sh.row_end; ++r) rows[size_t(r)]++;
    for (int64_t k = sh.k_begin; k < sh.k_end; ++k) ks[size_t(k)]++;
  }
  const int shards = int(p.shards.size());
  for (int64_t r = 0; r < s.m; ++r) ASSERT_EQ(rows[size_t(r)], p.mode == SplitMode::kRows ? 1 : shards) << "row " << r;
  for (int64_t k = 0; k < s.k; ++k) ASSERT_EQ(ks[size_t(k)], p.mode == SplitMode::kK ? 1 : shards) << "k " << k;
}

TEST(SplitRange, EvenAlignedAndCovering) {
  auto b = split_range(4096, {1, 1}, 128);
  EXPECT_EQ(b, (std::vector<int64_t>{0, 2048, 4096}));
  b = split_range(1025, {1, 1}, 128);
  EXPECT_EQ(b.front(), 0);
  EXPECT_EQ(b.back(), 1025);
  EXPECT_EQ(b[1] % 128, 0);
  b = split_range(3001, {1, 1, 1}, 16);
  for (size_t i = 1; i + 1 < b.size(); ++i) EXPECT_EQ(b[i] % 16, 0);
  EXPECT_EQ(b.back(), 3001);
}

TEST(SplitRange, RelaxesAlignmentForSmallTotals) {
  auto b = split_range(200, {1, 1, 1, 1}, 128);  // 4 parts of 128 do not fit
  for (size_t i = 0; i + 1 < b.size(); ++i) EXPECT_GT(b[i + 1], b[i]);
  b = split_range(3, {1, 1, 1, 1, 1}, 128);  // fewer elements than parts
  EXPECT_EQ(b, (std::vector<int64_t>{0, 1, 2, 3, 3, 3}));
  b = split_range(0, {1, 1}, 128);
  EXPECT_EQ(b, (std::vector<int64_t>{0, 0, 0}));
}

TEST(SplitRange, ProportionalToWeights) {
  auto b = split_range(4096, {3, 1}, 128);
  EXPECT_EQ(b[1], 3072);
  b = split_range(4096, {0, 0}, 128);  // unusable weights: even
  EXPECT_EQ(b[1], 2048);
}

TEST(Planner, CoversEveryRowAndKOnOneToEightDevices) {
  const std::vector<GemmShape> shapes = {{1, 1, 1},          {7, 5, 3},           {1025, 777, 3001},
                                         {4097, 4097, 4097}, {1024, 1024, 65536}, {16384, 16384, 16384},
                                         {130, 64, 9},       {5000, 3, 17}};
  for (int devices = 1; devices <= 8; ++devices) {
    for (const auto& s : shapes) {
      for (SplitMode f : {SplitMode::kAuto, SplitMode::kSingle, SplitMode::kRows, SplitMode::kK}) {
        SCOPED_TRACE(std::to_string(devices) + " devices, " + std::to_string(s.m) + "x" + std::to_string(s.n) + "x" +
                     std::to_string(s.k) + " " + std::string(split_mode_name(f)));
        const Plan p = make_plan(request(s.m, s.n, s.k, devices, f));
        EXPECT_NE(p.mode, SplitMode::kAuto);
        EXPECT_FALSE(p.reason.empty());
        EXPECT_GT(p.est_ms, 0);
        expect_cover(p, s);
        if (p.mode != SplitMode::kSingle) {
          EXPECT_EQ(int(p.shards.size()), devices);
        }
        if (devices == 1 || f == SplitMode::kSingle) {
          EXPECT_EQ(p.mode, SplitMode::kSingle);
        } else if (f == SplitMode::kRows || f == SplitMode::kK) {
          EXPECT_EQ(p.mode, f);
        }
      }
    }
  }
}

TEST(Planner, RowBoundariesAlignedWhenPossible) {
  const Plan p = make_plan(request(4097, 4097, 4097, 3, SplitMode::kRows));
  for (size_t i = 0; i + 1 < p.shards.size(); ++i) EXPECT_EQ(p.shards[i].row_end % 128, 0);
  const Plan q = make_plan(request(1025, 777, 3001, 2, SplitMode::kK));
  EXPECT_EQ(q.shards[0].k_end % 16, 0);
}

TEST(Planner, SmallRequestGoesWholeToLeastBusyGpu) {
  PlanRequest r = request(256, 256, 256, 4);
  r.devices[0].busy_lanes = 2;
  r.devices[1].busy_lanes = 1;
  r.devices[2].busy_lanes = 0;
  r.devices[3].busy_lanes = 1;
  const Plan p = make_plan(r);
  EXPECT_EQ(p.mode, SplitMode::kSingle);
  EXPECT_EQ(p.shards[0].device, 2);
  EXPECT_NE(p.reason.find("single"), std::string::npos) << p.reason;
}

TEST(Planner, LargeSquareUsesAllGpus) {
  for (int devices : {2, 4, 8}) {
    const Plan p = make_plan(request(16384, 16384, 16384, devices));
    EXPECT_NE(p.mode, SplitMode::kSingle) << p.reason;
    EXPECT_EQ(int(p.shards.size()), devices);
    EXPECT_LT(p.est_ms, p.single_est_ms);
  }
  const Plan p = make_plan(request(8192, 8192, 8192, 2));
  EXPECT_EQ(p.mode, SplitMode::kRows) << p.reason;
  EXPECT_NE(p.reason.find("rows: 2 GPUs"), std::string::npos) << p.reason;
}

TEST(Planner, TallKPrefersKSplit) {
  const Plan p = make_plan(request(1024, 1024, 65536, 2));
  EXPECT_EQ(p.mode, SplitMode::kK) << p.reason;
  EXPECT_EQ(p.shards[0].k_end, 32768);
}

TEST(Planner, ForcedSplitOnOneDeviceDegeneratesWithReason) {
  const Plan p = make_plan(request(4096, 4096, 4096, 1, SplitMode::kK));
  EXPECT_EQ(p.mode, SplitMode::kSingle);
  EXPECT_NE(p.reason.find("k requested but 1 GPU"), std::string::npos) << p.reason;
}

TEST(Planner, FasterDeviceGetsMoreRows) {
  PlanRequest r = request(8192, 8192, 8192, 2, SplitMode::kRows);
  r.devices[0].fp32_tflops = 60;
  r.devices[1].fp32_tflops = 30;
  const Plan p = make_plan(r);
  EXPECT_GT(p.shards[0].row_end - p.shards[0].row_begin, p.shards[1].row_end - p.shards[1].row_begin);
}

TEST(Planner, EstimatesGrowWithWork) {
  const DeviceCaps d;
  const PlannerOptions o;
  EXPECT_LT(estimate_single_ms({1024, 1024, 1024}, false, d, o), estimate_single_ms({4096, 4096, 4096}, false, d, o));
  EXPECT_LT(estimate_single_ms({4096, 4096, 4096}, false, d, o), estimate_single_ms({4096, 4096, 4096}, true, d, o));
}

// With the default (measured) constants, two idle GPUs get the strategy that
// was fastest end to end on 2 x H200 (docs/engine.md, "Measured").
TEST(Planner, DefaultsPickTheMeasuredFastestStrategyOnTwoGpus) {
  const struct {
    GemmShape shape;
    SplitMode expected;
  } cases[] = {
      {{1024, 1024, 1024}, SplitMode::kSingle}, {{4096, 4096, 4096}, SplitMode::kRows},
      {{8192, 8192, 8192}, SplitMode::kRows},   {{16384, 16384, 16384}, SplitMode::kRows},
      {{1024, 1024, 65536}, SplitMode::kK},
  };
  for (const auto& c : cases) {
    Plan p = make_plan(request(c.shape.m, c.shape.n, c.shape.k, 2));
    EXPECT_EQ(p.mode, c.expected) << c.shape.m << "x" << c.shape.n << "x" << c.shape.k << ": " << p.reason;
  }
}

}  // namespace
}  // namespace sgemm

namespace sgemm {
namespace {

TEST(PipelineBlocks, RowBlocksAreAnEighthRoundedTo128AndAtLeast512) {
  EXPECT_EQ(pipeline_row_block(4096, 0, 8), 512);
  EXPECT_EQ(pipeline_row_block(8192, 0, 8), 1024);
  EXPECT_EQ(pipeline_row_block(6144, 0, 8), 768);
  EXPECT_EQ(pipeline_row_block(8191, 0, 8), 1024);  // 1024 rows (8191 / 8 rounded up to 128)
  EXPECT_EQ(pipeline_row_block(1000, 0, 8), 512);
  EXPECT_EQ(pipeline_row_block(8192, 256, 8), 256);  // configured
  EXPECT_EQ(pipeline_row_block(8192, 0, 1), 8192);
}

TEST(PipelineBlocks, ALargeLastRowBlockEndsInAQuarterThatStillFillsTheGpu) {
  using B = std::vector<int64_t>;
  // 4096 rows of a 16384-wide C in 512-row blocks after 2048 early rows: the
  // last block ends in 128 rows (2 Mi elements).
  EXPECT_EQ(pipeline_row_bounds(2048, 4096, 512, 16384), (B{2048, 2560, 3072, 3584, 3968, 4096}));
  // 16384 rows in 2048-row blocks: the last ends in 512 rows.
  const B one = pipeline_row_bounds(0, 16384, 2048, 16384);
  ASSERT_EQ(one.size(), 10U);
  EXPECT_EQ(one[8], 15872);
  EXPECT_EQ(one.back(), 16384);
  // A shorter last block: a quarter rounded up to 128 rows, at most half of it.
  EXPECT_EQ(pipeline_row_bounds(0, 1300, 512, 16384), (B{0, 512, 1024, 1172, 1300}));
  EXPECT_EQ(pipeline_row_bounds(0, 1250, 512, 16384), (B{0, 512, 1024, 1250}));  // 226 rows: 128 is over half
  // Too narrow a C for a quarter block to fill the GPU: unsplit.
  EXPECT_EQ(pipeline_row_bounds(0, 4096, 512, 4096), (B{0, 512, 1024, 1536, 2048, 2560, 3072, 3584, 4096}));
  // Not copied out (n = 0), empty, or one block.
  EXPECT_EQ(pipeline_row_bounds(0, 4096, 512, 0).size(), 9U);
  EXPECT_EQ(pipeline_row_bounds(100, 100, 512, 16384), (B{100}));
  EXPECT_EQ(pipeline_row_bounds(0, 300, 512, 16384), (B{0, 172, 300}));
}

TEST(PipelineBlocks, KBlocksAreAnEighthAndDeeperForSmallC) {
  EXPECT_EQ(pipeline_k_block({4096, 4096, 0}, 65536, 0, 8), 8192);
  EXPECT_EQ(pipeline_k_block({4096, 4096, 0}, 8192, 0, 8), 2048);
  EXPECT_EQ(pipeline_k_block({1024, 1024, 0}, 65536, 0, 8), 16384);  // m * n <= 4 Mi
  EXPECT_EQ(pipeline_k_block({4096, 4096, 0}, 65536, 4096, 8), 4096);
}

TEST(PipelineBlocks, TheKernelShapeIsTheLargestBlockOfThePlan) {
  // One GPU: 4096^3 runs as 512-row blocks; a short product is one block.
  EXPECT_EQ(kernel_block_shape(make_plan(request(4096, 4096, 4096, 1)), {4096, 4096, 4096}, 0, 0, 8),
            (GemmShape{512, 4096, 4096}));
  EXPECT_EQ(kernel_block_shape(make_plan(request(300, 4096, 4096, 1)), {300, 4096, 4096}, 0, 0, 8),
            (GemmShape{300, 4096, 4096}));
  // Rows over 2 GPUs: 8192 rows -> 4096 per GPU -> 512-row blocks.
  const Plan rows = make_plan(request(8192, 8192, 8192, 2, SplitMode::kRows));
  ASSERT_EQ(rows.mode, SplitMode::kRows);
  EXPECT_EQ(kernel_block_shape(rows, {8192, 8192, 8192}, 0, 0, 8), (GemmShape{512, 8192, 8192}));
  // K over 2 GPUs: every row, blocks of the K slice.
  const Plan k = make_plan(request(1024, 1024, 131072, 2, SplitMode::kK));
  ASSERT_EQ(k.mode, SplitMode::kK);
  EXPECT_EQ(kernel_block_shape(k, {1024, 1024, 131072}, 0, 0, 8), (GemmShape{1024, 1024, 16384}));
  EXPECT_EQ(kernel_block_shape(k, {1024, 1024, 131072}, 0, 4096, 8), (GemmShape{1024, 1024, 4096}));
}

// Shards are ranges of op(A) and op(B); stored_block maps them to storage.
TEST(StoredBlocks, ARowSplitOfTransposedATakesColumnsAndAKSplitTakesRows) {
  const Shard rows{0, 128, 256, 0, 300};  // rows [128, 256) of C, all of K = 300
  EXPECT_EQ(shard_a_block(rows, Op::kN), (StoredBlock{128, 256, 0, 300}));
  EXPECT_EQ(shard_a_block(rows, Op::kT), (StoredBlock{0, 300, 128, 256}));  // columns of the stored k x m A
  EXPECT_EQ(shard_b_block(rows, 77, Op::kN), (StoredBlock{0, 300, 0, 77}));
  EXPECT_EQ(shard_b_block(rows, 77, Op::kT), (StoredBlock{0, 77, 0, 300}));  // all of the stored n x k B
  const Shard kslice{1, 0, 500, 16, 48};                                     // every row of C, K [16, 48)
  EXPECT_EQ(shard_a_block(kslice, Op::kN), (StoredBlock{0, 500, 16, 48}));
  EXPECT_EQ(shard_a_block(kslice, Op::kT), (StoredBlock{16, 48, 0, 500}));  // rows of the stored A
  EXPECT_EQ(shard_b_block(kslice, 9, Op::kN), (StoredBlock{16, 48, 0, 9}));
  EXPECT_EQ(shard_b_block(kslice, 9, Op::kT), (StoredBlock{0, 9, 16, 48}));  // columns of the stored B
}

// Whatever the split and the ops, the shards' stored blocks of A tile the
// stored A exactly once (each element read by one shard), and under a K
// split the same holds for B.
TEST(StoredBlocks, ShardsTileTheStoredOperandsForEveryOp) {
  for (SplitMode mode : {SplitMode::kRows, SplitMode::kK})
    for (Op op : {Op::kN, Op::kT}) {
      const GemmShape s{1000, 37, 700};
      const Plan plan = make_plan(request(s.m, s.n, s.k, 3, mode));
      ASSERT_EQ(plan.mode, mode);
      const MatrixDims ad = stored_a_dims(s, op), bd = stored_b_dims(s, op);
      std::vector<int> a_hits(std::size_t(ad.rows * ad.cols), 0), b_hits(std::size_t(bd.rows * bd.cols), 0);
      for (const Shard& sh : plan.shards) {
        const StoredBlock ab = shard_a_block(sh, op), bb = shard_b_block(sh, s.n, op);
        ASSERT_LE(ab.row_end, ad.rows);
        ASSERT_LE(ab.col_end, ad.cols);
        ASSERT_LE(bb.row_end, bd.rows);
        ASSERT_LE(bb.col_end, bd.cols);
        for (int64_t r = ab.row_begin; r < ab.row_end; ++r)
          for (int64_t c = ab.col_begin; c < ab.col_end; ++c) a_hits[std::size_t(r * ad.cols + c)]++;
        for (int64_t r = bb.row_begin; r < bb.row_end; ++r)
          for (int64_t c = bb.col_begin; c < bb.col_end; ++c) b_hits[std::size_t(r * bd.cols + c)]++;
      }
      for (int h : a_hits) ASSERT_EQ(h, 1) << split_mode_name(mode) << " op " << op_name(op);
      // A row split reads all of B on every shard; a K split reads each element once.
      const int b_reads = mode == SplitMode::kRows ? int(plan.shards.size()) : 1;
      for (int h : b_hits) ASSERT_EQ(h, b_reads) << split_mode_name(mode) << " op " << op_name(op);
    }
}

}  // namespace
}  // namespace sgemm
