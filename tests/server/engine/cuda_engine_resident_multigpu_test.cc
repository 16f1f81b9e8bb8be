// A resident B under row and K splits (label multigpu; skips visibly without
// two GPUs): laid out on first use as the plan needs (replicated for rows,
// K-sharded for K), kept for reuse, moved by peer copies when another plan
// needs another layout; results against the fp64 reference every time. Runs
// for each GPU count of test_gpu_counts().
#include "tests/common/gpu_test.h"
#include "tests/server/engine/engine_test_util.h"
#include "tests/server/engine/resident_test_util.h"

namespace sgemm::testing {
namespace {

void run_and_verify(Engine& e, Problem& p, GemmJob j, SplitMode mode, int gpus) {
  reset_c(p);
  CountingSink sink(p.shape.m);
  j.sink = &sink;
  auto r = e.run(j);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->split, mode) << r->plan_reason;
  EXPECT_EQ(r->devices.size(), std::size_t(mode == SplitMode::kSingle ? 1 : gpus));
  sink.expect_each_row_once();
  const VerifyResult v = verify(p, p.shape.m * p.shape.n * p.shape.k > (int64_t{1} << 30));
  EXPECT_TRUE(v.passed(kSgemmTolerance)) << v.max_rel_error << " at " << v.worst_row << "," << v.worst_col;
}

void resident_b_under_splits(int gpus) {
  SCOPED_TRACE(std::to_string(gpus) + " GPUs");
  const auto devices = first_gpus(gpus);
  auto e = make_engine(devices);
  ASSERT_TRUE(e);
  for (const GemmShape s : {GemmShape{1025, 777, 3001}, GemmShape{4096, 4096, 4096}}) {
    SCOPED_TRACE(std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k));
    Problem p = make_problem(*e, s, 83, /*has_c=*/true, 1.0f, 0.75f);
    std::vector<int64_t> before;
    for (int d : devices) before.push_back(e->resident_store()->in_use(d));
    // K first: B goes from whole-on-one-GPU to K-sharded.
    auto rb = put_resident(*e, p.b.floats(), s.k, s.n);
    ASSERT_TRUE(rb);
    ASSERT_EQ(layout_of(rb).size(), 1u);
    GemmJob j = job_of(p, SplitMode::kK);
    j.b_resident = rb.get();
    j.b = nullptr;
    run_and_verify(*e, p, j, SplitMode::kK, gpus);
    const Layout k_layout = layout_of(rb);
    EXPECT_EQ(k_layout.size(), std::size_t(gpus)) << describe_layout(k_layout);
    for (const Piece& piece : k_layout) EXPECT_LT(piece.rows(), s.k) << describe_layout(k_layout);
    run_and_verify(*e, p, j, SplitMode::kK, gpus);  // reused in place
    EXPECT_EQ(layout_of(rb), k_layout);
    // Rows: the shards gather into a replica on every GPU (peer copies).
    j.request.options.split = SplitMode::kRows;
    run_and_verify(*e, p, j, SplitMode::kRows, gpus);
    const Layout replicated = layout_of(rb);
    ASSERT_EQ(replicated.size(), std::size_t(gpus)) << describe_layout(replicated);
    for (const Piece& piece : replicated) EXPECT_EQ(piece.rows(), s.k) << describe_layout(replicated);
    // A replica serves K and single plans too, in place.
    j.request.options.split = SplitMode::kK;
    run_and_verify(*e, p, j, SplitMode::kK, gpus);
    j.request.options.split = SplitMode::kSingle;
    run_and_verify(*e, p, j, SplitMode::kSingle, gpus);
    EXPECT_EQ(layout_of(rb), replicated);
    // Every GPU's budget holds one copy of B, none of the old shards.
    for (std::size_t i = 0; i < devices.size(); ++i)
      EXPECT_EQ(e->resident_store()->in_use(devices[i]) - before[i], s.k * s.n * 4) << "GPU " << devices[i];
    // Rows on a fresh B: whole -> replicated directly.
    auto rb2 = put_resident(*e, p.b.floats(), s.k, s.n);
    GemmJob j2 = job_of(p, SplitMode::kRows);
    j2.b_resident = rb2.get();
    run_and_verify(*e, p, j2, SplitMode::kRows, gpus);
    EXPECT_EQ(layout_of(rb2).size(), std::size_t(gpus));
    // A resident A on one GPU read by a split job on all of them.
    auto ra = put_resident(*e, p.a.floats(), s.m, s.k);
    j2.a_resident = ra.get();
    j2.a = nullptr;
    run_and_verify(*e, p, j2, SplitMode::kRows, gpus);
    j2.request.options.split = SplitMode::kK;
    run_and_verify(*e, p, j2, SplitMode::kK, gpus);
    for (const auto* l : {&rb, &rb2, &ra}) EXPECT_TRUE(e->resident_store()->remove((*l)->handle, "").ok());
  }
}

TEST(CudaEngineResidentMultiGpu, ResidentBUnderRowAndKSplits) {
  SGEMM_REQUIRE_GPUS(2);
  for (int g : test_gpu_counts()) resident_b_under_splits(g);
}

// A small request goes to the GPU its resident B lives on, not elsewhere
// (which would move B).
TEST(CudaEngineResidentMultiGpu, SmallRequestsRunWhereTheirBLives) {
  SGEMM_REQUIRE_GPUS(2);
  auto e = make_engine(first_gpus(2));
  ASSERT_TRUE(e);
  const GemmShape s{1, 4096, 4096};
  Problem p = make_problem(*e, s, 89);
  auto rb = put_resident(*e, p.b.floats(), s.k, s.n);
  const Layout home = layout_of(rb);
  ASSERT_EQ(home.size(), 1u);
  for (int i = 0; i < 4; ++i) {
    GemmJob j = job_of(p);
    j.b_resident = rb.get();
    auto r = e->run(j);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->split, SplitMode::kSingle) << r->plan_reason;
    EXPECT_EQ(r->devices[0].device, home[0].device) << r->plan_reason;
    EXPECT_TRUE(verify(p, false).passed(kSgemmTolerance));
  }
  EXPECT_EQ(layout_of(rb), home);
}

}  // namespace
}  // namespace sgemm::testing
