// The sgemm-client CLI against the real server, and the server's lifecycle:
// a client killed mid-upload, and SIGTERM with a request in flight.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "client/sgemm_client.h"
#include "common/reference_gemm.h"
#include "sgemm/v1/sgemm.grpc.pb.h"
#include "tests/e2e/server_process.h"

namespace sgemm {
namespace {

using testing::run_command;
using testing::ServerProcess;

std::string cli(const ServerProcess&) { return testing::client_bin() + " "; }

TEST(CliE2E, SubmitVerifyPrintsTableAndPasses) {
  ServerProcess server;
  ASSERT_TRUE(server.running()) << server.log();
  auto r = run_command(cli(server) + "submit --server " + server.address() + " --m 257 --n 129 --k 65 --verify");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("copy-in ms"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("GFLOP/s"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(": PASS"), std::string::npos) << r.output;
  EXPECT_EQ(server.stop(), 0);
}

TEST(CliE2E, SubmitJsonCarriesShapeTimesDevicesErrorAndBytes) {
  ServerProcess server;
  ASSERT_TRUE(server.running()) << server.log();
  auto r = run_command(cli(server) + "submit --server " + server.address() +
                       " --size 300 --alpha 2 --beta 0.5 --verify --json --repeat 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["shape"]["m"], 300);
  EXPECT_TRUE(j["verify"]["passed"].get<bool>());
  EXPECT_LT(j["verify"]["max_rel_error"].get<double>(), kSgemmTolerance);
  EXPECT_EQ(j["schema"], "sgemm.timing/1");                 // the server's timings.jsonl record (docs/observability.md)
  EXPECT_EQ(j["client"]["bytes_sent"], 3 * 300 * 300 * 4);  // A, B and C (beta != 0 sends C)
  EXPECT_EQ(j["client"]["bytes_received"], 300 * 300 * 4);
  // The server's view agrees; through shared memory no matrix byte crosses gRPC.
  const char* transport = std::getenv("SGEMM_E2E_TRANSPORT");
  const bool shm = transport && std::string(transport) == "shm";
  EXPECT_EQ(j["bytes_in"], shm ? 0 : 3 * 300 * 300 * 4);
  EXPECT_FALSE(j["devices"].empty());
  EXPECT_TRUE(j["devices"][0].contains("kernel_ms"));
  EXPECT_TRUE(j["devices"][0].contains("kernel_wait_ms"));
  EXPECT_EQ(j["client"]["total_ms_all"].size(), 2u);
  EXPECT_EQ(server.stop(), 0);
}

TEST(CliE2E, InfoHealthAndErrors) {
  ServerProcess server({"--max-matrix-elements", "10000"});
  ASSERT_TRUE(server.running()) << server.log();
  auto info = run_command(cli(server) + "info --server " + server.address());
  EXPECT_EQ(info.exit_code, 0) << info.output;
  EXPECT_NE(info.output.find("limits: 10000 elements per matrix"), std::string::npos) << info.output;
  // Each precision's contract: what it promises and the kernels that serve it.
  auto client = Client::connect(server.address());
  auto offered = client->info();
  ASSERT_TRUE(offered.ok()) << offered.status().to_string();
  ASSERT_EQ(offered->contracts.size(), offered->precisions.size());
  for (const auto& c : offered->contracts) {
    EXPECT_FALSE(c.promise.empty()) << c.precision;
    ASSERT_FALSE(c.kernels.empty()) << c.precision;
    EXPECT_NE(info.output.find("  " + c.precision + ": " + c.promise + "; kernels: " + c.kernels[0]), std::string::npos)
        << info.output;
  }
  auto health = run_command(cli(server) + "health --server " + server.address());
  EXPECT_EQ(health.exit_code, 0);
  EXPECT_NE(health.output.find("SERVING"), std::string::npos);
  // Over the limit: a clear status, non-zero exit.
  auto big = run_command(cli(server) + "submit --server " + server.address() + " --size 200 --json");
  EXPECT_EQ(big.exit_code, 3) << big.output;
  EXPECT_NE(big.output.find("RESOURCE_EXHAUSTED"), std::string::npos) << big.output;
  EXPECT_EQ(server.stop(), 0);
  // No server at all.
  auto none = run_command(cli(server) + "info --server 127.0.0.1:1 2>&1");
  EXPECT_EQ(none.exit_code, 3);
  EXPECT_NE(none.output.find("UNAVAILABLE"), std::string::npos) << none.output;
}

TEST(LifecycleE2E, ClientKilledMidUploadLeavesServerServing) {
  ServerProcess server;
  ASSERT_TRUE(server.running()) << server.log();
  // A 1536^3 upload is 18 MiB; kill the CLI while it streams (several times, at different moments).
  for (int delay_ms : {30, 80, 150}) {
    const std::string cmd = cli(server) + "submit --server " + server.address() + " --size 1536 >/dev/null 2>&1 & " +
                            "pid=$!; sleep " + std::to_string(delay_ms / 1000.0) + "; kill -9 $pid; wait $pid";
    run_command(cmd);
  }
  auto client = Client::connect(server.address());
  std::vector<float> a(300 * 200), b(200 * 100);
  fill_random(a, std::random_device{}());
  fill_random(b, std::random_device{}());
  auto r = client->multiply({300, 100, 200}, a.data(), b.data(), nullptr, {});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(verify_gemm(300, 100, 200, 1, a.data(), b.data(), 0, nullptr, r->c.data()).passed(kSgemmTolerance));
  testing::expect_released(*client, "request buffers leaked");
  EXPECT_EQ(server.stop(), 0);
}

TEST(LifecycleE2E, SigtermFinishesTheRequestInFlightThenExitsZero) {
  ServerProcess server;
  ASSERT_TRUE(server.running()) << server.log();
  auto channel = grpc::CreateChannel(server.address(), grpc::InsecureChannelCredentials());
  auto stub = sgemm::v1::Sgemm::NewStub(channel);
  grpc::ClientContext ctx;
  auto stream = stub->Multiply(&ctx);
  sgemm::v1::MultiplyRequest req;
  auto* h = req.mutable_header();
  h->set_m(3);
  h->set_n(3);
  h->set_k(3);
  ASSERT_TRUE(stream->Write(req));
  std::vector<float> ones(9, 1.0f);
  auto chunk = [&](sgemm::v1::Matrix m) {
    sgemm::v1::MultiplyRequest c;
    c.mutable_chunk()->set_matrix(m);
    c.mutable_chunk()->set_offset(0);
    c.mutable_chunk()->set_data(std::string(reinterpret_cast<const char*>(ones.data()), 36));
    return c;
  };
  ASSERT_TRUE(stream->Write(chunk(sgemm::v1::MATRIX_B)));
  // The request is in flight once the server holds memory for it (a stream
  // without its header yet would be ended at once by the shutdown).
  {
    auto probe = Client::connect(server.address());
    const auto held = testing::info_when(*probe, [](const ServerInfo& i) { return i.host_bytes_in_use > 0; });
    ASSERT_GT(held.host_bytes_in_use, 0) << server.log();
  }
  kill(server.pid(), SIGTERM);
  // New requests are refused while the one in flight completes (once the
  // server has taken the signal: polled, as a loaded machine can take a while).
  bool refused = false;
  for (int i = 0; i < 50 && !refused; ++i) {
    refused = !Client::connect(server.address())->info(std::chrono::milliseconds(2000)).ok();
    if (!refused) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(refused) << server.log();
  ASSERT_TRUE(stream->Write(chunk(sgemm::v1::MATRIX_A)));
  stream->WritesDone();
  sgemm::v1::MultiplyResponse resp;
  std::vector<float> c(9, 0.0f);
  bool summary = false;
  while (stream->Read(&resp)) {
    if (resp.has_chunk())
      std::memcpy(c.data() + resp.chunk().offset(), resp.chunk().data().data(), resp.chunk().data().size());
    summary |= resp.has_summary();
  }
  const grpc::Status st = stream->Finish();
  ASSERT_TRUE(st.ok()) << st.error_code() << " " << st.error_message() << "\n" << server.log();
  EXPECT_TRUE(summary);
  for (float v : c) EXPECT_FLOAT_EQ(v, 3.0f);
  int status = 0;
  waitpid(server.pid(), &status, 0);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace sgemm
