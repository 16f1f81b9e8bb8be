// The CUDA engine on one GPU (label gpu): correctness of every strategy the
// one-GPU pool can run, beta with C, concurrency, streaming in and out.
#include <algorithm>
#include <atomic>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <thread>

#include "common/kernel_registry.h"
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

TEST(CudaEngineGpu, ValidateNamesWhatIsWrong) {
  SGEMM_REQUIRE_GPUS(1);
  auto e = make_engine({0});
  ASSERT_TRUE(e);
  GemmRequest r = request_of({64, 64, 64});
  r.options.kernel = KernelKind::kOpenblas;  // the CPU engine's: this backend lacks it
  Status s = e->validate(r);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("openblas"), std::string::npos) << s.message();
  for (GemmShape bad : {GemmShape{0, 4, 4}, GemmShape{4, -1, 4}, GemmShape{4, 4, 0}}) {
    const Status b = e->validate(request_of(bad));
    EXPECT_EQ(b.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(b.message().find("must be >= 1"), std::string::npos) << b.message();
  }
  GemmRequest k = request_of({64, 64, 64});
  k.options.split = SplitMode::kK;  // allowed on one GPU: degenerates to single
  EXPECT_TRUE(e->validate(k).ok());
  GemmRequest huge = request_of({int64_t{1} << 33, 4, 4});  // no kernel can index it: the kernel says so, by field
  const Status h = e->validate(huge);
  EXPECT_EQ(h.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(h.message().find("shape.m"), std::string::npos) << h.message();
}

TEST(CudaEngineGpu, UnvalidatedJobIsOurBug) {
  SGEMM_REQUIRE_GPUS(1);
  auto e = make_engine({0});
  ASSERT_TRUE(e);
  Problem p = make_problem(*e, {8, 8, 8}, 12);
  GemmJob j = job_of(p);
  j.request.shape.k = 0;
  EXPECT_EQ(e->run(j).status().code(), StatusCode::kInternal);
}

TEST(CudaEngineGpu, OddShapeEveryStrategyMatchesReference) {
  SGEMM_REQUIRE_GPUS(1);
  auto e = make_engine({0});
  ASSERT_TRUE(e);
  Problem p = make_problem(*e, {1025, 777, 3001}, 11);
  for (SplitMode mode : {SplitMode::kAuto, SplitMode::kSingle, SplitMode::kRows, SplitMode::kK}) {
    for (KernelKind kernel : e->info().kernels) {
      if (kernel == KernelKind::kTf32 || kernel == KernelKind::kFp32x3) continue;  // chosen by precision, not by name
      SCOPED_TRACE(std::string(split_mode_name(mode)) + " " + std::string(kernel_kind_name(kernel)));
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

// Kernel choice by measurement (kernel_tuner.h): the first FFMA request of a
// kernel shape times both FFMA kernels on it; later ones reuse the decision; the
// result is right whichever runs. (An fp32 request of this shape runs fp32x3,
// which the tuner does not time: fp32-ffma asks for the FFMA table.)
TEST(CudaEngineGpu, KernelTimedOnceForItsBlockShapeAndResultsStayRight) {
  SGEMM_REQUIRE_GPUS(1);
  auto e = make_engine({0});
  ASSERT_TRUE(e);
  // 1000 rows on one GPU: blocks of 512 rows (server/planner/plan.h).
  Problem p = make_problem(*e, {1000, 2000, 1500}, 51, /*has_c=*/true, 0.5f, -1.25f);
  std::optional<KernelKind> first;
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE(i);
    reset_c(p);
    GemmJob j = job_of(p);
    j.request.options.precision = Precision::kFp32Ffma;
    auto r = e->run(std::move(j));
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_NE(r->plan_reason.find("for 512x2000x1500 blocks, timed on GPU 0:"), std::string::npos) << r->plan_reason;
    EXPECT_TRUE(r->kernel == KernelKind::kPingpong || r->kernel == KernelKind::kCublas);
    if (first) {
      EXPECT_EQ(r->kernel, *first);  // the cached decision
    }
    first = r->kernel;
    const VerifyResult v = verify(p, false);
    EXPECT_TRUE(v.passed(kSgemmTolerance)) << v.max_rel_error << " at " << v.worst_row << "," << v.worst_col;
  }
  // Below the smallest timed size, and with the kernel named, nothing is timed.
  Problem small = make_problem(*e, {64, 96, 80}, 52);
  auto r = e->run(job_of(small));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->plan_reason.find("timed on GPU"), std::string::npos) << r->plan_reason;
  EXPECT_TRUE(verify(small, false).passed(kSgemmTolerance));
  Problem named = make_problem(*e, {1000, 2004, 1500}, 53);
  r = e->run(job_of(named, SplitMode::kAuto, KernelKind::kPingpong));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->kernel, KernelKind::kPingpong);
  EXPECT_EQ(r->plan_reason.find("timed on GPU"), std::string::npos) << r->plan_reason;
  EXPECT_TRUE(verify(named, false).passed(kSgemmTolerance));
}

TEST(CudaEngineGpu, KernelAutotuneOffLeavesTheChoiceToTheTable) {
  SGEMM_REQUIRE_GPUS(1);
  CudaEngineOptions o;
  o.devices = {0};
  o.kernel_autotune = false;
  auto made = make_cuda_engine(o);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  auto& e = *made;
  // 4096 rows -> 512x2048x1100 blocks of a large product: the measured speeds' pick
  // (cuBLAS, at the nearest measured shape 640x2048x1024; fp32-ffma: an fp32 request
  // of this shape runs fp32x3), not timed.
  Problem p = make_problem(*e, {4096, 2048, 1100}, 54);
  GemmJob j = job_of(p);
  j.request.options.precision = Precision::kFp32Ffma;
  auto r = e->run(std::move(j));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->kernel, KernelKind::kCublas);
  EXPECT_EQ(r->plan_reason.find("timed on GPU"), std::string::npos) << r->plan_reason;
  EXPECT_NE(r->plan_reason.find("kernel cublas for 512x2048x1100 (class large"), std::string::npos) << r->plan_reason;
  EXPECT_NE(r->plan_reason.find("kernel_speeds.csv"), std::string::npos) << r->plan_reason;
  EXPECT_TRUE(verify(p, true).passed(kSgemmTolerance));
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
  // The engine waited for the trickling input, and says so, as input waiting.
  ASSERT_EQ(r->devices.size(), 1u);
  EXPECT_GT(r->devices[0].copy_in_wait_ms, 0.0);
  expect_steps(r->devices[0]);
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

TEST(CudaEngineGpu, ThinShapesUseTheMeasuredKernel) {
  SGEMM_REQUIRE_GPUS(1);
  auto e = make_engine({0});
  ASSERT_TRUE(e);
  for (GemmShape s :
       {GemmShape{1, 1, 1}, GemmShape{1, 4099, 2051}, GemmShape{2047, 1, 1029}, GemmShape{3001, 60, 2501}}) {
    SCOPED_TRACE(std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k));
    Problem p = make_problem(*e, s, 52, true, 0.5f, -2.0f);
    auto r = e->run(job_of(p));
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_TRUE(verify(p, false).passed(kSgemmTolerance));
    // A single row or column runs ping-pong's GEMV (the default kernel, and the
    // measured speeds' pick). 3001x60x2501 runs as 512x60x2501 blocks: the
    // measured speeds' pick for them, timed on this GPU against the other FFMA
    // kernel; a kernel other than the default says why.
    if (s.m == 1 || s.n == 1) {
      EXPECT_EQ(r->kernel, KernelKind::kPingpong) << r->plan_reason;
    } else {
      EXPECT_TRUE(r->kernel == KernelKind::kPingpong || r->kernel == KernelKind::kCublas) << r->plan_reason;
      EXPECT_NE(r->plan_reason.find("timed on GPU"), std::string::npos) << r->plan_reason;
    }
    auto named = e->run(job_of(p, SplitMode::kAuto, KernelKind::kPingpong));  // a named kernel is obeyed
    ASSERT_TRUE(named.ok()) << named.status().to_string();
    EXPECT_EQ(named->kernel, KernelKind::kPingpong);
  }
}

