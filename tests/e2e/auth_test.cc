// Bearer tokens and per-client quotas against the real server (--auth-tokens):
// a missing, malformed or unknown token is UNAUTHENTICATED, a client over its
// rights or quotas PERMISSION_DENIED, with messages that name the problem and
// never the token; meanwhile a normal request is served every time.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <fstream>

#include "sgemm/v1/sgemm.grpc.pb.h"
#include "tests/e2e/in_process_server.h"
#include "tests/e2e/trust_helpers.h"

namespace sgemm {
namespace {

namespace v1 = ::sgemm::v1;
using testing::InProcessServer;
using testing::multiply_verified;

constexpr const char* kAlice = "alice-token-0123456789abcdef";
constexpr const char* kOne = "one-at-a-time-token-0123456789";
constexpr const char* kSmall = "small-bytes-token-0123456789";
constexpr const char* kReader = "reader-token-0123456789abcdef";
constexpr const char* kUnknown = "nobody-knows-this-token-012345";

class AuthE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(testing::make_temp_dir());
    const std::string file = *dir_ + "/tokens.json";
    std::ofstream(file) << R"({"clients": [
      {"name": "alice", "token": ")"
                        << kAlice << R"("},
      {"name": "one", "token": ")"
                        << kOne << R"(", "max_in_flight": 1},
      {"name": "small", "token": ")"
                        << kSmall << R"(", "max_bytes_in_flight": 20000},
      {"name": "reader", "token": ")"
                        << kReader << R"(", "multiply": false}
    ]})";
    server_ = new InProcessServer([&](ServerOptions& o, EngineOptions&) {
      o.auth_tokens = file;
      o.service.log_lines_per_second = 0;
    });
  }
  static void TearDownTestSuite() {
    EXPECT_EQ(server_->stop(), 0);
    delete server_;
    std::error_code ec;
    std::filesystem::remove_all(*dir_, ec);
    delete dir_;
  }
  void SetUp() override { ASSERT_TRUE(server_->running()) << server_->log(); }

  static std::unique_ptr<Client> client(const std::string& token) {
    ClientOptions o;
    o.token = token;
    o.retry.max_attempts = 1;
    return Client::connect(server_->address(), o);
  }
  static void expect(const Status& st, StatusCode code, const std::string& words) {
    EXPECT_EQ(st.code(), code) << st.to_string();
    EXPECT_NE(st.message().find(words), std::string::npos) << st.to_string();
    for (const char* t : {kAlice, kOne, kSmall, kReader, kUnknown})
      EXPECT_EQ(st.message().find(t), std::string::npos) << "the message shows a token: " << st.to_string();
  }
  // A normal request from a client in good standing is served.
  static void expect_alice_served() {
    const Status st = multiply_verified(*client(kAlice));
    EXPECT_TRUE(st.ok()) << st.to_string();
  }

  static std::string* dir_;
  static InProcessServer* server_;
};
std::string* AuthE2E::dir_ = nullptr;
InProcessServer* AuthE2E::server_ = nullptr;

TEST_F(AuthE2E, AKnownTokenIsServedAndNamedInTheLogAndInfo) {
  expect_alice_served();
  EXPECT_TRUE(server_->log_has("client=alice")) << server_->log();
  auto info = client(kAlice)->info();
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  EXPECT_EQ(info->client, "alice");
  EXPECT_EQ(server_->log().find(kAlice), std::string::npos) << "the log shows a token";
}

TEST_F(AuthE2E, AMissingTokenIsUnauthenticated) {
  std::vector<float> a(6, 1.0f), b(6, 1.0f);
  auto r = client("")->multiply({2, 3, 3}, a.data(), b.data(), nullptr, {});
  ASSERT_FALSE(r.ok());
  expect(r.status(), StatusCode::kUnauthenticated, "requires a bearer token");
  auto info = client("")->info();
  ASSERT_FALSE(info.ok());
  expect(info.status(), StatusCode::kUnauthenticated, "requires a bearer token");
  // Health probes carry no token and stay open.
  auto health = client("")->serving();
  ASSERT_TRUE(health.ok()) << health.status().to_string();
  EXPECT_TRUE(*health);
  expect_alice_served();
}

TEST_F(AuthE2E, AnUnknownTokenIsUnauthenticatedAndNotEchoed) {
  std::vector<float> a(6, 1.0f), b(6, 1.0f);
  auto r = client(kUnknown)->multiply({2, 3, 3}, a.data(), b.data(), nullptr, {});
  ASSERT_FALSE(r.ok());
  expect(r.status(), StatusCode::kUnauthenticated, "not one this server knows");
  EXPECT_EQ(server_->log().find(kUnknown), std::string::npos) << "the log shows a token";
  expect_alice_served();
}

TEST_F(AuthE2E, AMalformedAuthorizationIsUnauthenticated) {
  auto channel = grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials());
  auto stub = v1::Sgemm::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", std::string("Basic ") + kAlice);
  v1::GetInfoResponse resp;
  const grpc::Status st = stub->GetInfo(&ctx, v1::GetInfoRequest(), &resp);
  expect(Status(StatusCode(int(st.error_code())), st.error_message()), StatusCode::kUnauthenticated,
         "must be `Bearer <token>`");
  expect_alice_served();
}

TEST_F(AuthE2E, AClientWithoutTheMultiplyRightIsDeniedButMayAskForInfo) {
  std::vector<float> a(6, 1.0f), b(6, 1.0f);
  auto r = client(kReader)->multiply({2, 3, 3}, a.data(), b.data(), nullptr, {});
  ASSERT_FALSE(r.ok());
  expect(r.status(), StatusCode::kPermissionDenied, "'reader' may not call Multiply");
  auto info = client(kReader)->info();
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  EXPECT_EQ(info->client, "reader");
  expect_alice_served();
}

