// GPU faults through the real server, injected with SGEMM_FAULT_INJECT
// (server/devices/device_health.h): a trapping kernel, a device made to fail,
// a collective left waiting. Each test needs the GPUs it names and skips
// visibly without them (labels gpu, multigpu; scripts/gpu-check.sh faults).
#include <gtest/gtest.h>

#include <cstdlib>

#include "tests/e2e/trust_helpers.h"

namespace sgemm {
namespace {

using testing::multiply_verified;
using testing::ServerProcess;

// A cuda-backend server with SGEMM_FAULT_INJECT=`faults`; null (test skipped)
// when this machine has fewer than `gpus` GPUs.
std::unique_ptr<ServerProcess> start(const std::string& faults, int gpus, std::vector<std::string> flags = {}) {
  setenv("SGEMM_FAULT_INJECT", faults.c_str(), 1);
  const char* was = std::getenv("SGEMM_E2E_BACKEND");
  const std::string backend_before = was ? was : "";
  setenv("SGEMM_E2E_BACKEND", "cuda", 1);  // ServerProcess passes --backend from it
  auto server = std::make_unique<ServerProcess>(flags);
  if (backend_before.empty())
    unsetenv("SGEMM_E2E_BACKEND");
  else
    setenv("SGEMM_E2E_BACKEND", backend_before.c_str(), 1);
  unsetenv("SGEMM_FAULT_INJECT");
  if (!server->running()) {
    // No GPU at all: the cuda backend cannot start (skip); otherwise a server
    // that does not start is a failure, not a skip.
    if (server->log().find("no CUDA device") == std::string::npos &&
        server->log().find("no usable CUDA device") == std::string::npos)
      ADD_FAILURE() << "the server did not start:\n" << server->log();
    return nullptr;
  }
  auto info = Client::connect(server->address())->info();
  if (!info.ok() || int(info->devices.size()) < gpus) return nullptr;
  return server;
}

std::unique_ptr<Client> client_of(const ServerProcess& s) {
  ClientOptions o;
  o.retry.max_attempts = 1;  // the test wants to see each UNAVAILABLE
  return Client::connect(s.address(), o);
}

Status multiply_split(Client& c, SplitMode split, GemmShape s = {1024, 768, 1536}) {
  const uint64_t seed = testing::trust_seed();
  std::vector<float> a(std::size_t(s.m * s.k)), b(std::size_t(s.k * s.n));
  fill_random(a, seed);
  fill_random(b, seed + 1);
  MultiplyOptions opt;
  opt.split = split;
  opt.timeout = std::chrono::milliseconds(60000);
  auto r = c.multiply(s, a.data(), b.data(), nullptr, opt);
  if (!r.ok()) return r.status();
  auto v = verify_gemm(s.m, s.n, s.k, 1.0f, a.data(), b.data(), 0.0f, nullptr, r->c.data(),
                       rows_to_verify(s.m, s.n, s.k, seed));
  EXPECT_TRUE(v.passed(kSgemmTolerance)) << v.max_rel_error;
  return Status::Ok();
}

bool serving(const ServerProcess& s, bool want) {
  for (int i = 0; i < 300; ++i) {  // the service looks every 250 ms at most
    auto h = Client::connect(s.address())->serving();
    if (h.ok() && *h == want) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// A trap is a sticky error: CUDA documents that the process must be restarted
// (on 4 H200s every later call on the other GPUs failed with it too), so the
// server takes every GPU out of service, names the GPU that trapped, and turns
// NOT_SERVING for the orchestrator to restart it; it does not hang.
TEST(GpuFaultE2E, AKernelThatTrapsTakesTheProcessOutOfServiceNamingTheGpu) {
  auto server = start("trap:0", 2);
  if (!server) GTEST_SKIP() << "needs 2 GPUs (cuda backend)";
  auto c = client_of(*server);
  // Single-GPU requests until one lands on GPU 0 and meets the trap.
  Status failed;
  for (int i = 0; i < 8 && failed.ok(); ++i) failed = multiply_split(*c, SplitMode::kSingle);
  ASSERT_EQ(failed.code(), StatusCode::kUnavailable) << failed.to_string();
  EXPECT_NE(failed.message().find("GPU 0"), std::string::npos) << failed.to_string();
  auto info = c->info();
  ASSERT_TRUE(info.ok());
  for (const auto& d : info->devices) {
    EXPECT_TRUE(d.unhealthy);
    EXPECT_NE(d.health_reason.find("sticky CUDA error"), std::string::npos) << d.health_reason;
    EXPECT_NE(d.health_reason.find("GPU 0"), std::string::npos) << d.health_reason;
  }
  const Status after = multiply_split(*c, SplitMode::kAuto);
  EXPECT_EQ(after.code(), StatusCode::kUnavailable) << after.to_string();
  EXPECT_TRUE(serving(*server, false));
  EXPECT_TRUE(server->log_has("marked unhealthy")) << server->log();
}

TEST(GpuFaultE2E, AFailedDeviceFailsItsSplitRequestThenSplitsRunWithoutIt) {
  auto server = start("fail:1", 2);
  if (!server) GTEST_SKIP() << "needs 2 GPUs (cuda backend)";
  auto c = client_of(*server);
  const Status failed = multiply_split(*c, SplitMode::kRows);
  ASSERT_EQ(failed.code(), StatusCode::kUnavailable) << failed.to_string();
  EXPECT_NE(failed.message().find("GPU 1"), std::string::npos) << failed.to_string();
  // Forced splits still run, over the devices left (one GPU here: the whole product on it).
  for (SplitMode m : {SplitMode::kRows, SplitMode::kK, SplitMode::kAuto}) {
    const Status st = multiply_split(*c, m);
    EXPECT_TRUE(st.ok()) << st.to_string();
  }
  EXPECT_TRUE(serving(*server, true));
}

TEST(GpuFaultE2E, ACollectiveLeftWaitingIsAbortedAndTheCommunicatorRebuilt) {
  auto server = start("hang-collective", 2, {"--collective-timeout", "3"});
  if (!server) GTEST_SKIP() << "needs 2 GPUs (cuda backend)";
  auto c = client_of(*server);
  const auto t0 = std::chrono::steady_clock::now();
  const Status hung = multiply_split(*c, SplitMode::kRows);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(hung.code(), StatusCode::kUnavailable) << hung.to_string();
  EXPECT_NE(hung.message().find("--collective-timeout"), std::string::npos) << hung.to_string();
  EXPECT_LT(s, 30.0);
  EXPECT_TRUE(server->log_has("NCCL communicator rebuilt")) << server->log();
  // Both GPUs serve split requests again over the new communicator.
  for (SplitMode m : {SplitMode::kRows, SplitMode::kK}) {
    const Status st = multiply_split(*c, m);
    EXPECT_TRUE(st.ok()) << st.to_string();
  }
  EXPECT_TRUE(serving(*server, true));
}

TEST(GpuFaultE2E, WithItsOnlyGpuGoneTheServerIsNotServing) {
  auto server = start("fail:0", 1, {"--devices", "0"});
  if (!server) GTEST_SKIP() << "needs a GPU (cuda backend)";
  auto c = client_of(*server);
  ASSERT_TRUE(serving(*server, true));
  const Status failed = multiply_split(*c, SplitMode::kAuto);
  ASSERT_EQ(failed.code(), StatusCode::kUnavailable) << failed.to_string();
  EXPECT_NE(failed.message().find("GPU 0"), std::string::npos) << failed.to_string();
  const Status next = multiply_split(*c, SplitMode::kAuto);
  ASSERT_EQ(next.code(), StatusCode::kUnavailable) << next.to_string();
  EXPECT_NE(next.message().find("no healthy GPU left"), std::string::npos) << next.to_string();
  EXPECT_TRUE(serving(*server, false));
}

}  // namespace
}  // namespace sgemm