// Each precision the engine offers runs its kernel and meets its accuracy:
// fp32x3 that of SGEMM, tf32 its documented ~1e-4 (checked at 5e-3).
TEST(CudaEngineGpu, PrecisionsRunTheirKernels) {
  SGEMM_REQUIRE_GPUS(1);
  auto e = make_engine({0});
  ASSERT_TRUE(e);
  const auto offered = e->info().precisions;
  ASSERT_FALSE(offered.empty());
  EXPECT_EQ(offered.front(), Precision::kFp32);
  for (Precision prec : offered) {
    for (GemmShape s : {GemmShape{1025, 777, 3001}, GemmShape{2048, 2048, 2048}, GemmShape{129, 67, 5}}) {
      SCOPED_TRACE(std::string(precision_name(prec)) + " " + std::to_string(s.m) + "x" + std::to_string(s.n) + "x" +
                   std::to_string(s.k));
      Problem p = make_problem(*e, s, 56, true, 1.5f, -0.5f);
      GemmJob j = job_of(p);
      j.request.options.precision = prec;
      auto r = e->run(j);
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      EXPECT_EQ(r->precision, prec);
      const VerifyResult v = verify(p, s.m > 1024);
      EXPECT_TRUE(v.passed(prec == Precision::kTf32 ? 5e-3 : kSgemmTolerance)) << v.max_rel_error;
      const KernelKind want = prec == Precision::kFp32x3 ? KernelKind::kFp32x3
                              : prec == Precision::kTf32 ? KernelKind::kTf32
                                                         : r->kernel;
      EXPECT_EQ(r->kernel, want);
    }
  }
  GemmRequest bad = request_of({64, 64, 64});
  bad.options.precision = Precision::kTf32;
  bad.options.kernel = KernelKind::kPingpong;
  EXPECT_EQ(e->validate(bad).code(), StatusCode::kInvalidArgument);
}

