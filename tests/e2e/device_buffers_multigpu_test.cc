// Device buffers (CUDA IPC) over two GPUs, end to end: the caller's A, B and C
// on GPU 0, a named row split or K split moves the other GPU's shards GPU to
// GPU and writes C back into the caller's buffer; operands on different GPUs
// for one product. Checked against the fp64 reference on odd shapes. Skips
// visibly with fewer than two GPUs.
#include <gtest/gtest.h>

#include <optional>

#include "client/sgemm_client.h"
#include "common/reference_gemm.h"
#include "tests/common/gpu_test.h"
#include "tests/e2e/device_buffers_gpu.h"
#include "tests/e2e/server_process.h"

namespace sgemm {
namespace {

using testing::GpuAllocation;

std::vector<float> random_matrix(int64_t rows, int64_t cols, uint64_t seed) {
  std::vector<float> m(std::size_t(rows * cols));
  fill_random(m, seed);
  return m;
}

class DeviceBuffersMultiGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    SGEMM_REQUIRE_GPUS(2);
    server_.emplace();
    ASSERT_TRUE(server_->running()) << server_->log();
  }
  void TearDown() override {
    if (server_) {
      EXPECT_EQ(server_->stop(), 0) << server_->log();
    }
  }
  std::unique_ptr<Client> client() {
    ClientOptions o;
    o.retry.max_attempts = 1;
    return Client::connect(server_->unix_address(), o);
  }
  // C = alpha*A*B + beta*C0 with everything on GPU 0 under `split`, C written
  // into a strided output (or back as chunks), checked against fp64.
  void run_split(SplitMode split, const GemmShape& s, bool out_on_gpu) {
    const int64_t ldc = s.n + 3;
    const auto a = random_matrix(s.m, s.k, 11), b = random_matrix(s.k, s.n, 12), c0 = random_matrix(s.m, s.n, 13);
    GpuAllocation da(0, 4 * s.m * s.k), db(0, 4 * s.k * s.n), dc(0, 4 * s.m * ldc);
    da.put(a, s.m, s.k, 0, s.k);
    db.put(b, s.k, s.n, 0, s.n);
    dc.put(c0, s.m, s.n, 0, ldc);
    MultiplyOptions o;
    o.split = split;
    o.alpha = 0.75f;
    o.beta = 1.25f;
    std::optional<DeviceBufferMatrix> out;
    if (out_on_gpu) out = dc.at(0, ldc);
    auto r = client()->multiply_device(s, da.at(0, 0), db.at(0, 0), dc.at(0, ldc), out, o);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->summary.split, split == SplitMode::kRows ? "rows" : "k") << r->summary.plan_reason;
    EXPECT_GE(r->summary.devices.size(), 2u);
    for (const auto& d : r->summary.devices) EXPECT_GT(d.kernel_ms, 0) << "GPU " << d.index << " computed nothing";
    const std::vector<float> c = out_on_gpu ? dc.get(s.m, s.n, 0, ldc) : r->c;
    const auto v = verify_gemm(s.m, s.n, s.k, o.alpha, a.data(), b.data(), o.beta, c0.data(), c.data());
    EXPECT_TRUE(v.passed(kSgemmTolerance))
        << "max rel error " << v.max_rel_error << " at (" << v.worst_row << ", " << v.worst_col << ")";
    if (out_on_gpu) {
      EXPECT_TRUE(dc.only_matrix_written(s.m, s.n, 0, ldc)) << "the padding of C's rows was written";
    }
  }
  std::optional<testing::ServerProcess> server_;
};

TEST_F(DeviceBuffersMultiGpu, RowSplitWritesIntoTheCallersBuffer) {
  run_split(SplitMode::kRows, {1031, 517, 263}, true);
}

TEST_F(DeviceBuffersMultiGpu, KSplitSumsIntoTheCallersBuffer) { run_split(SplitMode::kK, {263, 517, 2053}, true); }

TEST_F(DeviceBuffersMultiGpu, KSplitWithCBackAsChunks) { run_split(SplitMode::kK, {129, 65, 1025}, false); }

TEST_F(DeviceBuffersMultiGpu, OperandsOnDifferentGpus) {
  // A on GPU 1, B and C on GPU 0: computed on C's GPU, A brought over peer to peer.
  const GemmShape s{301, 127, 99};
  const auto a = random_matrix(s.m, s.k, 21), b = random_matrix(s.k, s.n, 22);
  GpuAllocation da(1, 4 * s.m * (s.k + 1)), db(0, 4 * s.k * s.n), dc(0, 4 * s.m * s.n);
  da.put(a, s.m, s.k, 0, s.k + 1);
  db.put(b, s.k, s.n, 0, s.n);
  auto r = client()->multiply_device(s, da.at(0, s.k + 1), db.at(0, 0), std::nullopt, dc.at(0, 0), {});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->summary.devices.size(), 1u);
  EXPECT_GT(r->summary.devices[0].copy_in_ms, 0) << "A came from the other GPU";
  const auto v = verify_gemm(s.m, s.n, s.k, 1.0f, a.data(), b.data(), 0.0f, nullptr, dc.get(s.m, s.n, 0, s.n).data());
  EXPECT_TRUE(v.passed(kSgemmTolerance)) << "max rel error " << v.max_rel_error;
}

}  // namespace
}  // namespace sgemm
