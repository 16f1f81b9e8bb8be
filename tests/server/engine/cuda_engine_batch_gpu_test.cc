// Batched and grouped products on one GPU (label gpu; skips visibly without
// one): one cublasGemmStridedBatchedEx / cublasGemmGroupedBatchedEx launch per
// request, every op(A)/op(B) with alpha, beta and C, each product against the
// fp64 reference; the precision contract picks the row (fp32 and fp32-ffma:
// cuBLAS SGEMM's arithmetic; tf32: the TF32 compute type; fp32x3 refused);
// products with non-finite inputs left out of the launch; a resident A or B
// read by every product of a strided batch (stride 0, the resident copy's
// padded leading dimension), alone, both at once, in several pieces, with
// check_finite looking at the shared matrix too.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "tests/common/gpu_test.h"
#include "tests/server/engine/batch_cases.h"
#include "tests/server/engine/engine_test_util.h"

namespace sgemm::testing {
namespace {

std::unique_ptr<Engine> batch_engine(std::vector<int> devices) {
  CudaEngineOptions o;
  o.devices = std::move(devices);
  auto e = make_cuda_engine(o);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  return e.ok() ? std::move(e).value() : nullptr;
}

struct Scalars {
  float alpha, beta;
  bool has_c;
};
constexpr Scalars kScalars[] = {{1.0f, 0.0f, false}, {-1.5f, 0.75f, true}, {2.0f, 0.0f, true}};

std::vector<GemmShape> shapes_of(BatchKind kind) {
  return kind == BatchKind::kStrided ? std::vector<GemmShape>(7, GemmShape{33, 17, 29}) : odd_group_shapes();
}

TEST(CudaEngineBatchGpu, StridedAndGroupedEveryOpAndScalars) {
  SGEMM_REQUIRE_GPUS(1);
  auto e = batch_engine(first_gpus(1));
  ASSERT_TRUE(e);
  uint64_t seed = 1100;
  for (Precision precision : {Precision::kFp32, Precision::kFp32Ffma})
    for (BatchKind kind : {BatchKind::kStrided, BatchKind::kGroup})
      for (Op op_a : {Op::kN, Op::kT})
        for (Op op_b : {Op::kN, Op::kT})
          for (const Scalars& sc : kScalars) {
            BatchRun run(kind, shapes_of(kind), op_a, op_b, sc.alpha, sc.beta, sc.has_c, seed += 7);
            run.request.options.precision = precision;
            SCOPED_TRACE(run.name + " precision " + std::string(precision_name(precision)));
            ASSERT_TRUE(e->validate(run.request).ok()) << e->validate(run.request).to_string();
            auto r = e->run(run.job());
            ASSERT_TRUE(r.ok()) << r.status().to_string();
            EXPECT_EQ(r->kernel_row,
                      kind == BatchKind::kStrided ? "cublas_sgemm_strided_batched" : "cublas_sgemm_grouped");
            ASSERT_EQ(r->kernel_rows.size(), 1u);  // one batched row, launched at least once
            EXPECT_EQ(r->kernel_rows[0].name, r->kernel_row);
            EXPECT_GE(r->kernel_rows[0].launches, 1);
            EXPECT_EQ(r->kernel, KernelKind::kCublas);
            EXPECT_EQ(r->split, SplitMode::kSingle);
            ASSERT_EQ(r->devices.size(), 1u);
            EXPECT_GT(r->devices[0].kernel_ms, 0.0);
            run.expect_all_correct(*r);
          }
}

TEST(CudaEngineBatchGpu, Tf32RunsTheTf32ComputeType) {
  SGEMM_REQUIRE_GPUS(1);
  auto e = batch_engine(first_gpus(1));
  ASSERT_TRUE(e);
  for (BatchKind kind : {BatchKind::kStrided, BatchKind::kGroup}) {
    BatchRun run(kind, shapes_of(kind), Op::kT, Op::kN, 1.25f, 0.5f, true, 77);
    run.request.options.precision = Precision::kTf32;
    SCOPED_TRACE(run.name);
    Status v = e->validate(run.request);
    if (v.code() == StatusCode::kFailedPrecondition) GTEST_SKIP() << "no tf32 kernel on this GPU: " << v.to_string();
    ASSERT_TRUE(v.ok()) << v.to_string();
    auto r = e->run(run.job());
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->kernel_row, kind == BatchKind::kStrided ? "cublas_tf32_strided_batched" : "cublas_tf32_per_product");
    EXPECT_EQ(r->precision, Precision::kTf32);
    run.expect_all_correct(*r, /*tolerance=*/1e-2);  // tf32 is documented as less accurate (about 1e-4)
  }
}

TEST(CudaEngineBatchGpu, ManySmallProductsAndAGroupUpTo600) {
  SGEMM_REQUIRE_GPUS(1);
  auto e = batch_engine(first_gpus(1));
  ASSERT_TRUE(e);
  {
    BatchRun run(BatchKind::kStrided, std::vector<GemmShape>(1000, GemmShape{64, 64, 64}), Op::kN, Op::kN, 1.0f, 0.0f,
                 false, 5);
    auto r = e->run(run.job());
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    run.expect_all_correct(*r);
  }
  {
    std::vector<GemmShape> shapes;
    for (int i = 0; i < 20; ++i) shapes.push_back({32 + 29 * i, 600 - 27 * i, 33 + 31 * (i % 7)});
    BatchRun run(BatchKind::kGroup, shapes, Op::kN, Op::kT, 0.5f, 2.0f, true, 6);
    auto r = e->run(run.job());
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    run.expect_all_correct(*r);
  }
}

TEST(CudaEngineBatchGpu, NonFiniteProductsAreLeftOutOfTheLaunch) {
  SGEMM_REQUIRE_GPUS(1);
  auto e = batch_engine(first_gpus(1));
  ASSERT_TRUE(e);
  for (BatchKind kind : {BatchKind::kStrided, BatchKind::kGroup}) {
    BatchRun run(kind, shapes_of(kind), Op::kN, Op::kN, 1.0f, 1.0f, true, 9);
    SCOPED_TRACE(run.name);
    auto spec = std::make_shared<BatchSpec>(run.spec());
    spec->check_finite = true;
    run.request.batch = spec;
    // Products 0 and 3 (a strided batch then launches products 1-2 and 4-6).
    run.a[std::size_t(spec->products[0].a_offset)] = std::nanf("");
    run.c[std::size_t(spec->products[3].c_offset + spec->products[3].c_elements() - 1)] =
        std::numeric_limits<float>::infinity();
    const std::vector<float> c_before = run.c;
    auto r = e->run(run.job());
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    for (std::size_t i = 0; i < spec->products.size(); ++i) {
      SCOPED_TRACE("product " + std::to_string(i));
      const BatchProduct& p = spec->products[i];
      if (i == 0 || i == 3) {
        EXPECT_EQ(r->product_status[i].code(), StatusCode::kInvalidArgument);
        EXPECT_EQ(run.sink.covered(p.c_offset, p.c_offset + p.c_elements()), 0);
        // Left out: its C in host memory is as it was.
        for (int64_t x = 0; x < p.c_elements(); ++x)
          ASSERT_EQ(std::memcmp(&run.c[std::size_t(p.c_offset + x)], &c_before[std::size_t(p.c_offset + x)], 4), 0);
        continue;
      }
      EXPECT_TRUE(r->product_status[i].ok());
      EXPECT_TRUE(run.verify(i, run.c).passed(kSgemmTolerance));
    }
  }
}

// Large enough for several pieces per GPU (about 4 MiB of operands each), with
// products left out on both sides of the pieces' edges; and the same with
// one piece (batch_max_pieces = 1: one launch after every copy).
TEST(CudaEngineBatchGpu, PiecesOfALargeBatchWithProductsLeftOut) {
  SGEMM_REQUIRE_GPUS(1);
  for (int pieces : {4, 1}) {
    CudaEngineOptions o;
    o.devices = first_gpus(1);
    o.batch_max_pieces = pieces;
    auto made = make_cuda_engine(o);
    ASSERT_TRUE(made.ok()) << made.status().to_string();
    auto& e = *made;
    for (BatchKind kind : {BatchKind::kStrided, BatchKind::kGroup}) {
      std::vector<GemmShape> shapes(600, GemmShape{64, 64, 64});
      if (kind == BatchKind::kGroup)
        for (std::size_t i = 0; i < shapes.size(); i += 3) shapes[i] = {65 + int64_t(i % 7), 63, 61};
      BatchRun run(kind, shapes, Op::kT, Op::kN, 1.5f, -0.5f, true, 31 + uint64_t(pieces));
      SCOPED_TRACE(run.name + ", " + std::to_string(pieces) + " pieces");
      auto spec = std::make_shared<BatchSpec>(run.spec());
      spec->check_finite = true;
      run.request.batch = spec;
      const std::vector<std::size_t> bad = {0, 149, 150, 151, 300, 599};
      for (std::size_t i : bad) run.b[std::size_t(spec->products[i].b_offset + 7)] = std::nanf("");
      auto r = e->run(run.job());
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      for (std::size_t i = 0; i < spec->products.size(); ++i) {
        const bool left_out = std::find(bad.begin(), bad.end(), i) != bad.end();
        const BatchProduct& p = spec->products[i];
        ASSERT_EQ(r->product_status[i].ok(), !left_out) << "product " << i;
        EXPECT_EQ(run.sink.covered(p.c_offset, p.c_offset + p.c_elements()), left_out ? 0 : p.c_elements());
        if (!left_out) {
          ASSERT_TRUE(run.verify(i, run.c).passed(kSgemmTolerance)) << "product " << i;
        }
      }
    }
  }
}

// The shape's stored widths (k = 19, n = 23, m = 37) are not multiples of 4,
// so the resident copy's leading dimension (padded to 4) differs from the
// dense width every way the operand can be stored.
constexpr GemmShape kSharedShape{37, 23, 19};

TEST(CudaEngineBatchGpu, ResidentOperandSharedByEveryProduct) {
  SGEMM_REQUIRE_GPUS(1);
  auto e = batch_engine(first_gpus(1));
  ASSERT_TRUE(e);
  uint64_t seed = 2100;
  const std::vector<std::vector<MatrixId>> shared_sets = {{MatrixId::kA}, {MatrixId::kB}, {MatrixId::kA, MatrixId::kB}};
  for (const auto& shared : shared_sets)
    for (Op op_a : {Op::kN, Op::kT})
      for (Op op_b : {Op::kN, Op::kT})
        for (const Scalars& sc : kScalars) {
          BatchRun run(BatchKind::kStrided, std::vector<GemmShape>(7, kSharedShape), op_a, op_b, sc.alpha, sc.beta,
                       sc.has_c, seed += 7);
          for (MatrixId m : shared) run.share(*e, m);
          SCOPED_TRACE(run.name);
          ASSERT_TRUE(run.a_lease || run.b_lease);
          const Status v = e->validate(run.request);
          ASSERT_TRUE(v.ok()) << v.to_string();
          auto r = e->run(run.job());
          ASSERT_TRUE(r.ok()) << r.status().to_string();
          EXPECT_EQ(r->kernel_row, "cublas_sgemm_strided_batched");
          EXPECT_NE(r->plan_reason.find("resident, read by every product"), std::string::npos) << r->plan_reason;
          run.expect_all_correct(*r);
        }
  // TF32's compute type reads the shared copy the same way.
  BatchRun tf32(BatchKind::kStrided, std::vector<GemmShape>(5, kSharedShape), Op::kT, Op::kN, 1.25f, 0.5f, true, 2199);
  tf32.request.options.precision = Precision::kTf32;
  tf32.share(*e, MatrixId::kB);
  SCOPED_TRACE(tf32.name);
  const Status v = e->validate(tf32.request);
  if (v.code() == StatusCode::kFailedPrecondition) GTEST_SKIP() << "no tf32 kernel on this GPU: " << v.to_string();
  ASSERT_TRUE(v.ok()) << v.to_string();
  auto r = e->run(tf32.job());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->kernel_row, "cublas_tf32_strided_batched");
  tf32.expect_all_correct(*r, /*tolerance=*/1e-2);
}