// The fp32 contract (server/planner/kernel_choice.h, select_kernel): an fp32
// request naming no kernel runs fp32x3 where its tiles fill the GPU and K is in
// the proven range, and the report names the concrete kernel; fp32-ffma on the
// same shape runs FFMA. Both meet the SGEMM tolerance against fp64.
TEST(CudaEngineGpu, Fp32DefaultRunsFp32x3WhereTheContractAllowsAndNamesTheKernel) {
  SGEMM_REQUIRE_GPUS(1);
  auto e = make_engine({0});
  ASSERT_TRUE(e);
  const auto kernels = e->info().kernels;
  const bool has_x3 = std::find(kernels.begin(), kernels.end(), KernelKind::kFp32x3) != kernels.end();
  Problem p = make_problem(*e, {4096, 4096, 1024}, 57, true, 1.0f, 0.5f);
  for (Precision prec : {Precision::kFp32, Precision::kFp32Ffma}) {
    SCOPED_TRACE(std::string(precision_name(prec)));
    reset_c(p);
    GemmJob j = job_of(p);
    j.request.options.precision = prec;
    auto r = e->run(j);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->precision, prec);
    EXPECT_TRUE(verify(p, true).passed(kSgemmTolerance));
    EXPECT_FALSE(r->kernel_row.empty());
    if (prec == Precision::kFp32 && has_x3) {
      EXPECT_EQ(r->kernel, KernelKind::kFp32x3) << r->plan_reason;
      EXPECT_EQ(r->kernel_row.rfind("fp32x3_wgmma_", 0), 0u) << r->kernel_row;
      EXPECT_NE(r->plan_reason.find("fp32 contract: fp32x3"), std::string::npos) << r->plan_reason;
    } else {
      EXPECT_EQ(kernel_arithmetic(r->kernel), ArithmeticClass::kFfma) << r->plan_reason;
      EXPECT_TRUE(r->kernel_row == "cublas_sgemm" || r->kernel_row.rfind("simt_", 0) == 0) << r->kernel_row;
    }
  }
  const EngineInfo info = e->info();
  ASSERT_EQ(info.contracts.size(), info.precisions.size());
  for (const PrecisionContractInfo& c : info.contracts) EXPECT_FALSE(c.kernels.empty());
}

