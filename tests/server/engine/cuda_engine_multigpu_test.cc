// The CUDA engine on two GPUs (label multigpu): row and K splits (both
// reductions) on odd and large shapes, against the fp64 reference and the
// one-GPU result; beta with C; concurrent split and single jobs; streaming.
#include <thread>

#include "tests/common/gpu_test.h"
#include "tests/server/engine/engine_test_util.h"

namespace sgemm::testing {
namespace {

struct Case {
  GemmShape shape;
  bool sample;  // verify sampled rows only (large shapes)
};

void split_matches_single(KReduce reduce, bool has_c) {
  auto two = make_engine({0, 1}, reduce);
  ASSERT_TRUE(two);
  for (const Case& c : {Case{{1025, 777, 3001}, false}, Case{{4097, 4097, 4097}, true}}) {
    Problem p = make_problem(*two, c.shape, 61, has_c, 1.25f, has_c ? -0.5f : 0.0f);
    // One-GPU result (same engine, forced single) to compare the splits with.
    auto single = two->run(job_of(p, SplitMode::kSingle));
    ASSERT_TRUE(single.ok()) << single.status().to_string();
    expect_report(*single, SplitMode::kSingle, 1);
    std::vector<float> one(p.c.floats(), p.c.floats() + c.shape.m * c.shape.n);
    const auto rows = c.sample ? rows_to_verify(c.shape.m, c.shape.n, c.shape.k, 9, 24) : std::vector<int64_t>{};
    std::vector<int64_t> all_rows;
    for (int64_t r = 0; r < c.shape.m; ++r) all_rows.push_back(r);
    for (SplitMode mode : {SplitMode::kRows, SplitMode::kK}) {
      SCOPED_TRACE(std::string(split_mode_name(mode)) + " " + std::to_string(c.shape.m) + " " +
                   std::string(k_reduce_name(reduce)) + (has_c ? " with C" : ""));
      reset_c(p);
      CountingSink sink(c.shape.m);
      GemmJob j = job_of(p, mode);
      j.sink = &sink;
      auto r = two->run(j);
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      expect_report(*r, mode, 2);
      EXPECT_NE(r->devices[0].device, r->devices[1].device);
      sink.expect_each_row_once();
      const VerifyResult v = verify(p, c.sample);
      EXPECT_TRUE(v.passed(kSgemmTolerance)) << v.max_rel_error << " at " << v.worst_row << "," << v.worst_col;
      EXPECT_LE(max_normalised_diff(p, p.c.floats(), one.data(), c.sample ? rows : all_rows), kSgemmTolerance);
    }
  }
}

TEST(CudaEngineMultiGpu, SplitsMatchReferenceAndSingleGpu_ReduceScatter) {
  SGEMM_REQUIRE_GPUS(2);
  split_matches_single(KReduce::kReduceScatter, false);
}

TEST(CudaEngineMultiGpu, SplitsMatchReferenceAndSingleGpu_ReduceToRoot) {
  SGEMM_REQUIRE_GPUS(2);
  split_matches_single(KReduce::kReduceToRoot, false);
}

TEST(CudaEngineMultiGpu, BetaWithCAppliedOnce) {
  SGEMM_REQUIRE_GPUS(2);
  split_matches_single(KReduce::kReduceScatter, true);
}

TEST(CudaEngineMultiGpu, PoolOfOneAndTwo) {
  SGEMM_REQUIRE_GPUS(2);
  for (std::vector<int> devs : {std::vector<int>{1}, std::vector<int>{0, 1}}) {
    auto e = make_engine(devs);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->info().devices.size(), devs.size());
    Problem p = make_problem(*e, {2049, 1023, 2053}, 71);
    auto r = e->run(job_of(p));
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_FALSE(r->plan_reason.empty());
    EXPECT_TRUE(verify(p, true).passed(kSgemmTolerance));
  }
}

TEST(CudaEngineMultiGpu, SmallShapesSplitAcrossMoreDevicesThanRows) {
  SGEMM_REQUIRE_GPUS(2);
  auto e = make_engine({0, 1});
  ASSERT_TRUE(e);
  for (GemmShape s : {GemmShape{1, 5, 3}, GemmShape{3, 1, 1}, GemmShape{7, 9, 13}}) {
    for (SplitMode mode : {SplitMode::kRows, SplitMode::kK}) {
      SCOPED_TRACE(std::string(split_mode_name(mode)) + " " + std::to_string(s.m) + "x" + std::to_string(s.n) + "x" +
                   std::to_string(s.k));
      Problem p = make_problem(*e, s, 81, true, 1.0f, 0.5f);
      CountingSink sink(s.m);
      GemmJob j = job_of(p, mode);
      j.sink = &sink;
      auto r = e->run(j);
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      sink.expect_each_row_once();
      EXPECT_TRUE(verify(p, false).passed(kSgemmTolerance));
    }
  }
}

TEST(CudaEngineMultiGpu, ProgressiveFeedWithSplits) {
  SGEMM_REQUIRE_GPUS(2);
  auto e = make_engine({0, 1});
  ASSERT_TRUE(e);
  for (SplitMode mode : {SplitMode::kRows, SplitMode::kK}) {
    Problem p = make_problem(*e, {1025, 777, 3001}, 91, true, 1.0f, 1.0f);
    ProgressiveFeed feed(p.shape, true, 12, std::chrono::milliseconds(2));
    CountingSink sink(p.shape.m);
    GemmJob j = job_of(p, mode);
    j.feed = &feed;
    j.sink = &sink;
    auto r = e->run(j);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    sink.expect_each_row_once();
    EXPECT_TRUE(verify(p, false).passed(kSgemmTolerance));
  }
}

TEST(CudaEngineMultiGpu, ConcurrentSplitAndSingleJobs) {
  SGEMM_REQUIRE_GPUS(2);
  auto e = make_engine({0, 1});
  ASSERT_TRUE(e);
  constexpr int kThreads = 6;
  std::vector<Problem> ps;
  for (int t = 0; t < kThreads; ++t) ps.push_back(make_problem(*e, {1000 + 33 * t, 700 + 5 * t, 1500 + 17 * t}, 200 + t));
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  const SplitMode modes[] = {SplitMode::kRows, SplitMode::kK, SplitMode::kSingle, SplitMode::kAuto};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 4; ++rep) {
        auto r = e->run(job_of(ps[size_t(t)], modes[(t + rep) % 4]));
        if (!r.ok()) failures++;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  for (auto& p : ps) EXPECT_TRUE(verify(p, true).passed(kSgemmTolerance));
}

}  // namespace
}  // namespace sgemm::testing
