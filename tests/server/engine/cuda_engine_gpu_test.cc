// The CUDA engine on one GPU (label gpu): correctness of every strategy the
// one-GPU pool can run, beta with C, concurrency, streaming in and out.
#include <thread>

#include "tests/common/gpu_test.h"
#include "tests/server/engine/engine_test_util.h"

namespace sgemm::testing {
namespace {

TEST(CudaEngineGpu, InfoListsDevicesAndKernels) {
  SGEMM_REQUIRE_GPUS(1);
  auto e = make_engine({0});
  ASSERT_TRUE(e);
  const EngineInfo info = e->info();
  EXPECT_EQ(info.backend, "cuda");
  ASSERT_EQ(info.devices.size(), 1u);
  EXPECT_GT(info.devices[0].sm_count, 0);
  EXPECT_GT(info.devices[0].memory_bytes, 0);
  ASSERT_FALSE(info.kernels.empty());
  EXPECT_EQ(info.kernels.front(), info.default_kernel);
}

TEST(CudaEngineGpu, ValidateNamesBadKernelAndShape) {
  SGEMM_REQUIRE_GPUS(1);
  auto e = make_engine({0});
  ASSERT_TRUE(e);
  ExecOptions o;
  o.kernel = "tensorcore9000";
  Status s = e->validate({64, 64, 64}, o);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("tensorcore9000"), std::string::npos) << s.message();
  EXPECT_EQ(e->validate({-1, 4, 4}, {}).code(), StatusCode::kInvalidArgument);
  ExecOptions k;
  k.split = SplitMode::kK;  // allowed on one GPU: degenerates to single
  EXPECT_TRUE(e->validate({64, 64, 64}, k).ok());
}

TEST(CudaEngineGpu, OddShapeEveryStrategyMatchesReference) {
  SGEMM_REQUIRE_GPUS(1);
  auto e = make_engine({0});
  ASSERT_TRUE(e);
  Problem p = make_problem(*e, {1025, 777, 3001}, 11);
  for (SplitMode mode : {SplitMode::kAuto, SplitMode::kSingle, SplitMode::kRows, SplitMode::kK}) {
    for (const std::string& kernel : e->info().kernels) {
      SCOPED_TRACE(std::string(split_mode_name(mode)) + " " + kernel);
      reset_c(p);
      auto r = e->run(job_of(p, mode, kernel));
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      expect_report(*r, SplitMode::kSingle, 1);
      const VerifyResult v = verify(p, false);
      EXPECT_TRUE(v.passed(kSgemmTolerance)) << v.max_rel_error << " at " << v.worst_row << "," << v.worst_col;
    }
  }
}

TEST(CudaEngineGpu, BetaWithC) {
  SGEMM_REQUIRE_GPUS(1);
  auto e = make_engine({0});
  ASSERT_TRUE(e);
  Problem p = make_problem(*e, {515, 259, 1031}, 21, /*has_c=*/true, /*alpha=*/-1.5f, /*beta=*/0.75f);
  auto r = e->run(job_of(p));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const VerifyResult v = verify(p, false);
  EXPECT_TRUE(v.passed(kSgemmTolerance)) << v.max_rel_error;
}

TEST(CudaEngineGpu, LargeShapeSampledRows) {
  SGEMM_REQUIRE_GPUS(1);
  auto e = make_engine({0});
  ASSERT_TRUE(e);
  Problem p = make_problem(*e, {4097, 4097, 4097}, 31);
  auto r = e->run(job_of(p, SplitMode::kSingle));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const VerifyResult v = verify(p, true);
  EXPECT_TRUE(v.passed(kSgemmTolerance)) << v.max_rel_error;
}

TEST(CudaEngineGpu, ProgressiveFeedAndEveryRowReportedOnce) {
  SGEMM_REQUIRE_GPUS(1);
  CudaEngineOptions o;
  o.devices = {0};
  o.chunk_rows = 128;  // many blocks: many rows_ready calls
  auto made = make_cuda_engine(o);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  auto& e = *made;
  Problem p = make_problem(*e, {1025, 777, 3001}, 41, true, 1.0f, 2.0f);
  ProgressiveFeed feed(p.shape, true, 16, std::chrono::milliseconds(3));
  CountingSink sink(p.shape.m);
  GemmJob j = job_of(p);
  j.feed = &feed;
  j.sink = &sink;
  auto r = e->run(j);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  sink.expect_each_row_once();
  EXPECT_GT(sink.calls(), 1);
  EXPECT_GT(feed.waits(), 2);
  EXPECT_TRUE(verify(p, false).passed(kSgemmTolerance));
}

TEST(CudaEngineGpu, ConcurrentRuns) {
  SGEMM_REQUIRE_GPUS(1);
  auto e = make_engine({0}, KReduce::kReduceScatter, /*lanes=*/2);
  ASSERT_TRUE(e);
  constexpr int kThreads = 6;
  std::vector<Problem> ps;
  for (int t = 0; t < kThreads; ++t) ps.push_back(make_problem(*e, {300 + 64 * t, 200 + 7 * t, 513 + 3 * t}, 100 + t));
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 3; ++rep) {
        auto r = e->run(job_of(ps[size_t(t)]));
        if (!r.ok()) failures++;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  for (auto& p : ps) EXPECT_TRUE(verify(p, false).passed(kSgemmTolerance));
}

TEST(CudaEngineGpu, DegenerateShapes) {
  SGEMM_REQUIRE_GPUS(1);
  auto e = make_engine({0});
  ASSERT_TRUE(e);
  Problem p = make_problem(*e, {33, 17, 0}, 51, true, 1.0f, 3.0f);
  CountingSink sink(33);
  GemmJob j = job_of(p);
  j.sink = &sink;
  ASSERT_TRUE(e->run(j).ok());
  sink.expect_each_row_once();
  for (int64_t i = 0; i < 33 * 17; ++i) ASSERT_EQ(p.c.floats()[i], 3.0f * p.c0.floats()[i]);
  Problem q = make_problem(*e, {1, 1, 1}, 52);
  ASSERT_TRUE(e->run(job_of(q)).ok());
  EXPECT_TRUE(verify(q, false).passed(kSgemmTolerance));
}

TEST(CudaEngineGpu, PinnedHostMemoryIsReused) {
  SGEMM_REQUIRE_GPUS(1);
  auto e = make_engine({0});
  ASSERT_TRUE(e);
  void* first = nullptr;
  {
    auto b = e->host_allocator().allocate(3 << 20);
    ASSERT_TRUE(b.ok());
    first = b->data();
    cudaPointerAttributes attr{};
    ASSERT_EQ(cudaPointerGetAttributes(&attr, first), cudaSuccess);
    EXPECT_EQ(attr.type, cudaMemoryTypeHost);  // page-locked
  }
  auto again = e->host_allocator().allocate(3 << 20);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->data(), first);
}

}  // namespace
}  // namespace sgemm::testing