// The report lists every concrete kernel that ran, with its launches: 3073
// rows in blocks of 128 leave a last block of one row, which the SIMT family
// runs as a GEMV, another row than the full blocks'. Each kernel step names its
// launch's row, which is the registry's choice for that step's block, and the
// launches add up to the kernel steps issued; kernel_row is the most launched.
TEST(CudaEngineGpu, ReportListsEveryKernelRowThatRanWithItsLaunches) {
  SGEMM_REQUIRE_GPUS(1);
  CudaEngineOptions o;
  o.devices = {0};
  o.chunk_rows = 128;
  auto made = make_cuda_engine(o);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  auto& e = *made;
  const int sm_count = e->info().devices[0].sm_count;
  Problem p = make_problem(*e, {3073, 512, 512}, 61, true, 1.0f, 0.5f);
  // A named kernel: no tuning and no cuBLAS fallback, so every block's row is
  // the registry's choice for its shape.
  auto r = e->run(job_of(p, SplitMode::kSingle, KernelKind::kPingpong));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(verify(p, true).passed(kSgemmTolerance));
  ASSERT_EQ(r->devices.size(), 1u);
  std::map<std::string, int64_t> expected;  // by the registry, from the steps' blocks
  for (const Step& st : r->devices[0].steps) {
    if (st.kind != StepKind::kKernel || st.row_end == st.row_begin) continue;  // B prepared once: not a product
    const GemmShape block{st.row_end - st.row_begin, p.shape.n, st.k_end - st.k_begin};
    const std::string row = select_kernel_row_of(KernelKind::kPingpong, block, KernelLayout{}, sm_count).name();
    ++expected[row];
    ASSERT_GE(st.kernel_row, 0) << gemm_shape_text(block);
    ASSERT_LT(std::size_t(st.kernel_row), r->kernel_rows.size());
    EXPECT_EQ(r->kernel_rows[std::size_t(st.kernel_row)].name, row) << gemm_shape_text(block);
  }
  std::map<std::string, int64_t> listed;
  for (const KernelRowUse& k : r->kernel_rows) {
    EXPECT_TRUE(listed.emplace(k.name, k.launches).second) << k.name << " listed twice";
  }
  EXPECT_EQ(listed, expected);
  EXPECT_GE(listed.size(), 2u) << "the one-row block should run another row (gemv) than the full blocks";
  EXPECT_EQ(listed.count("gemv"), 1u);
  EXPECT_EQ(r->kernel_row, most_launched_row(r->kernel_rows));
  EXPECT_NE(r->kernel_row, "gemv");  // one launch against many
  EXPECT_EQ(report_kernel_name(*r), r->kernel_row);
}

