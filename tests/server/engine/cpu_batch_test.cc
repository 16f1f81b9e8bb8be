// Batched and grouped products on the CPU engine (OpenBLAS): a strided batch
// and a group of odd shapes with every op(A)/op(B), alpha, beta and C against
// the fp64 reference; per-product errors (check_finite) reported without
// failing the batch, or failing it with fail_fast; validation by field; a
// resident A or B read by every product of a strided batch (stride 0).
#include <gtest/gtest.h>

#include <cmath>

#include "server/engine/cpu_engine.h"
#include "tests/server/engine/batch_cases.h"
#include "tests/server/engine/resident_test_util.h"

namespace sgemm::testing {
namespace {

struct Scalars {
  float alpha, beta;
  bool has_c;
};
constexpr Scalars kScalars[] = {{1.0f, 0.0f, false}, {-1.5f, 0.75f, true}};

TEST(CpuEngineBatch, StridedBatchAndGroupEveryOpAndScalars) {
  auto e = make_cpu_engine({});
  uint64_t seed = 700;
  for (BatchKind kind : {BatchKind::kStrided, BatchKind::kGroup})
    for (Op op_a : {Op::kN, Op::kT})
      for (Op op_b : {Op::kN, Op::kT})
        for (const Scalars& sc : kScalars) {
          const auto shapes =
              kind == BatchKind::kStrided ? std::vector<GemmShape>(7, GemmShape{33, 17, 29}) : odd_group_shapes();
          BatchRun run(kind, shapes, op_a, op_b, sc.alpha, sc.beta, sc.has_c, seed += 5);
          SCOPED_TRACE(run.name);
          ASSERT_TRUE(e->validate(run.request).ok());
          auto r = e->run(run.job());
          ASSERT_TRUE(r.ok()) << r.status().to_string();
          EXPECT_EQ(r->kernel, KernelKind::kOpenblas);
          ASSERT_EQ(r->kernel_rows.size(), 1u);  // one cblas_sgemm call per product
          EXPECT_EQ(r->kernel_rows[0].name, "openblas");
          EXPECT_EQ(r->kernel_rows[0].launches, int64_t(shapes.size()));
          EXPECT_NE(r->plan_reason.find(kind == BatchKind::kStrided ? "strided batch of 7" : "a group of 8"),
                    std::string::npos)
              << r->plan_reason;
          run.expect_all_correct(*r);
        }
}

TEST(CpuEngineBatch, NonFiniteInputFailsOnlyItsProduct) {
  auto e = make_cpu_engine({});
  BatchRun run(BatchKind::kGroup, odd_group_shapes(), Op::kN, Op::kT, 2.0f, 0.5f, true, 42);
  auto spec = std::make_shared<BatchSpec>(run.spec());
  spec->check_finite = true;
  run.request.batch = spec;
  const BatchProduct& bad = spec->products[3];  // 33x17x29: B stored n x k = 17 x 29
  run.b[std::size_t(bad.b_offset + 2 * 29 + 5)] = std::nanf("");
  auto r = e->run(run.job());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->product_status.size(), spec->products.size());
  ASSERT_EQ(r->kernel_rows.size(), 1u);  // the product left out is not launched
  EXPECT_EQ(r->kernel_rows[0].launches, int64_t(spec->products.size()) - 1);
  const Status& st = r->product_status[3];
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("product 3 (33x17x29): B holds a non-finite value"), std::string::npos) << st.to_string();
  EXPECT_NE(st.message().find("(2, 5)"), std::string::npos) << st.to_string();
  EXPECT_EQ(run.sink.covered(bad.c_offset, bad.c_offset + bad.c_elements()), 0);  // its C is not reported
  for (std::size_t i = 0; i < spec->products.size(); ++i) {
    if (i == 3) continue;
    SCOPED_TRACE("product " + std::to_string(i));
    EXPECT_TRUE(r->product_status[i].ok());
    EXPECT_TRUE(run.verify(i, run.c).passed(kSgemmTolerance));
  }
  // fail_fast: the same product fails the whole run, naming it, before any product is computed.
  spec->fail_fast = true;
  RecordingSink none;
  GemmJob ff_job = run.job();
  ff_job.sink = &none;
  auto ff = e->run(ff_job);
  ASSERT_FALSE(ff.ok());
  EXPECT_EQ(none.total(), 0);
  EXPECT_EQ(ff.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(ff.status().message().find("product 3"), std::string::npos);
}

TEST(CpuEngineBatch, ValidationNamesTheField) {
  auto e = make_cpu_engine({});
  BatchRun run(BatchKind::kGroup, {{2, 2, 2}, {3, 0, 4}}, Op::kN, Op::kN, 1.0f, 0.0f, false, 1);
  Status st = e->validate(run.request);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("header.group[1].n"), std::string::npos) << st.to_string();
  BatchRun named(BatchKind::kStrided, {{2, 2, 2}}, Op::kN, Op::kN, 1.0f, 0.0f, false, 1);
  named.request.options.kernel = KernelKind::kCublas;
  EXPECT_EQ(e->validate(named.request).code(), StatusCode::kFailedPrecondition);
}

TEST(CpuEngineBatch, OneResidentOperandForEveryProduct) {
  auto e = make_cpu_engine({});
  uint64_t seed = 900;
  for (MatrixId shared : {MatrixId::kA, MatrixId::kB})
    for (Op op_a : {Op::kN, Op::kT})
      for (Op op_b : {Op::kN, Op::kT})
        for (const Scalars& sc : kScalars) {
          const GemmShape s{37, 23, 19};
          BatchRun run(BatchKind::kStrided, std::vector<GemmShape>(5, s), op_a, op_b, sc.alpha, sc.beta, sc.has_c,
                       seed += 5);
          run.share(*e, shared);
          SCOPED_TRACE(run.name);
          ASSERT_TRUE(shared == MatrixId::kA ? run.a_lease : run.b_lease);
          ASSERT_TRUE(e->validate(run.request).ok());
          GemmJob job = run.job();
          auto r = e->run(job);
          ASSERT_TRUE(r.ok()) << r.status().to_string();
          run.expect_all_correct(*r);
        }
  // A group's products differ in shape: none is shared.
  BatchRun group(BatchKind::kGroup, {{2, 2, 2}, {3, 2, 2}}, Op::kN, Op::kN, 1.0f, 0.0f, false, 1);
  auto spec = std::make_shared<BatchSpec>(group.spec());
  share_batch_operand(*spec, MatrixId::kB);
  group.request.batch = spec;
  const Status st = e->validate(group.request);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("header.b_handle"), std::string::npos) << st.to_string();
}

}  // namespace
}  // namespace sgemm::testing
