// Device buffers (CUDA IPC) on one GPU, end to end: this process allocates
// and exports device memory as a caller does, sgemm-server (another process:
// CUDA does not open a process's own handles) multiplies in it, and every
// result is checked against the fp64 reference on odd shapes with strided
// layouts. Also: handles kept open across requests and released, two tokens
// (an allocation open for one client is refused to another), and the errors
// only a GPU can give (a handle that does not open, an unknown GPU, a matrix
// larger than its allocation). Skips visibly without a GPU.
#include "tests/e2e/device_buffers_gpu.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <optional>

#include "client/sgemm_client.h"
#include "common/reference_gemm.h"
#include "tests/common/gpu_test.h"
#include "tests/e2e/server_process.h"

namespace sgemm {
namespace {

using testing::GpuAllocation;

constexpr const char* kAlice = "alice-device-token-0123456789";
constexpr const char* kBob = "bob-device-token-0123456789ab";

int64_t round_up16(int64_t bytes) { return (bytes + 15) / 16 * 16; }

std::vector<float> random_matrix(int64_t rows, int64_t cols, uint64_t seed) {
  std::vector<float> m(std::size_t(rows * cols));
  fill_random(m, seed);
  return m;
}

void expect_matches(const GemmShape& s, float alpha, const std::vector<float>& a, const std::vector<float>& b,
                    float beta, const std::vector<float>* c0, const std::vector<float>& c) {
  const auto v = verify_gemm(s.m, s.n, s.k, alpha, a.data(), b.data(), beta, c0 ? c0->data() : nullptr, c.data());
  EXPECT_TRUE(v.passed(kSgemmTolerance)) << "max rel error " << v.max_rel_error << " at (" << v.worst_row << ", "
                                         << v.worst_col << ")";
}

class DeviceBuffersGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    SGEMM_REQUIRE_GPUS(1);
    dir_ = testing::make_temp_dir();
    const std::string tokens = dir_ + "/tokens.json";
    std::ofstream(tokens) << R"({"clients": [{"name": "alice", "token": ")" << kAlice
                          << R"("}, {"name": "bob", "token": ")" << kBob << R"("}]})";
    // The backend is SGEMM_E2E_BACKEND's, else auto: the GPUs here.
    server_.emplace(std::vector<std::string>{"--auth-tokens", tokens});
    ASSERT_TRUE(server_->running()) << server_->log();
  }
  void TearDown() override {
    if (server_) {
      EXPECT_EQ(server_->stop(), 0) << server_->log();
    }
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }
  std::unique_ptr<Client> client(const char* token = kAlice) {
    ClientOptions o;
    o.token = token;
    o.retry.max_attempts = 1;
    return Client::connect(server_->unix_address(), o);
  }
  std::string dir_;
  std::optional<testing::ServerProcess> server_;
};

TEST_F(DeviceBuffersGpu, OddShapesStridedLayoutsAndCInPlace) {
  const GemmShape s{257, 129, 67};
  const int64_t lda = s.k + 3, ldb = s.n, ldc = s.n + 5;  // A and C padded, lda not a multiple of 4
  const auto a = random_matrix(s.m, s.k, 1), b = random_matrix(s.k, s.n, 2), c0 = random_matrix(s.m, s.n, 3);
  // A and B share one allocation (B after A, 16-byte aligned); C has its own.
  const int64_t a_off = 64, b_off = a_off + round_up16(4 * s.m * lda);
  GpuAllocation ab(0, b_off + 4 * s.k * ldb + 4096);
  GpuAllocation c(0, 256 + 4 * s.m * ldc);
  ab.put(a, s.m, s.k, a_off, lda);
  ab.put(b, s.k, s.n, b_off, ldb);
  c.put(c0, s.m, s.n, 256, ldc);
  MultiplyOptions o;
  o.alpha = 1.5f;
  o.beta = -0.5f;
  auto r = client()->multiply_device(s, ab.at(a_off, lda), ab.at(b_off, ldb), c.at(256, ldc), c.at(256, ldc), o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(r->c.empty()) << "C was written into the device buffer: nothing comes back";
  EXPECT_EQ(r->bytes_received, 0);
  ASSERT_EQ(r->summary.devices.size(), 1u);
  EXPECT_GT(r->summary.devices[0].kernel_ms, 0);
  EXPECT_EQ(r->summary.devices[0].copy_in_ms, 0) << "single GPU: read in place, no copy";
  EXPECT_NE(r->summary.plan_reason.find("device buffers"), std::string::npos) << r->summary.plan_reason;
  expect_matches(s, o.alpha, a, b, o.beta, &c0, c.get(s.m, s.n, 256, ldc));
  EXPECT_TRUE(c.only_matrix_written(s.m, s.n, 256, ldc)) << "the padding between C's rows was written";
}

TEST_F(DeviceBuffersGpu, CBackAsChunksAndGpuNamedByUuid) {
  const GemmShape s{129, 65, 257};
  const auto a = random_matrix(s.m, s.k, 4), b = random_matrix(s.k, s.n, 5);
  GpuAllocation da(0, 4 * s.m * s.k), db(0, 4 * s.k * s.n);
  da.put(a, s.m, s.k, 0, s.k);
  db.put(b, s.k, s.n, 0, s.n);
  auto r = client()->multiply_device(s, da.at(0, 0, /*by_uuid=*/true), db.at(0, 0), std::nullopt, std::nullopt, {});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->c.size(), std::size_t(s.m * s.n));
  expect_matches(s, 1.0f, a, b, 0.0f, nullptr, r->c);
}

