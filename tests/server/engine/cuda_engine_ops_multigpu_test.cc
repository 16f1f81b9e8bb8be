// Transposed operands and submatrices under row and K splits (label
// multigpu; skips visibly with fewer than 2 GPUs): a row split of op(A) = A^T
// takes columns of the stored A, a K split takes its rows; small pipeline
// blocks put several blocks on every device.
#include "tests/common/gpu_test.h"
#include "tests/server/engine/engine_test_util.h"
#include "tests/server/engine/op_cases.h"

namespace sgemm::testing {
namespace {

TEST(CudaEngineOpsMultiGpu, RowAndKSplitsOfEveryCombination) {
  SGEMM_REQUIRE_GPUS(2);
  for (int gpus : test_gpu_counts()) {
    for (KReduce reduce : {KReduce::kReduceScatter, KReduce::kReduceToRoot}) {
      CudaEngineOptions o;
      o.devices = first_gpus(gpus);
      o.k_reduce = reduce;
      o.chunk_rows = 8;
      o.chunk_k = 8;
      o.kernel_autotune = false;
      auto made = make_cuda_engine(o);
      ASSERT_TRUE(made.ok()) << made.status().to_string();
      auto& e = *made;
      uint64_t seed = 500;
      for (SplitMode split : {SplitMode::kRows, SplitMode::kK})
        for (const OpCase& c : all_op_cases({GemmShape{37, 53, 29}, GemmShape{61, 1, 33}, GemmShape{130, 70, 90}})) {
          SCOPED_TRACE(std::to_string(gpus) + " GPUs, " + std::string(k_reduce_name(reduce)));
          auto r = run_op_case(*e, c, split, seed += 3);
          ASSERT_TRUE(r.ok()) << c.name() << ": " << r.status().to_string();
          EXPECT_EQ(r->split, split) << r->plan_reason;
          EXPECT_EQ(r->devices.size(), std::size_t(gpus));
        }
    }
  }
}

}  // namespace
}  // namespace sgemm::testing
