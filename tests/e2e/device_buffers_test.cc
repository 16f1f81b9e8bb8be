// End to end, device buffers (CUDA IPC) where no GPU is needed: the real
// server in process on a Unix socket and TCP, the real client library. A
// header naming device buffers is refused with the field at fault: over TCP
// (FAILED_PRECONDITION), on the cpu backend (FAILED_PRECONDITION), with a
// malformed ref (INVALID_ARGUMENT, before anything is opened); with tokens the
// token is checked first; the CLI's cuda-ipc path without a GPU says why.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "client/sgemm_client.h"
#include "tests/e2e/in_process_server.h"

namespace sgemm {
namespace {

using testing::InProcessServer;

class DeviceBuffersE2E : public testing::SuiteServer<DeviceBuffersE2E> {};

DeviceBufferMatrix buffer(std::string handle = std::string(64, '\x01')) {
  return DeviceBufferMatrix{std::move(handle), "0000:00:00.0", 0, 0, false};
}

void expect_status(const StatusOr<MultiplyResult>& r, StatusCode code, const std::string& names) {
  EXPECT_EQ(r.status().code(), code) << r.status().to_string();
  EXPECT_NE(r.status().message().find(names), std::string::npos) << r.status().message();
}

TEST_F(DeviceBuffersE2E, OverTcpIsRefusedNamingTheField) {
  ClientOptions o;
  o.transport = Transport::kGrpc;
  auto remote = Client::connect(server_->tcp_address(), o);
  const auto r = remote->multiply_device({9, 7, 5}, buffer(), buffer(), std::nullopt, buffer(), {});
  expect_status(r, StatusCode::kFailedPrecondition, "header.a_device");
  EXPECT_NE(r.status().message().find("Unix socket"), std::string::npos) << r.status().message();
}

TEST_F(DeviceBuffersE2E, TheCpuBackendRefusesThem) {
  auto client = Client::connect(server_->unix_address());
  auto info = client->info();
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  if (info->backend != "cpu")
    GTEST_SKIP() << "the server runs the " << info->backend << " backend (gpu tests cover it)";
  const auto r = client->multiply_device({9, 7, 5}, buffer(), buffer(), std::nullopt, std::nullopt, {});
  expect_status(r, StatusCode::kFailedPrecondition, "device buffers need the cuda backend");
}

TEST_F(DeviceBuffersE2E, MalformedRefsAreInvalidArgumentBeforeAnythingOpens) {
  auto client = Client::connect(server_->unix_address());
  expect_status(client->multiply_device({9, 7, 5}, buffer("short"), buffer(), std::nullopt, std::nullopt, {}),
                StatusCode::kInvalidArgument, "header.a_device.ipc_handle has 5 bytes");
  DeviceBufferMatrix b = buffer();
  b.ld = 3;  // B is 5 x 7
  expect_status(client->multiply_device({9, 7, 5}, buffer(), b, std::nullopt, std::nullopt, {}),
                StatusCode::kInvalidArgument, "header.b_device.ld 3");
  DeviceBufferMatrix out = buffer();
  out.offset = 2;
  expect_status(client->multiply_device({9, 7, 5}, buffer(), buffer(), std::nullopt, out, {}),
                StatusCode::kInvalidArgument, "header.out_device.offset 2");
  MultiplyOptions transposed;
  transposed.op_a = Op::kT;
  expect_status(client->multiply_device({9, 7, 5}, buffer(), buffer(), std::nullopt, std::nullopt, transposed),
                StatusCode::kInvalidArgument, "header.op_a");
}

TEST(DeviceBuffersWithTokensE2E, TheTokenIsCheckedFirstThenTheBackend) {
  const std::string dir = testing::make_temp_dir();
  const std::string file = dir + "/tokens.json";
  std::ofstream(file) << R"({"clients": [{"name": "alice", "token": "alice-token-0123456789abcdef"},
                                        {"name": "bob", "token": "bob-token-0123456789abcdefgh"}]})";
  InProcessServer server([&](ServerOptions& o, EngineOptions&) { o.auth_tokens = file; });
  ASSERT_TRUE(server.running()) << server.log();
  auto with = [&](const std::string& token) {
    ClientOptions o;
    o.token = token;
    o.retry.max_attempts = 1;
    return Client::connect(server.unix_address(), o);
  };
  // No token: refused before the header is read.
  auto anon = with("")->multiply_device({9, 7, 5}, buffer(), buffer(), std::nullopt, std::nullopt, {});
  EXPECT_EQ(anon.status().code(), StatusCode::kUnauthenticated) << anon.status().to_string();
  // Either client, on the cpu backend: the same precondition, for both tokens.
  if (with("alice-token-0123456789abcdef")->info().value().backend == "cpu") {
    for (const char* token : {"alice-token-0123456789abcdef", "bob-token-0123456789abcdefgh"})
      expect_status(with(token)->multiply_device({9, 7, 5}, buffer(), buffer(), std::nullopt, std::nullopt, {}),
                    StatusCode::kFailedPrecondition, "device buffers need the cuda backend");
  }
  EXPECT_EQ(server.stop(), 0);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

TEST_F(DeviceBuffersE2E, CliCudaIpcWithoutAGpuSaysWhy) {
  const std::string sock = server_->unix_address().substr(5);
  const auto r = testing::run_command(std::string(SGEMM_CLIENT_BIN) + " submit --unix " + sock +
                                      " --transport cuda-ipc --size 65 --verify 2>&1");
  if (r.output.find("sees 0 GPUs") == std::string::npos && r.output.find("need the CUDA runtime") == std::string::npos)
    GTEST_SKIP() << "this host has a GPU: the gpu suites run the CLI path (" << r.output << ")";
  EXPECT_NE(r.exit_code, 0) << r.output;
}

}  // namespace
}  // namespace sgemm