TEST_F(AuthE2E, ARequestOverTheClientsBytesQuotaIsDenied) {
  // 20000 bytes: 37x29x41 needs (37*41 + 41*29 + 37*29) * 4 = 15 584 bytes and fits.
  auto small = client(kSmall);
  const Status fits = multiply_verified(*small, {37, 29, 41});
  EXPECT_TRUE(fits.ok()) << fits.to_string();
  const Status over = multiply_verified(*small, {64, 64, 64});
  expect(over, StatusCode::kPermissionDenied, "max_bytes_in_flight");
  EXPECT_NE(over.message().find("'small'"), std::string::npos) << over.to_string();
  auto info = small->info();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->client_max_bytes_in_flight, 20000);
  expect_alice_served();
}

TEST_F(AuthE2E, AClientAtItsRequestQuotaIsDeniedUntilOneFinishes) {
  // The client "one" holds one request open: header and part of A sent.
  auto channel = grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials());
  auto stub = v1::Sgemm::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", std::string("Bearer ") + kOne);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  auto stream = stub->Multiply(&ctx);
  v1::MultiplyRequest req;
  req.mutable_header()->set_m(8);
  req.mutable_header()->set_n(8);
  req.mutable_header()->set_k(8);
  ASSERT_TRUE(stream->Write(req));
  v1::MultiplyRequest chunk;
  chunk.mutable_chunk()->set_matrix(v1::MATRIX_A);
  chunk.mutable_chunk()->set_offset(0);
  chunk.mutable_chunk()->set_data(std::string(32 * 4, '\0'));
  ASSERT_TRUE(stream->Write(chunk));

  auto one = client(kOne);
  // The first request's header is being processed: wait until the server counts it.
  int in_flight = 0;
  for (int i = 0; i < 3000 && in_flight == 0; ++i) {
    auto info = one->info();
    ASSERT_TRUE(info.ok()) << info.status().to_string();
    in_flight = info->client_in_flight;
    if (!in_flight) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(in_flight, 1);
  const Status second = multiply_verified(*one);
  expect(second, StatusCode::kPermissionDenied, "max_in_flight 1");
  EXPECT_NE(second.message().find("'one'"), std::string::npos) << second.to_string();
  expect_alice_served();  // other clients are not held back

  // The open request ends; the client's next request is served.
  ctx.TryCancel();
  stream->Finish().IgnoreError();
  Status again;
  for (int i = 0; i < 3000; ++i) {  // the server frees the place as it answers the cancel
    again = multiply_verified(*one);
    if (again.ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(again.ok()) << again.to_string();
}

TEST_F(AuthE2E, ARegionBelongsToTheClientThatRegisteredIt) {
  // Shared-memory regions on the Unix socket: the region RPCs need a token too,
  // and with tokens a region is its registering client's alone.
  auto unix_client = [](const std::string& token) {
    ClientOptions o;
    o.token = token;
    o.retry.max_attempts = 1;
    return Client::connect(server_->unix_address(), o);
  };
  auto alice = unix_client(kAlice);
  const GemmShape s{33, 17, 9};
  auto a = alice->create_region(s.m * s.k * 4);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  auto b = alice->create_region(s.k * s.n * 4);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  std::vector<float> ha(std::size_t(s.m * s.k)), hb(std::size_t(s.k * s.n));
  fill_random(ha, 11);
  fill_random(hb, 12);
  std::copy(ha.begin(), ha.end(), (*a)->floats());
  std::copy(hb.begin(), hb.end(), (*b)->floats());
  // Alice multiplies from her regions, checked against the fp64 reference.
  auto mine =
      alice->multiply_regions(s, RegionMatrix{a->get()}, RegionMatrix{b->get()}, std::nullopt, std::nullopt, {});
  ASSERT_TRUE(mine.ok()) << mine.status().to_string();
  EXPECT_TRUE(verify_gemm(s.m, s.n, s.k, 1, ha.data(), hb.data(), 0, nullptr, mine->c.data()).passed(kSgemmTolerance));
  // Another client, same uid and socket, may not name them.
  auto theirs = unix_client(kOne)->multiply_regions(s, RegionMatrix{a->get()}, RegionMatrix{b->get()}, std::nullopt,
                                                    std::nullopt, {});
  expect(theirs.status(), StatusCode::kPermissionDenied, "belongs to client 'alice'");
  // Without a token, not even a registration.
  ClientOptions none;
  none.retry.max_attempts = 1;
  auto anon = Client::connect(server_->unix_address(), none)->create_region(4096);
  expect(anon.status(), StatusCode::kUnauthenticated, "token");
  expect_alice_served();
}

TEST_F(AuthE2E, ATokenFileWithAnErrorStopsTheServerAtStart) {
  const std::string file = *dir_ + "/bad.json";
  std::ofstream(file) << R"({"clients": [{"name": "x", "token": "short"}]})";
  InProcessServer bad([&](ServerOptions& o, EngineOptions&) { o.auth_tokens = file; });
  EXPECT_FALSE(bad.running());
  EXPECT_EQ(bad.start_status().code(), StatusCode::kInvalidArgument) << bad.start_status().to_string();
  EXPECT_NE(bad.log().find("at least 16 characters"), std::string::npos) << bad.log();
  EXPECT_EQ(bad.log().find("short"), std::string::npos) << bad.log();
}

}  // namespace
}  // namespace sgemm