// A shared operand over several pieces per GPU (and one), products left out
// by check_finite; a non-finite value in the shared matrix leaves out every
// product (or fails the request with fail_fast), C untouched.
TEST(CudaEngineBatchGpu, SharedOperandInPiecesAndCheckFinite) {
  SGEMM_REQUIRE_GPUS(1);
  for (int pieces : {4, 1}) {
    CudaEngineOptions o;
    o.devices = first_gpus(1);
    o.batch_max_pieces = pieces;
    auto made = make_cuda_engine(o);
    ASSERT_TRUE(made.ok()) << made.status().to_string();
    auto& e = *made;
    for (MatrixId shared : {MatrixId::kA, MatrixId::kB}) {
      BatchRun run(BatchKind::kStrided, std::vector<GemmShape>(900, GemmShape{65, 63, 61}), Op::kN, Op::kT, 1.5f, -0.5f,
                   true, 51 + uint64_t(pieces));
      run.share(*e, shared);
      SCOPED_TRACE(run.name + ", " + std::to_string(pieces) + " pieces");
      auto spec = std::make_shared<BatchSpec>(run.spec());
      spec->check_finite = true;
      run.request.batch = spec;
      // Bad values in the operand that is not shared (product 0's would be the shared one's: skip it).
      const std::vector<std::size_t> bad = {1, 299, 300, 301, 600, 899};
      for (std::size_t i : bad) {
        const BatchProduct& p = spec->products[i];
        if (shared == MatrixId::kA)
          run.b[std::size_t(p.b_offset + 7)] = std::nanf("");
        else
          run.a[std::size_t(p.a_offset + 7)] = std::nanf("");
      }
      auto r = e->run(run.job());
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      for (std::size_t i = 0; i < spec->products.size(); ++i) {
        const bool left_out = std::find(bad.begin(), bad.end(), i) != bad.end();
        const BatchProduct& p = spec->products[i];
        ASSERT_EQ(r->product_status[i].ok(), !left_out) << "product " << i;
        EXPECT_EQ(run.sink.covered(p.c_offset, p.c_offset + p.c_elements()), left_out ? 0 : p.c_elements());
        if (!left_out) {
          ASSERT_TRUE(run.verify(i, run.c).passed(kSgemmTolerance)) << "product " << i;
        }
      }
    }
  }
  auto e = batch_engine(first_gpus(1));
  ASSERT_TRUE(e);
  for (bool fail_fast : {false, true}) {
    BatchRun run(BatchKind::kStrided, std::vector<GemmShape>(6, kSharedShape), Op::kN, Op::kN, 1.0f, 1.0f, true, 61);
    run.a[5] = std::numeric_limits<float>::infinity();  // product 0's A: the matrix every product reads
    run.share(*e, MatrixId::kA);
    SCOPED_TRACE(run.name + (fail_fast ? ", fail_fast" : ""));
    auto spec = std::make_shared<BatchSpec>(run.spec());
    spec->check_finite = true;
    spec->fail_fast = fail_fast;
    run.request.batch = spec;
    const std::vector<float> c_before = run.c;
    auto r = e->run(run.job());
    if (fail_fast) {
      ASSERT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().to_string();
      EXPECT_NE(r.status().message().find("product 0"), std::string::npos) << r.status().to_string();
    } else {
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      for (std::size_t i = 0; i < spec->products.size(); ++i) {
        EXPECT_EQ(r->product_status[i].code(), StatusCode::kInvalidArgument) << "product " << i;
        EXPECT_NE(r->product_status[i].message().find("A holds a non-finite value"), std::string::npos)
            << r->product_status[i].to_string();
      }
    }
    EXPECT_EQ(run.sink.total(), 0);
    EXPECT_EQ(std::memcmp(run.c.data(), c_before.data(), c_before.size() * sizeof(float)), 0);
  }
}

TEST(CudaEngineBatchGpu, PrecisionAndKernelRefusals) {
  SGEMM_REQUIRE_GPUS(1);
  auto e = batch_engine(first_gpus(1));
  ASSERT_TRUE(e);
  BatchRun run(BatchKind::kGroup, odd_group_shapes(), Op::kN, Op::kN, 1.0f, 0.0f, false, 3);
  run.request.options.precision = Precision::kFp32x3;
  EXPECT_EQ(e->validate(run.request).code(), StatusCode::kFailedPrecondition);
  run.request.options.precision = Precision::kFp32;
  run.request.options.kernel = KernelKind::kPingpong;
  Status named = e->validate(run.request);
  EXPECT_EQ(named.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(named.message().find("kernel: 'pingpong'"), std::string::npos) << named.to_string();
  run.request.options.kernel = std::nullopt;
  run.request.options.split = SplitMode::kRows;
  EXPECT_EQ(e->validate(run.request).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sgemm::testing
