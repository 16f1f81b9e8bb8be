// The CUDA engine on host memory it did not allocate (label gpu): a
// MAP_SHARED mapping, as a shared-memory region is, registered with
// Engine::register_host_memory (cudaHostRegister, portable), matrices with
// leading dimensions wider than their rows, C in place with beta != 0, every
// strategy the visible GPUs can run. Then unregistered.
#include <cuda_runtime_api.h>
#include <sys/mman.h>

#include "tests/common/gpu_test.h"
#include "tests/server/engine/engine_test_util.h"

namespace sgemm::testing {
namespace {

class SharedMapping {
 public:
  explicit SharedMapping(std::size_t bytes) : bytes_(bytes) {
    p_ = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p_ == MAP_FAILED) p_ = nullptr;
  }
  ~SharedMapping() {
    if (p_) munmap(p_, bytes_);
  }
  float* floats() const { return static_cast<float*>(p_); }
  std::size_t bytes() const { return bytes_; }

 private:
  void* p_ = nullptr;
  std::size_t bytes_;
};

void run_strided(Engine& e, const GemmShape& s, SplitMode mode, int64_t pad, uint64_t seed) {
  const int64_t lda = s.k + pad, ldb = s.n + pad + 1, ldc = s.n + 2 * pad + 3;
  const int64_t a_el = s.m * lda, b_el = s.k * ldb, c_el = s.m * ldc;
  SharedMapping map(std::size_t(a_el + b_el + c_el) * sizeof(float) + 4096);
  ASSERT_TRUE(map.floats());
  ASSERT_TRUE(e.register_host_memory(map.floats(), map.bytes()).ok());
  unsigned int flags = 0;
  EXPECT_EQ(cudaHostGetFlags(&flags, map.floats()), cudaSuccess) << "the mapping is not page-locked";
  float* a = map.floats() + 7;  // not page-aligned inside the region: offsets are any multiple of 4 bytes
  float* b = a + a_el;
  float* c = b + b_el;
  std::vector<float> da(std::size_t(s.m * s.k)), db(std::size_t(s.k * s.n)), dc0(std::size_t(s.m * s.n));
  fill_random(da, seed);
  fill_random(db, seed + 1);
  fill_random(dc0, seed + 2);
  const float sentinel = -777.0f;
  for (int64_t i = 0; i < s.m; ++i)
    for (int64_t j = 0; j < lda; ++j) a[i * lda + j] = j < s.k ? da[std::size_t(i * s.k + j)] : sentinel;
  for (int64_t i = 0; i < s.k; ++i)
    for (int64_t j = 0; j < ldb; ++j) b[i * ldb + j] = j < s.n ? db[std::size_t(i * s.n + j)] : sentinel;
  for (int64_t i = 0; i < s.m; ++i)
    for (int64_t j = 0; j < ldc; ++j) c[i * ldc + j] = j < s.n ? dc0[std::size_t(i * s.n + j)] : sentinel;
  GemmJob job;
  job.request.shape = s;
  job.request.alpha = 1.25f;
  job.request.beta = -0.5f;
  job.request.has_c = true;
  job.request.options.split = mode;
  ASSERT_TRUE(e.validate(job.request).ok());
  job.a = a;
  job.b = b;
  job.c = c;
  job.lda = lda;
  job.ldb = ldb;
  job.ldc = ldc;
  auto r = e.run(job);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  std::vector<float> got(std::size_t(s.m * s.n));
  bool padding_ok = true;
  for (int64_t i = 0; i < s.m; ++i)
    for (int64_t j = 0; j < ldc; ++j) {
      if (j < s.n)
        got[std::size_t(i * s.n + j)] = c[i * ldc + j];
      else if (c[i * ldc + j] != sentinel)
        padding_ok = false;
    }
  EXPECT_TRUE(padding_ok) << "the engine wrote into C's padding";
  const auto rows = rows_to_verify(s.m, s.n, s.k, seed);
  const VerifyResult v = verify_gemm(s.m, s.n, s.k, 1.25f, da.data(), db.data(), -0.5f, dc0.data(), got.data(), rows);
  EXPECT_TRUE(v.passed(kSgemmTolerance)) << v.max_rel_error << " at " << v.worst_row << "," << v.worst_col;
  EXPECT_TRUE(e.unregister_host_memory(map.floats()).ok());
}

TEST(CudaEngineRegionGpu, RegisteredSharedMappingWithLeadingDimensionsAndCInPlace) {
  SGEMM_REQUIRE_GPUS(1);
  auto e = make_engine({0});
  ASSERT_TRUE(e);
  for (GemmShape s :
       {GemmShape{1, 1, 1}, GemmShape{1025, 777, 3001}, GemmShape{513, 1, 64}, GemmShape{2048, 2048, 2048}})
    for (SplitMode mode : {SplitMode::kSingle, SplitMode::kK}) {
      SCOPED_TRACE(std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k) + " " +
                   std::string(split_mode_name(mode)));
      run_strided(*e, s, mode, 5, 1234 + uint64_t(s.m));
    }
}

TEST(CudaEngineRegionGpu, EveryDeviceUsesOneRegistration) {
  SGEMM_REQUIRE_GPUS(2);
  std::vector<int> all;
  for (int i = 0; i < cuda_device_count(); ++i) all.push_back(i);
  auto e = make_engine(all);
  ASSERT_TRUE(e);
  for (SplitMode mode : {SplitMode::kRows, SplitMode::kK}) {
    SCOPED_TRACE(split_mode_name(mode));
    run_strided(*e, {1537, 1029, 2049}, mode, 3, 99);
  }
}

TEST(CudaEngineRegionGpu, RegisteringTwiceIsRefusedCleanly) {
  SGEMM_REQUIRE_GPUS(1);
  auto e = make_engine({0});
  ASSERT_TRUE(e);
  SharedMapping map(1 << 20);
  ASSERT_TRUE(e->register_host_memory(map.floats(), map.bytes()).ok());
  EXPECT_EQ(e->register_host_memory(map.floats(), map.bytes()).code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(e->unregister_host_memory(map.floats()).ok());
  // The sticky error is cleared: the engine still runs.
  Problem p = make_problem(*e, {64, 64, 64}, 5);
  auto r = e->run(job_of(p, SplitMode::kSingle, KernelKind::kPingpong));
  EXPECT_TRUE(r.ok()) << r.status().to_string();
}

}  // namespace
}  // namespace sgemm::testing
