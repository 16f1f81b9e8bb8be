// The CUDA engine on operands in device memory (GemmJob::device; labels gpu
// and multigpu): the engine's half of device buffers without CUDA IPC, over
// memory this process allocated (the e2e suites add the IPC). Odd shapes with
// leading dimensions wider than their rows, C in place with beta != 0, C into
// host memory through the sink; over two GPUs a named row split and K split
// with everything on GPU 0, and operands on different GPUs. Each result
// against the fp64 reference; padding between C's rows left alone.
#include <cuda_runtime_api.h>

#include "tests/common/gpu_test.h"
#include "tests/server/engine/engine_test_util.h"

namespace sgemm::testing {
namespace {

constexpr float kSentinel = -777.0f;

// cudaMalloc'd memory standing where an IPC mapping stands in the server.
class LocalDeviceMemory final : public OpenedDeviceMemory {
 public:
  LocalDeviceMemory(int device, int64_t bytes) : device_(device), bytes_(bytes) {
    EXPECT_EQ(cudaSetDevice(device), cudaSuccess);
    EXPECT_EQ(cudaMalloc(&ptr_, std::size_t(bytes)), cudaSuccess);
    std::vector<float> fill(std::size_t(bytes / 4), kSentinel);
    EXPECT_EQ(cudaMemcpy(ptr_, fill.data(), fill.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~LocalDeviceMemory() override {
    cudaSetDevice(device_);
    cudaFree(ptr_);
  }
  int device() const override { return device_; }
  std::byte* base() const override { return static_cast<std::byte*>(ptr_); }
  int64_t bytes() const override { return bytes_; }

 private:
  int device_;
  int64_t bytes_;
  void* ptr_ = nullptr;
};

// A rows x cols matrix with leading dimension ld at byte `offset` of fresh device memory on `device`.
DeviceMatrix place(int device, const std::vector<float>& dense, int64_t rows, int64_t cols, int64_t ld,
                   int64_t offset = 0) {
  auto mem = std::make_shared<LocalDeviceMemory>(device, offset + 4 * rows * ld);
  EXPECT_EQ(cudaMemcpy2D(mem->base() + offset, std::size_t(ld) * 4, dense.data(), std::size_t(cols) * 4,
                         std::size_t(cols) * 4, std::size_t(rows), cudaMemcpyHostToDevice),
            cudaSuccess);
  return DeviceMatrix{std::move(mem), offset, ld};
}

std::vector<float> fetch(const DeviceMatrix& x, int64_t rows, int64_t cols, bool* padding_ok) {
  std::vector<float> all(std::size_t(x.memory->bytes() / 4));
  EXPECT_EQ(cudaSetDevice(x.device()), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(all.data(), x.memory->base(), all.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  std::vector<float> dense(std::size_t(rows * cols));
  *padding_ok = true;
  const int64_t first = x.offset / 4;
  for (int64_t e = 0; e < int64_t(all.size()); ++e) {
    const int64_t rel = e - first;
    if (rel >= 0 && rel / x.ld < rows && rel % x.ld < cols)
      dense[std::size_t(rel / x.ld * cols + rel % x.ld)] = all[std::size_t(e)];
    else if (all[std::size_t(e)] != kSentinel)
      *padding_ok = false;
  }
  return dense;
}

struct Case {
  GemmShape s;
  SplitMode split = SplitMode::kAuto;
  int a_device = 0, b_device = 0, c_device = 0;
  bool out_on_gpu = true;
};

void run_case(Engine& e, const Case& cs, uint64_t seed) {
  const GemmShape& s = cs.s;
  std::vector<float> a(std::size_t(s.m * s.k)), b(std::size_t(s.k * s.n)), c0(std::size_t(s.m * s.n));
  fill_random(a, seed);
  fill_random(b, seed + 1);
  fill_random(c0, seed + 2);
  DeviceOperands ops;
  ops.a = place(cs.a_device, a, s.m, s.k, s.k + 3, 64);  // ld not a multiple of 4, offset 16-byte aligned
  ops.b = place(cs.b_device, b, s.k, s.n, s.n);
  ops.c = place(cs.c_device, c0, s.m, s.n, s.n + 5, 4);  // offset not 16-byte aligned
  if (cs.out_on_gpu) ops.out = ops.c;                    // C in place
  GemmJob job;
  job.request.shape = s;
  job.request.alpha = 1.25f;
  job.request.beta = -0.5f;
  job.request.has_c = true;
  job.request.options.split = cs.split;
  ASSERT_TRUE(e.validate(job.request).ok());
  job.device = &ops;
  std::vector<float> host_c(std::size_t(s.m * s.n), std::nanf(""));
  CountingSink sink(s.m);
  if (!cs.out_on_gpu) {
    job.c = host_c.data();
    job.sink = &sink;
  }
  auto r = e.run(job);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->backend, "cuda");
  EXPECT_NE(r->plan_reason.find("device buffers"), std::string::npos) << r->plan_reason;
  if (cs.split == SplitMode::kRows || cs.split == SplitMode::kK) {
    EXPECT_EQ(r->split, cs.split) << r->plan_reason;
    EXPECT_GE(r->devices.size(), 2u);
  }
  std::vector<float> got = host_c;
  if (cs.out_on_gpu) {
    bool padding_ok = false;
    got = fetch(*ops.out, s.m, s.n, &padding_ok);
    EXPECT_TRUE(padding_ok) << "the engine wrote outside C's elements";
  } else {
    sink.expect_each_row_once();
  }
  const VerifyResult v = verify_gemm(s.m, s.n, s.k, 1.25f, a.data(), b.data(), -0.5f, c0.data(), got.data());
  EXPECT_TRUE(v.passed(kSgemmTolerance)) << v.max_rel_error << " at " << v.worst_row << "," << v.worst_col;
}

TEST(CudaEngineDeviceBuffersGpu, OddShapesStridedCInPlaceOrToHost) {
  SGEMM_REQUIRE_GPUS(1);
  auto e = make_engine({0});
  ASSERT_TRUE(e);
  for (const GemmShape& s : {GemmShape{1, 1, 1}, GemmShape{257, 129, 67}, GemmShape{1025, 777, 3001}})
    for (bool out_on_gpu : {true, false}) {
      SCOPED_TRACE(std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k) +
                   (out_on_gpu ? " into device C" : " into host C"));
      run_case(*e, Case{s, SplitMode::kAuto, 0, 0, 0, out_on_gpu}, 17 + uint64_t(s.m));
    }
}

TEST(CudaEngineDeviceBuffersGpu, NamedSplitsOverTwoGpus) {
  SGEMM_REQUIRE_GPUS(2);
  auto e = make_engine({0, 1});
  ASSERT_TRUE(e);
  for (SplitMode mode : {SplitMode::kRows, SplitMode::kK})
    for (bool out_on_gpu : {true, false}) {
      SCOPED_TRACE(std::string(split_mode_name(mode)) + (out_on_gpu ? " into device C" : " into host C"));
      run_case(*e, Case{{1031, 517, 2053}, mode, 0, 0, 0, out_on_gpu}, 71);
    }
}

TEST(CudaEngineDeviceBuffersGpu, OperandsOnDifferentGpus) {
  SGEMM_REQUIRE_GPUS(2);
  auto e = make_engine({0, 1});
  ASSERT_TRUE(e);
  run_case(*e, Case{{301, 127, 99}, SplitMode::kAuto, 1, 0, 0, true}, 5);   // A comes from GPU 1
  run_case(*e, Case{{301, 127, 99}, SplitMode::kAuto, 0, 1, 1, true}, 6);   // computed on GPU 1, A from GPU 0
  run_case(*e, Case{{301, 127, 99}, SplitMode::kAuto, 0, 0, 1, false}, 7);  // C in on GPU 1, C out to host
}

}  // namespace
}  // namespace sgemm::testing