// Whatever the engine chooses (fp32 by shape, the tuner, cuBLAS taking blocks
// ours refuse), the list accounts for every kernel launch once.
TEST(CudaEngineGpu, KernelRowsAccountForEveryLaunchOfTheDefaultChoice) {
  SGEMM_REQUIRE_GPUS(1);
  CudaEngineOptions o;
  o.devices = {0};
  o.chunk_rows = 256;
  auto made = make_cuda_engine(o);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  auto& e = *made;
  for (Precision prec : {Precision::kFp32, Precision::kFp32Ffma, Precision::kTf32}) {
    SCOPED_TRACE(std::string(precision_name(prec)));
    Problem p = make_problem(*e, {1537, 1024, 1000}, 62);
    GemmJob j = job_of(p);
    j.request.options.precision = prec;
    auto r = e->run(j);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_TRUE(verify(p, false).passed(prec == Precision::kTf32 ? 5e-3 : kSgemmTolerance));
    expect_kernel_rows_cover_launches(*r);
  }
}

// Deterministic split-K needs scratch; the lane owns it (kernels/ keeps none).
TEST(CudaEngineGpu, SplitKWorkspaceFromTheLane) {
  SGEMM_REQUIRE_GPUS(1);
  auto e = make_engine({0});
  ASSERT_TRUE(e);
  for (GemmShape s : {GemmShape{1024, 1024, 16384}, GemmShape{515, 770, 9001}}) {
    Problem p = make_problem(*e, s, 53, true, 1.0f, 0.25f);
    for (int rep = 0; rep < 2; ++rep) {
      reset_c(p);
      auto r = e->run(job_of(p, SplitMode::kSingle, KernelKind::kPingpong));
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      EXPECT_TRUE(verify(p, true).passed(kSgemmTolerance));
    }
  }
}

// Cancelled before it starts, or while it runs: the token's status comes
// back, and the engine (its one lane) serves the next job.
TEST(CudaEngineGpu, CancelStopsAtABlockBoundary) {
  SGEMM_REQUIRE_GPUS(1);
  CudaEngineOptions o;
  o.devices = {0};
  o.lanes_per_device = 1;
  o.chunk_rows = 256;
  auto made = make_cuda_engine(o);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  auto& e = *made;
  Problem p = make_problem(*e, {8192, 8192, 8192}, 54);
  {
    CancelToken token;
    token.cancel(DeadlineExceeded("test: deadline passed"));
    GemmJob j = job_of(p);
    j.cancel = &token;
    auto r = e->run(j);
    EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded) << r.status().to_string();
  }
  {
    CancelToken token;
    GemmJob j = job_of(p);
    j.cancel = &token;
    std::thread canceller([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      token.cancel(Cancelled("test: client went away"));
    });
    const auto t0 = std::chrono::steady_clock::now();
    auto r = e->run(j);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    canceller.join();
    EXPECT_EQ(r.status().code(), StatusCode::kCancelled) << r.status().to_string() << " after " << ms << " ms";
  }
  Problem q = make_problem(*e, {777, 1025, 513}, 55);
  auto after = e->run(job_of(q));
  ASSERT_TRUE(after.ok()) << after.status().to_string();
  EXPECT_TRUE(verify(q, false).passed(kSgemmTolerance));
}

