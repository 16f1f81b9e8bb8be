// Batched and grouped products split by product over every visible GPU (label
// multigpu; skips visibly with fewer than 2): each GPU one contiguous range of
// products and one launch; every product against the fp64 reference; split
// single keeps the batch on one GPU; fewer products than GPUs use fewer GPUs;
// a resident A or B shared by every product gets a whole copy on each GPU of
// the batch, which each GPU's launch reads.
#include <algorithm>

#include "tests/common/gpu_test.h"
#include "tests/server/engine/batch_cases.h"
#include "tests/server/engine/engine_test_util.h"

namespace sgemm::testing {
namespace {

// The devices' product ranges: contiguous, in order, covering every product.
void expect_ranges(const GemmReport& r, int64_t count) {
  int64_t next = 0;
  for (const DeviceTiming& d : r.devices) {
    EXPECT_EQ(d.shard.row_begin, next) << r.plan_reason;
    EXPECT_LT(d.shard.row_begin, d.shard.row_end) << r.plan_reason;
    next = d.shard.row_end;
  }
  EXPECT_EQ(next, count) << r.plan_reason;
}

TEST(CudaEngineBatchMultiGpu, SplitByProductOverEveryGpu) {
  SGEMM_REQUIRE_GPUS(2);
  for (int gpus : test_gpu_counts()) {
    SCOPED_TRACE(std::to_string(gpus) + " GPUs");
    CudaEngineOptions o;
    o.devices = first_gpus(gpus);
    auto made = make_cuda_engine(o);
    ASSERT_TRUE(made.ok()) << made.status().to_string();
    auto& e = *made;
    std::vector<GemmShape> group;
    for (int rep = 0; rep < 5; ++rep)
      for (const GemmShape& s : odd_group_shapes()) group.push_back(s);
    uint64_t seed = 4000;
    for (BatchKind kind : {BatchKind::kStrided, BatchKind::kGroup})
      for (Op op_a : {Op::kN, Op::kT})
        for (Op op_b : {Op::kN, Op::kT}) {
          const auto shapes = kind == BatchKind::kStrided ? std::vector<GemmShape>(301, GemmShape{33, 17, 29}) : group;
          BatchRun run(kind, shapes, op_a, op_b, -0.5f, 1.5f, true, seed += 11);
          SCOPED_TRACE(run.name);
          auto r = e->run(run.job());
          ASSERT_TRUE(r.ok()) << r.status().to_string();
          EXPECT_EQ(r->devices.size(), std::size_t(gpus)) << r->plan_reason;
          EXPECT_NE(r->plan_reason.find("split by product"), std::string::npos);
          expect_ranges(*r, int64_t(shapes.size()));
          run.expect_all_correct(*r);
        }
    // split single: one GPU; two products: at most two GPUs.
    BatchRun single(BatchKind::kStrided, std::vector<GemmShape>(50, GemmShape{20, 30, 40}), Op::kN, Op::kN, 1.0f, 0.0f,
                    false, 8);
    single.request.options.split = SplitMode::kSingle;
    auto s = e->run(single.job());
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    EXPECT_EQ(s->devices.size(), 1u);
    EXPECT_EQ(s->split, SplitMode::kSingle);
    single.expect_all_correct(*s);
    BatchRun two(BatchKind::kGroup, {{100, 100, 100}, {7, 9, 11}}, Op::kT, Op::kT, 1.0f, 0.0f, false, 9);
    auto t = e->run(two.job());
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    EXPECT_EQ(t->devices.size(), 2u);
    expect_ranges(*t, 2);
    two.expect_all_correct(*t);
  }
}

TEST(CudaEngineBatchMultiGpu, SharedResidentOperandHasACopyOnEveryGpuOfTheBatch) {
  SGEMM_REQUIRE_GPUS(2);
  for (int gpus : test_gpu_counts()) {
    SCOPED_TRACE(std::to_string(gpus) + " GPUs");
    CudaEngineOptions o;
    o.devices = first_gpus(gpus);
    auto made = make_cuda_engine(o);
    ASSERT_TRUE(made.ok()) << made.status().to_string();
    auto& e = *made;
    uint64_t seed = 5000;
    const std::vector<std::vector<MatrixId>> shared_sets = {
        {MatrixId::kA}, {MatrixId::kB}, {MatrixId::kA, MatrixId::kB}};
    for (const auto& shared : shared_sets)
      for (Op op_a : {Op::kN, Op::kT})
        for (Op op_b : {Op::kN, Op::kT}) {
          BatchRun run(BatchKind::kStrided, std::vector<GemmShape>(301, GemmShape{37, 23, 19}), op_a, op_b, -0.5f, 1.5f,
                       true, seed += 13);
          for (MatrixId m : shared) run.share(*e, m);
          SCOPED_TRACE(run.name);
          auto r = e->run(run.job());
          ASSERT_TRUE(r.ok()) << r.status().to_string();
          EXPECT_EQ(r->devices.size(), std::size_t(gpus)) << r->plan_reason;
          expect_ranges(*r, 301);
          run.expect_all_correct(*r);
          // Each GPU of the batch holds the whole shared matrix (the put's GPU among them).
          for (const ResidentStore::Lease* lease : {&run.a_lease, &run.b_lease}) {
            if (!*lease) continue;
            const Layout l = layout_of(*lease);
            for (const DeviceTiming& d : r->devices)
              EXPECT_TRUE(std::any_of(l.begin(), l.end(),
                                      [&](const Piece& p) {
                                        return p.device == d.device && p.row_begin == 0 && p.row_end == (*lease)->rows;
                                      }))
                  << "no whole copy on GPU " << d.device << ": " << describe_layout(l);
          }
        }
    // split single: the batch on one GPU, which reads its own copy.
    BatchRun single(BatchKind::kStrided, std::vector<GemmShape>(40, GemmShape{20, 30, 41}), Op::kN, Op::kN, 1.0f, 0.0f,
                    false, 18);
    single.request.options.split = SplitMode::kSingle;
    single.share(*e, MatrixId::kB);
    auto s = e->run(single.job());
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    EXPECT_EQ(s->devices.size(), 1u);
    single.expect_all_correct(*s);
  }
}

}  // namespace
}  // namespace sgemm::testing
