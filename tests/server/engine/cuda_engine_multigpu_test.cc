// The CUDA engine on several GPUs (label multigpu): row and K splits (both
// reductions) on odd and large shapes, against the fp64 reference and the
// one-GPU result; beta with C; concurrent split and single jobs; streaming;
// cancellation of a split job. Every test runs for each GPU count of
// test_gpu_counts() (2, 4, ... up to those visible; SGEMM_TEST_GPUS="2,4").
#include <thread>

#include "tests/common/gpu_test.h"
#include "tests/server/engine/engine_test_util.h"

namespace sgemm::testing {
namespace {

struct Case {
  GemmShape shape;
  bool sample;  // verify sampled rows only (large shapes)
};

void split_matches_single_on(int gpus, KReduce reduce, bool has_c) {
  SCOPED_TRACE(std::to_string(gpus) + " GPUs");
  auto two = make_engine(first_gpus(gpus), reduce);
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
      expect_report(*r, mode, size_t(gpus));
      EXPECT_NE(r->devices[0].device, r->devices[1].device);
      sink.expect_each_row_once();
      const VerifyResult v = verify(p, c.sample);
      EXPECT_TRUE(v.passed(kSgemmTolerance)) << v.max_rel_error << " at " << v.worst_row << "," << v.worst_col;
      EXPECT_LE(max_normalised_diff(p, p.c.floats(), one.data(), c.sample ? rows : all_rows), kSgemmTolerance);
    }
  }
}

void split_matches_single(KReduce reduce, bool has_c) {
  for (int g : test_gpu_counts()) split_matches_single_on(g, reduce, has_c);
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

TEST(CudaEngineMultiGpu, PoolsOfEverySize) {
  SGEMM_REQUIRE_GPUS(2);
  std::vector<std::vector<int>> pools = {{1}};
  for (int g : test_gpu_counts()) pools.push_back(first_gpus(g));
  for (const std::vector<int>& devs : pools) {
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
  for (int g : test_gpu_counts()) {
    SCOPED_TRACE(std::to_string(g) + " GPUs");
    auto e = make_engine(first_gpus(g));
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
}

TEST(CudaEngineMultiGpu, ProgressiveFeedWithSplits) {
  SGEMM_REQUIRE_GPUS(2);
  auto e = make_engine(first_gpus(test_gpu_counts().back()));
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
    // Waiting for the trickling input is reported as such, on some device.
    double input_wait = 0;
    for (const auto& d : r->devices) {
      expect_steps(d);
      input_wait += d.copy_in_wait_ms;
    }
    EXPECT_GT(input_wait, 0.0);
  }
}

TEST(CudaEngineMultiGpu, ConcurrentSplitAndSingleJobs) {
  SGEMM_REQUIRE_GPUS(2);
  auto e = make_engine(first_gpus(test_gpu_counts().back()));
  ASSERT_TRUE(e);
  constexpr int kThreads = 6;
  std::vector<Problem> ps;
  for (int t = 0; t < kThreads; ++t)
    ps.push_back(make_problem(*e, {1000 + 33 * t, 700 + 5 * t, 1500 + 17 * t}, 200 + t));
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

// fp32x3 under both splits matches the fp64 reference at SGEMM's tolerance.
TEST(CudaEngineMultiGpu, Fp32x3UnderSplits) {
  SGEMM_REQUIRE_GPUS(2);
  auto e = make_engine(first_gpus(test_gpu_counts().back()));
  ASSERT_TRUE(e);
  const auto offered = e->info().precisions;
  if (std::find(offered.begin(), offered.end(), Precision::kFp32x3) == offered.end())
    GTEST_SKIP() << "fp32x3 needs sm_90 GPUs";
  for (SplitMode mode : {SplitMode::kRows, SplitMode::kK}) {
    SCOPED_TRACE(split_mode_name(mode));
    Problem p = make_problem(*e, {2049, 1031, 4099}, 97, true, 1.0f, 0.5f);
    GemmJob j = job_of(p, mode);
    j.request.options.precision = Precision::kFp32x3;
    auto r = e->run(j);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->split, mode);
    EXPECT_EQ(r->kernel, KernelKind::kFp32x3);
    EXPECT_TRUE(verify(p, true).passed(kSgemmTolerance));
    // K >= 4096 over several GPUs: a row split runs a kernel per half of B in
    // each block; every product launch is counted once, by its concrete row.
    expect_kernel_rows_cover_launches(*r);
    if (mode == SplitMode::kRows) {
      int64_t launches = 0, product_steps = 0;
      for (const KernelRowUse& k : r->kernel_rows) launches += k.launches;
      for (const DeviceTiming& d : r->devices)
        for (const Step& st : d.steps) product_steps += st.kind == StepKind::kKernel && st.row_end > st.row_begin;
      EXPECT_EQ(launches, product_steps);
    }
  }
}

// A split job cancelled while it runs stops at a block boundary on every
// device, returns the token's status, and leaves the pool usable.
TEST(CudaEngineMultiGpu, CancelledSplitJobStopsAndFreesItsLanes) {
  SGEMM_REQUIRE_GPUS(2);
  const int g = test_gpu_counts().back();
  CudaEngineOptions o;
  o.devices = first_gpus(g);
  o.chunk_rows = 256;  // many blocks per device
  o.chunk_k = 2048;
  auto made = make_cuda_engine(o);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  auto& e = *made;
  Problem p = make_problem(*e, {8192, 8192, 8192}, 95);
  for (SplitMode mode : {SplitMode::kRows, SplitMode::kK}) {
    SCOPED_TRACE(split_mode_name(mode));
    CancelToken token;
    GemmJob j = job_of(p, mode);
    j.cancel = &token;
    std::thread canceller([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(3));
      token.cancel(Cancelled("test: client went away"));
    });
    auto r = e->run(j);
    canceller.join();
    // A fast GPU may finish first; if it did not, the status is the token's.
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kCancelled) << r.status().to_string();
      EXPECT_NE(r.status().message().find("client went away"), std::string::npos);
    }
  }
  Problem q = make_problem(*e, {1025, 777, 3001}, 96);
  auto after = e->run(job_of(q, SplitMode::kRows));
  ASSERT_TRUE(after.ok()) << after.status().to_string();
  EXPECT_TRUE(verify(q, false).passed(kSgemmTolerance));
}

}  // namespace
}  // namespace sgemm::testing
