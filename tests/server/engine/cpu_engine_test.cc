// The CPU engine (OpenBLAS) with transposed operands and submatrices: every
// combination against the fp64 reference (op_cases.h), the waits a
// streaming request's A needs under op_a = t, and the report's words.
#include "server/engine/cpu_engine.h"

#include <gtest/gtest.h>

#include <mutex>
#include <utility>
#include <vector>

#include "tests/server/engine/op_cases.h"

namespace sgemm::testing {
namespace {

std::unique_ptr<Engine> cpu_engine(int64_t rows_per_block = 16) {
  CpuEngineOptions o;
  o.rows_per_block = rows_per_block;  // small: several BLAS calls per product
  return make_cpu_engine(o);
}

TEST(CpuEngineOps, EveryOpLayoutAndScalarCombination) {
  auto e = cpu_engine();
  uint64_t seed = 100;
  for (const OpCase& c : all_op_cases(op_test_shapes())) {
    auto r = run_op_case(*e, c, SplitMode::kAuto, seed += 3);
    ASSERT_TRUE(r.ok()) << c.name() << ": " << r.status().to_string();
    EXPECT_EQ(r->kernel, KernelKind::kOpenblas);
    if (c.op_a == Op::kT || c.op_b == Op::kT) {
      EXPECT_NE(r->plan_reason.find("op_a = "), std::string::npos);
    }
  }
}

// Records what the engine waits for; the data is all present.
class RecordingFeed final : public InputFeed {
 public:
  Status wait_for(MatrixId matrix, int64_t elements) override {
    std::lock_guard lock(mu_);
    waits.emplace_back(matrix, elements);
    return Status::Ok();
  }
  std::vector<std::pair<MatrixId, int64_t>> waits;

 private:
  std::mutex mu_;
};

TEST(CpuEngineOps, TransposedAIsWaitedForWholeBeforeTheFirstBlock) {
  auto e = cpu_engine(/*rows_per_block=*/8);
  const GemmShape s{40, 9, 11};
  for (Op op_a : {Op::kN, Op::kT}) {
    SCOPED_TRACE(std::string("op_a ") + std::string(op_name(op_a)));
    std::vector<float> a(std::size_t(s.m * s.k)), b(std::size_t(s.k * s.n)), c(std::size_t(s.m * s.n));
    fill_random(a, 5);
    fill_random(b, 6);
    GemmJob j;
    j.request.shape = s;
    j.request.op_a = op_a;
    j.a = a.data();
    j.b = b.data();
    j.c = c.data();
    RecordingFeed feed;
    j.feed = &feed;
    auto r = e->run(j);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    std::vector<int64_t> a_waits;
    for (const auto& [m, n] : feed.waits)
      if (m == MatrixId::kA) a_waits.push_back(n);
    ASSERT_FALSE(a_waits.empty());
    if (op_a == Op::kT) {
      // Every row of C reads all of the stored k x m A: one wait, for all of it.
      EXPECT_EQ(a_waits, std::vector<int64_t>{s.m * s.k});
    } else {  // row prefixes, block by block
      EXPECT_EQ(a_waits.front(), 8 * s.k);
      EXPECT_EQ(a_waits.back(), s.m * s.k);
      EXPECT_EQ(a_waits.size(), 5u);
    }
    // The reference on op(A): A^T of the stored 11 x 40 matrix under t.
    std::vector<float> logical(a.size());
    for (int64_t i = 0; i < s.m; ++i)
      for (int64_t kk = 0; kk < s.k; ++kk)
        logical[std::size_t(i * s.k + kk)] =
            op_a == Op::kN ? a[std::size_t(i * s.k + kk)] : a[std::size_t(kk * s.m + i)];
    const VerifyResult v = verify_gemm(s.m, s.n, s.k, 1.0f, logical.data(), b.data(), 0.0f, nullptr, c.data());
    EXPECT_TRUE(v.passed(kSgemmTolerance)) << v.max_rel_error;
  }
}

// The report lists the rows that ran with their launches: one cblas_sgemm
// call per block of rows_per_block rows, the last block shorter; every kernel
// step of the trace names its row.
TEST(CpuEngineReport, ListsOpenblasWithOneLaunchPerBlockOfRows) {
  auto e = cpu_engine(/*rows_per_block=*/16);
  uint64_t seed = 300;
  for (const auto& [shape, blocks] :
       std::vector<std::pair<GemmShape, int64_t>>{{{40, 9, 11}, 3}, {{16, 5, 3}, 1}, {{17, 3, 7}, 2}, {{1, 1, 1}, 1}}) {
    SCOPED_TRACE(gemm_shape_text(shape));
    OpCase c;
    c.shape = shape;
    auto r = run_op_case(*e, c, SplitMode::kAuto, seed += 3);  // checks C against the fp64 reference
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    ASSERT_EQ(r->kernel_rows.size(), 1u);
    EXPECT_EQ(r->kernel_rows[0].name, "openblas");
    EXPECT_EQ(r->kernel_rows[0].launches, blocks);
    EXPECT_EQ(r->kernel_row, "openblas");
    EXPECT_EQ(report_kernel_name(*r), "openblas");
    ASSERT_EQ(r->devices.size(), 1u);
    int64_t kernel_steps = 0;
    for (const Step& st : r->devices[0].steps)
      if (st.kind == StepKind::kKernel) {
        ++kernel_steps;
        EXPECT_EQ(st.kernel_row, 0);
      }
    EXPECT_EQ(kernel_steps, blocks);
  }
}

TEST(KernelRowUse, RowsAreListedInOrderOfFirstUseAndTheMostLaunchedNamesTheJob) {
  std::vector<KernelRowUse> rows;
  EXPECT_EQ(most_launched_row(rows), "");
  EXPECT_EQ(count_kernel_launches(&rows, "simt_tma_128x256x32"), 0);
  EXPECT_EQ(count_kernel_launches(&rows, "simt_cpasync_64x128x16"), 1);
  EXPECT_EQ(most_launched_row(rows), "simt_tma_128x256x32");  // tied: the first listed
  EXPECT_EQ(count_kernel_launches(&rows, "simt_cpasync_64x128x16", 2), 1);
  EXPECT_EQ(count_kernel_launches(&rows, "simt_tma_128x256x32"), 0);
  EXPECT_EQ(count_kernel_launches(&rows, "cublas_sgemm"), 2);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].name, "simt_tma_128x256x32");
  EXPECT_EQ(rows[0].launches, 2);
  EXPECT_EQ(rows[1].name, "simt_cpasync_64x128x16");
  EXPECT_EQ(rows[1].launches, 3);
  EXPECT_EQ(rows[2].launches, 1);
  EXPECT_EQ(most_launched_row(rows), "simt_cpasync_64x128x16");
}

}  // namespace
}  // namespace sgemm::testing
