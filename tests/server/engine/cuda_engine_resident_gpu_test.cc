// Resident matrices on one GPU (label gpu; skips visibly without one): A, B
// and C named by handle in every combination, read where they live, against
// the fp64 reference; a kept result reused as an operand; a matrix deleted
// while a job uses it stays readable until the job ends.
#include "tests/common/gpu_test.h"
#include "tests/server/engine/engine_test_util.h"
#include "tests/server/engine/resident_test_util.h"

namespace sgemm::testing {
namespace {

TEST(CudaEngineResidentGpu, EveryCombinationOfResidentOperands) {
  SGEMM_REQUIRE_GPUS(1);
  auto e = make_engine(first_gpus(1));
  ASSERT_TRUE(e);
  for (const GemmShape s : {GemmShape{1, 4096, 4096}, GemmShape{1025, 777, 3001}}) {
    Problem p = make_problem(*e, s, 71, /*has_c=*/true, 1.5f, 0.5f);
    auto ra = put_resident(*e, p.a.floats(), s.m, s.k);
    auto rb = put_resident(*e, p.b.floats(), s.k, s.n);
    auto rc = put_resident(*e, p.c0.floats(), s.m, s.n);
    ASSERT_TRUE(ra && rb && rc);
    EXPECT_EQ(layout_of(rb), whole_on(first_gpus(1)[0], s.k));
    for (int mask = 1; mask < 8; ++mask) {
      SCOPED_TRACE("mask " + std::to_string(mask) + " m " + std::to_string(s.m));
      reset_c(p);
      GemmJob j = job_of(p);
      if (mask & 1) j.a_resident = ra.get(), j.a = nullptr;
      if (mask & 2) j.b_resident = rb.get(), j.b = nullptr;
      if (mask & 4) {
        j.c_resident = rc.get();
        std::fill_n(p.c.floats(), s.m * s.n, std::nanf(""));  // the input C must come from the resident one
      }
      CountingSink sink(s.m);
      j.sink = &sink;
      auto r = e->run(j);
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      sink.expect_each_row_once();
      const VerifyResult v = verify(p, /*sample=*/s.m > 64);
      EXPECT_TRUE(v.passed(kSgemmTolerance)) << v.max_rel_error;
      if (mask & 2) {  // B read in place: the copies in are A's rows and C's, nothing of B
        int64_t copied = 0;
        for (const Step& st : r->devices[0].steps)
          if (st.kind == StepKind::kCopyIn) copied += st.bytes;
        EXPECT_EQ(copied, s.m * (s.k + s.n) * 4) << "only A and C are copied in (B is read in place)";
      }
    }
  }
}

TEST(CudaEngineResidentGpu, AKeptResultIsAnOperandAndADeletedMatrixLastsUntilTheJobEnds) {
  SGEMM_REQUIRE_GPUS(1);
  auto e = make_engine(first_gpus(1));
  ASSERT_TRUE(e);
  const GemmShape s{300, 256, 256};
  Problem p = make_problem(*e, s, 73);
  auto rb = put_resident(*e, p.b.floats(), s.k, s.n);
  GemmJob j = job_of(p);
  j.b_resident = rb.get();
  ASSERT_TRUE(e->run(j).ok());
  ASSERT_TRUE(verify(p, false).passed(kSgemmTolerance));
  // C1 becomes resident (as keep_result does), then C2 = C1 * B from handles alone.
  auto c1 = put_resident(*e, p.c.floats(), s.m, s.n);
  std::vector<float> c1_host(p.c.floats(), p.c.floats() + s.m * s.n);
  ASSERT_TRUE(e->resident_store()->remove(rb->handle, "").ok());  // deleted, still pinned: still readable
  GemmJob j2 = job_of(p);
  j2.a_resident = c1.get();
  j2.b_resident = rb.get();
  j2.a = j2.b = nullptr;
  ASSERT_TRUE(e->run(j2).ok());
  const auto v = verify_gemm(s.m, s.n, s.k, 1.0f, c1_host.data(), p.b.floats(), 0.0f, nullptr, p.c.floats());
  EXPECT_TRUE(v.passed(kSgemmTolerance)) << v.max_rel_error;
  const int64_t before = e->resident_store()->in_use_total();
  rb.reset();  // the last holder: its device memory goes now
  EXPECT_EQ(e->resident_store()->in_use_total(), before - s.k * s.n * 4);
}

}  // namespace
}  // namespace sgemm::testing