TEST_F(DeviceBuffersGpu, HandlesStayOpenAcrossRequestsUntilReleased) {
  const GemmShape s{63, 33, 17};
  const auto a = random_matrix(s.m, s.k, 6), b = random_matrix(s.k, s.n, 7);
  GpuAllocation da(0, 4 * s.m * s.k), db(0, 4 * s.k * s.n), dc(0, 4 * s.m * s.n);
  da.put(a, s.m, s.k, 0, s.k);
  db.put(b, s.k, s.n, 0, s.n);
  auto cl = client();
  for (int i = 0; i < 3; ++i) {
    DeviceBufferMatrix out = dc.at(0, 0);
    out.release = i == 1;  // the second request lets the server close it; the third opens it again
    auto r = cl->multiply_device(s, da.at(0, 0), db.at(0, 0), std::nullopt, out, {});
    ASSERT_TRUE(r.ok()) << "request " << i << ": " << r.status().to_string();
    expect_matches(s, 1.0f, a, b, 0.0f, nullptr, dc.get(s.m, s.n, 0, s.n));
  }
}

TEST_F(DeviceBuffersGpu, AnAllocationOpenForOneClientIsRefusedToAnother) {
  const GemmShape s{31, 17, 9};
  const auto a = random_matrix(s.m, s.k, 8), b = random_matrix(s.k, s.n, 9);
  GpuAllocation da(0, 4 * s.m * s.k), db(0, 4 * s.k * s.n), dc(0, 4 * s.m * s.n);
  da.put(a, s.m, s.k, 0, s.k);
  db.put(b, s.k, s.n, 0, s.n);
  auto alice = client(kAlice);
  auto mine = alice->multiply_device(s, da.at(0, 0), db.at(0, 0), std::nullopt, dc.at(0, 0), {});
  ASSERT_TRUE(mine.ok()) << mine.status().to_string();
  expect_matches(s, 1.0f, a, b, 0.0f, nullptr, dc.get(s.m, s.n, 0, s.n));
  // Bob names Alice's A (same socket, same uid, another token).
  GpuAllocation bob_b(0, 4 * s.k * s.n), bob_c(0, 4 * s.m * s.n);
  bob_b.put(b, s.k, s.n, 0, s.n);
  auto theirs = client(kBob)->multiply_device(s, da.at(0, 0), bob_b.at(0, 0), std::nullopt, bob_c.at(0, 0), {});
  EXPECT_EQ(theirs.status().code(), StatusCode::kPermissionDenied) << theirs.status().to_string();
  EXPECT_NE(theirs.status().message().find("header.a_device.ipc_handle"), std::string::npos)
      << theirs.status().message();
  EXPECT_TRUE(bob_c.only_matrix_written(0, 0, 0, 1)) << "nothing was written for the refused request";
  // Alice is still served.
  EXPECT_TRUE(alice->multiply_device(s, da.at(0, 0), db.at(0, 0), std::nullopt, dc.at(0, 0), {}).ok());
}

TEST_F(DeviceBuffersGpu, ErrorsOnlyAGpuCanGiveNameTheField) {
  const GemmShape s{33, 17, 9};
  GpuAllocation da(0, 4 * s.m * s.k), db(0, 4 * s.k * s.n), small(0, 1 << 20);
  auto cl = client();
  DeviceBufferMatrix junk = da.at(0, 0);
  junk.ipc_handle = std::string(64, '\x5a');
  auto r = cl->multiply_device(s, junk, db.at(0, 0), std::nullopt, std::nullopt, {});
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().to_string();
  EXPECT_NE(r.status().message().find("header.a_device.ipc_handle does not open"), std::string::npos)
      << r.status().message();
  DeviceBufferMatrix nowhere = db.at(0, 0);
  nowhere.device = "GPU-00000000-0000-0000-0000-000000000000";
  r = cl->multiply_device(s, da.at(0, 0), nowhere, std::nullopt, std::nullopt, {});
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().to_string();
  EXPECT_NE(r.status().message().find("header.b_device.device"), std::string::npos) << r.status().message();
  // A 1024 x 1024 C (4 MiB) does not fit a 1 MiB allocation.
  GpuAllocation wide_a(0, 4 * 1024 * 9), wide_b(0, 4 * 9 * 1024);
  r = cl->multiply_device({1024, 1024, 9}, wide_a.at(0, 0), wide_b.at(0, 0), std::nullopt, small.at(0, 0), {});
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().to_string();
  EXPECT_NE(r.status().message().find("header.out_device"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("overruns"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace sgemm
