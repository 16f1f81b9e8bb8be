// The registry row on the GPU (label gpu; skips without one): each backend's
// kernel_name() is the name of the row the planner's select_kernel_row returns for
// the engine's layout, and a launcher or backend given that row computes bit for bit
// what the launcher or backend without one computes.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/kernel_registry.h"
#include "kernels/backend_factories.h"
#include "kernels/gemm_backend.h"
#include "kernels/pingpong_sgemm.h"
#include "server/planner/kernel_choice.h"
#include "tests/common/gpu_test.h"

namespace sgemm {
namespace {

int64_t pad4(int64_t v) { return (v + 3) / 4 * 4; }

// Device memory holding a copy of `host`, freed on scope exit.
struct DeviceFloats {
  float* p = nullptr;
  explicit DeviceFloats(const std::vector<float>& host) {
    if (host.empty()) return;
    if (cudaMalloc(reinterpret_cast<void**>(&p), host.size() * sizeof(float)) != cudaSuccess ||
        cudaMemcpy(p, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess) {
      cudaFree(p);
      p = nullptr;
    }
  }
  ~DeviceFloats() { cudaFree(p); }
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;
  bool ok() const { return p != nullptr; }
};

int device_sm_count() {
  int device = 0, sms = 0;
  EXPECT_EQ(cudaGetDevice(&device), cudaSuccess);
  EXPECT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), cudaSuccess);
  return sms;
}

const std::vector<GemmShape> kShapes = {{1, 4096, 4096},    {4096, 1, 4096},    {4096, 4096, 4096}, {1024, 1024, 16384},
                                        {8192, 96, 8192},   {2560, 2560, 2560}, {777, 555, 333},    {64, 8192, 8192},
                                        {8191, 2047, 4096}, {512, 512, 8192}};

TEST(KernelRowNames, BackendsNameTheRowThePlannerSelects) {
  SGEMM_REQUIRE_GPUS(1);
  const int sms = device_sm_count();
  const float* const a = reinterpret_cast<const float*>(uintptr_t{0x10000});
  float* const c = reinterpret_cast<float*>(uintptr_t{0x30000});
  for (KernelKind kind : {KernelKind::kPingpong, KernelKind::kCublas, KernelKind::kTf32, KernelKind::kFp32x3}) {
    StatusOr<std::unique_ptr<GemmBackend>> be = make_gemm_backend(kind);
    if (!be.ok()) continue;  // fp32x3 off Hopper
    for (const GemmShape& s : kShapes) {
      // The engine's staging: 16-byte aligned, rows padded to 16 bytes (KernelLayout's default).
      const GemmArgs g{s, 1.0f, 0.0f, a, pad4(s.k), a, pad4(s.n), c, pad4(s.n)};
      KernelQuery q;
      q.shape = s;
      q.precision = kernel_arithmetic(kind) == ArithmeticClass::kTf32     ? Precision::kTf32
                    : kernel_arithmetic(kind) == ArithmeticClass::kFp32x3 ? Precision::kFp32x3
                                                                          : Precision::kFp32Ffma;
      if (q.precision == Precision::kFp32Ffma) q.named = kind;
      q.available = {kind};
      q.sm_count = sms;
      StatusOr<KernelRowSelection> sel = select_kernel_row(q);
      ASSERT_TRUE(sel.ok()) << sel.status().to_string();
      EXPECT_EQ((*be)->kernel_name(g), sel->pick.name()) << gemm_shape_text(s);
      EXPECT_EQ((*be)->row(g).row, sel->pick.row) << gemm_shape_text(s);
      EXPECT_EQ((*be)->row(g).k_slices, sel->pick.k_slices) << gemm_shape_text(s);
    }
  }
}

TEST(KernelRowNames, TheChosenVariantComputesWhatTheLauncherWithoutARowComputes) {
  SGEMM_REQUIRE_GPUS(1);
  const int sms = device_sm_count();
  for (const GemmShape& s : {GemmShape{1, 3000, 2048}, GemmShape{777, 555, 333}, GemmShape{300, 96, 4096},
                             GemmShape{512, 512, 8192}, GemmShape{1500, 1500, 2048}}) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> ha(size_t(s.m * s.k)), hb(size_t(s.k * s.n)), hc(size_t(s.m * s.n));
    for (float& x : ha) x = u(rng);
    for (float& x : hb) x = u(rng);
    for (float& x : hc) x = u(rng);
    DeviceFloats da(ha), db(hb), dc1(hc), dc2(hc);
    ASSERT_TRUE(da.ok() && db.ok() && dc1.ok() && dc2.ok());
    const GemmArgs g1 = dense_gemm_args(s, 1.5f, da.p, db.p, 0.5f, dc1.p);
    const GemmArgs g2 = dense_gemm_args(s, 1.5f, da.p, db.p, 0.5f, dc2.p);
    const KernelPick pick = select_kernel_row_of(KernelKind::kPingpong, s, kernel_layout(g1), sms);
    const std::size_t ws_bytes =
        std::max(pingpong_workspace_bytes(g1), pingpong_variant_workspace_bytes(s, pick.row->variant));
    DeviceFloats workspace(std::vector<float>((ws_bytes + 3) / 4));
    void* ws = ws_bytes > 0 ? workspace.p : nullptr;
    ASSERT_TRUE(pingpong_sgemm(g1, ws, ws_bytes, nullptr).ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_TRUE(pingpong_sgemm_variant(g2, pick.row->variant, ws, ws_bytes, nullptr).ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<float> r1(hc.size()), r2(hc.size());
    ASSERT_EQ(cudaMemcpy(r1.data(), dc1.p, r1.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(r2.data(), dc2.p, r2.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(std::memcmp(r1.data(), r2.data(), r1.size() * 4), 0) << pick.name() << " at " << gemm_shape_text(s);
  }
}

// run_row with the planner's row computes what run() computes, for every GPU family;
// a row of another family is refused, naming `kernel`.
TEST(KernelRowNames, RunRowMatchesRunBitForBit) {
  SGEMM_REQUIRE_GPUS(1);
  const GemmShape s{640, 520, 4096};
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> ha(size_t(s.m * s.k)), hb(size_t(s.k * s.n)), hc(size_t(s.m * s.n));
  for (float& x : ha) x = u(rng);
  for (float& x : hb) x = u(rng);
  for (float& x : hc) x = u(rng);
  DeviceFloats da(ha), db(hb);
  ASSERT_TRUE(da.ok() && db.ok());
  for (KernelKind kind : {KernelKind::kPingpong, KernelKind::kCublas, KernelKind::kTf32, KernelKind::kFp32x3}) {
    StatusOr<std::unique_ptr<GemmBackend>> be = make_gemm_backend(kind);
    if (!be.ok()) continue;  // fp32x3 off Hopper
    DeviceFloats dc1(hc), dc2(hc);
    ASSERT_TRUE(dc1.ok() && dc2.ok());
    const GemmArgs g1 = dense_gemm_args(s, 1.0f, da.p, db.p, 0.25f, dc1.p);
    const GemmArgs g2 = dense_gemm_args(s, 1.0f, da.p, db.p, 0.25f, dc2.p);
    const KernelPick pick = (*be)->row(g1);
    const std::size_t ws_bytes = std::max((*be)->workspace_bytes(g1), (*be)->row_workspace_bytes(pick, g2));
    DeviceFloats workspace(std::vector<float>((ws_bytes + 3) / 4));
    void* ws = ws_bytes > 0 ? workspace.p : nullptr;
    ASSERT_TRUE((*be)->run(g1, ws, ws_bytes, nullptr).ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_TRUE((*be)->run_row(pick, g2, ws, ws_bytes, nullptr).ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<float> r1(hc.size()), r2(hc.size());
    ASSERT_EQ(cudaMemcpy(r1.data(), dc1.p, r1.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(r2.data(), dc2.p, r2.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(std::memcmp(r1.data(), r2.data(), r1.size() * 4), 0) << pick.name();
    const KernelKind other = kind == KernelKind::kCublas ? KernelKind::kPingpong : KernelKind::kCublas;
    const Status refused =
        (*be)->run_row(select_kernel_row_of(other, s, KernelLayout{}, 132), g2, ws, ws_bytes, nullptr);
    EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(refused.message().find("kernel"), std::string::npos) << refused.message();
  }
}

}  // namespace
}  // namespace sgemm