// Warm start: a small product per kernel on every lane and the pinned pool
// before the engine is handed out; request buffers come from that pool.
TEST(CudaEngineGpu, WarmStartAndPinnedPool) {
  SGEMM_REQUIRE_GPUS(1);
  CudaEngineOptions o;
  o.devices = {0};
  o.pinned_pool_bytes = std::size_t(64) << 20;
  o.warm_up = true;
  auto made = make_cuda_engine(o);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  auto& e = *made;
  const EngineInfo info = e->info();
  EXPECT_GT(info.startup_ms, 0.0);
  EXPECT_EQ(info.pinned_pool_bytes, int64_t(64) << 20);
  // Three buffers from the pool, page-locked, within one 64 MiB block; freed
  // and coalesced, the whole pool is one buffer again.
  std::vector<HostBuffer> bufs;
  for (int i = 0; i < 3; ++i) {
    auto b = e->host_allocator().allocate(std::size_t(10) << 20);
    ASSERT_TRUE(b.ok()) << b.status().to_string();
    cudaPointerAttributes attr{};
    ASSERT_EQ(cudaPointerGetAttributes(&attr, b->data()), cudaSuccess);
    EXPECT_EQ(attr.type, cudaMemoryTypeHost);
    bufs.push_back(std::move(b).value());
  }
  const char* lo = static_cast<const char*>(bufs[0].data());
  for (const HostBuffer& b : bufs) {
    EXPECT_GE(static_cast<const char*>(b.data()), lo);
    EXPECT_LT(static_cast<const char*>(b.data()) - lo, std::ptrdiff_t(64) << 20);
  }
  bufs.clear();
  auto whole = e->host_allocator().allocate(std::size_t(64) << 20);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(whole->data(), lo);
  whole->reset();
  // And the warmed engine computes right (each kernel once more).
  Problem p = make_problem(*e, {257, 129, 65}, 7, false, 1.0f, 0.0f);
  auto r = e->run(job_of(p));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_report(*r, SplitMode::kSingle, 1);
  EXPECT_TRUE(verify(p, false).passed(kSgemmTolerance));
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

// A job of one row block runs on the lane's compute stream alone (one device
// allocation, spans sharing their boundary events). Many of them in a row on
// the same lanes, with and without C, each checked in full against the fp64
// reference and its report's timings, and from several threads at once: a
// lane's reused events and its stream-ordered memory never mix two jobs.
TEST(CudaEngineGpu, ManySmallJobsInARowStayRightWithHonestTimings) {
  SGEMM_REQUIRE_GPUS(1);
  auto e = make_engine({0}, KReduce::kReduceScatter, /*lanes=*/2);
  ASSERT_TRUE(e);
  const GemmShape shapes[] = {{65, 33, 17}, {1, 1, 1}, {17, 129, 3}, {64, 64, 64}, {255, 31, 513}, {512, 7, 9}};
  std::vector<Problem> ps;
  ps.reserve(std::size(shapes));
  for (std::size_t i = 0; i < std::size(shapes); ++i) {
    const bool has_c = i % 2 == 1;
    ps.push_back(make_problem(*e, shapes[i], 300 + 5 * i, has_c, has_c ? -0.5f : 1.25f, has_c ? 1.5f : 0.0f));
  }
  for (int rep = 0; rep < 20; ++rep) {
    for (Problem& p : ps) {
      SCOPED_TRACE(std::to_string(p.shape.m) + "x" + std::to_string(p.shape.n) + "x" + std::to_string(p.shape.k) +
                   " rep " + std::to_string(rep));
      reset_c(p);
      CountingSink sink(p.shape.m);
      GemmJob j = job_of(p);
      j.sink = &sink;
      auto r = e->run(j);
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      expect_report(*r, SplitMode::kSingle, 1);
      sink.expect_each_row_once();
      const DeviceTiming& d = r->devices[0];
      EXPECT_GT(d.copy_in_ms, 0.0);
      EXPECT_GT(d.copy_out_ms, 0.0);
      for (const Step& st : d.steps) EXPECT_LT(st.end_ms, 60000.0) << step_kind_name(st.kind);
      const VerifyResult v = verify(p, false);
      ASSERT_TRUE(v.passed(kSgemmTolerance)) << v.max_rel_error << " at " << v.worst_row << "," << v.worst_col;
    }
  }
  constexpr int kThreads = 4;
  std::vector<Problem> mine;
  mine.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t)
    mine.push_back(make_problem(*e, {33 + 31 * t, 65 - 9 * t, 17 + 40 * t}, 400 + t, t % 2 == 0, 1.0f, 0.5f));
  std::atomic<int> failures{0}, wrong{0};
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      Problem& p = mine[std::size_t(t)];
      for (int rep = 0; rep < 50; ++rep) {
        reset_c(p);
        auto r = e->run(job_of(p));
        if (!r.ok()) failures++;
        if (!verify(p, false).passed(kSgemmTolerance)) wrong++;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace
}  // namespace sgemm::testing
