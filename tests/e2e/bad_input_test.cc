// Malformed requests against the real server: each gets the right status code
// and a message naming the problem; the server keeps serving and holds no
// request memory afterwards.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <thread>

#include "client/sgemm_client.h"
#include "common/reference_gemm.h"
#include "sgemm/v1/sgemm.grpc.pb.h"
#include "tests/e2e/server_process.h"

namespace sgemm {
namespace {

namespace v1 = ::sgemm::v1;
using testing::ServerProcess;

v1::MultiplyRequest header_msg(int64_t m, int64_t n, int64_t k, bool has_c = false) {
  v1::MultiplyRequest r;
  auto* h = r.mutable_header();
  h->set_m(m);
  h->set_n(n);
  h->set_k(k);
  h->set_has_c(has_c);
  return r;
}

v1::MultiplyRequest chunk_msg(v1::Matrix m, int64_t offset, int64_t count, int extra_bytes = 0) {
  v1::MultiplyRequest r;
  auto* c = r.mutable_chunk();
  c->set_matrix(m);
  c->set_offset(offset);
  std::vector<float> v(std::size_t(count), 0.5f);
  c->set_data(std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4) + std::string(extra_bytes, '\0'));
  return r;
}

class BadInputE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new ServerProcess({"--max-matrix-elements", "1000000"});
    ASSERT_TRUE(server_->running()) << server_->log();
  }
  static void TearDownTestSuite() {
    EXPECT_EQ(server_->stop(), 0);
    delete server_;
  }
  void SetUp() override {
    channel_ = grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials());
    stub_ = v1::Sgemm::NewStub(channel_);
  }
  // Sends `msgs`, half-closes, drains the answer; returns the final status.
  grpc::Status send(const std::vector<v1::MultiplyRequest>& msgs) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    auto stream = stub_->Multiply(&ctx);
    for (const auto& m : msgs)
      if (!stream->Write(m)) break;
    stream->WritesDone();
    v1::MultiplyResponse resp;
    while (stream->Read(&resp)) {
    }
    return stream->Finish();
  }
  void expect(const grpc::Status& s, grpc::StatusCode code, const std::string& words) {
    EXPECT_EQ(s.error_code(), code) << s.error_message();
    EXPECT_NE(s.error_message().find(words), std::string::npos) << "message: " << s.error_message();
  }
  // The server still multiplies correctly and holds no request memory.
  void expect_healthy() {
    auto client = Client::connect(server_->address());
    std::vector<float> a(6 * 5), b(5 * 4);
    fill_random(a, std::random_device{}());
    fill_random(b, std::random_device{}());
    auto r = client->multiply({6, 4, 5}, a.data(), b.data(), nullptr, {});
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_TRUE(verify_gemm(6, 4, 5, 1, a.data(), b.data(), 0, nullptr, r->c.data()).passed(kSgemmTolerance));
    EXPECT_EQ(testing::wait_for_no_held_bytes(*client), 0) << "request buffers leaked";
  }

  static ServerProcess* server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Sgemm::Stub> stub_;
};
ServerProcess* BadInputE2E::server_ = nullptr;

using grpc::StatusCode;

TEST_F(BadInputE2E, ZeroAndNegativeDimensions) {
  expect(send({header_msg(0, 4, 4)}), StatusCode::INVALID_ARGUMENT, "header.m must be >= 1, got 0");
  expect(send({header_msg(4, -2, 4)}), StatusCode::INVALID_ARGUMENT, "header.n must be >= 1, got -2");
  expect(send({header_msg(4, 4, 0)}), StatusCode::INVALID_ARGUMENT, "header.k");
  expect_healthy();
}

TEST_F(BadInputE2E, OverflowingAndOverLimitDimensions) {
  expect(send({header_msg(int64_t{1} << 40, 1, int64_t{1} << 40)}), StatusCode::INVALID_ARGUMENT, "overflows");
  expect(send({header_msg(2000, 1000, 1)}), StatusCode::RESOURCE_EXHAUSTED, "C has 2000000 elements");
  expect_healthy();
}

TEST_F(BadInputE2E, NonFiniteAlphaOrBeta) {
  auto m = header_msg(2, 2, 2);
  m.mutable_header()->set_alpha(std::numeric_limits<float>::quiet_NaN());
  expect(send({m}), StatusCode::INVALID_ARGUMENT, "header.alpha must be finite");
  m = header_msg(2, 2, 2, true);
  m.mutable_header()->set_beta(-std::numeric_limits<float>::infinity());
  expect(send({m}), StatusCode::INVALID_ARGUMENT, "header.beta must be finite");
  expect_healthy();
}

TEST_F(BadInputE2E, UnknownEnumValues) {
  auto m = header_msg(2, 2, 2);
  m.mutable_header()->set_kernel(static_cast<v1::Kernel>(42));
  expect(send({m}), StatusCode::INVALID_ARGUMENT, "header.kernel has unknown value 42");
  m = header_msg(2, 2, 2);
  m.mutable_header()->set_split(static_cast<v1::Split>(9));
  expect(send({m}), StatusCode::INVALID_ARGUMENT, "header.split has unknown value 9");
  expect(send({header_msg(2, 2, 2), chunk_msg(static_cast<v1::Matrix>(7), 0, 4)}), StatusCode::INVALID_ARGUMENT,
         "chunk.matrix has unknown value 7");
  expect(send({header_msg(2, 2, 2), chunk_msg(v1::MATRIX_UNSPECIFIED, 0, 4)}), StatusCode::INVALID_ARGUMENT,
         "MATRIX_UNSPECIFIED");
  expect_healthy();
}

TEST_F(BadInputE2E, ChunksThatDoNotAddUp) {
  // Not a whole number of floats.
  expect(send({header_msg(2, 2, 2), chunk_msg(v1::MATRIX_A, 0, 1, 3)}), StatusCode::INVALID_ARGUMENT,
         "not a multiple of 4");
  // Overruns A (4 elements).
  expect(send({header_msg(2, 2, 2), chunk_msg(v1::MATRIX_A, 0, 3), chunk_msg(v1::MATRIX_A, 3, 2)}),
         StatusCode::INVALID_ARGUMENT, "overruns");
  // A gap, and an overlap.
  expect(send({header_msg(2, 2, 2), chunk_msg(v1::MATRIX_A, 1, 2)}), StatusCode::INVALID_ARGUMENT, "in order");
  expect(send({header_msg(2, 2, 2), chunk_msg(v1::MATRIX_B, 0, 2), chunk_msg(v1::MATRIX_B, 1, 2)}),
         StatusCode::INVALID_ARGUMENT, "starts at offset 1 but 2 elements of B");
  // C that the header did not declare.
  expect(send({header_msg(2, 2, 2), chunk_msg(v1::MATRIX_C, 0, 4)}), StatusCode::INVALID_ARGUMENT, "declared no C");
  expect_healthy();
}

TEST_F(BadInputE2E, MessagesInTheWrongPlace) {
  expect(send({chunk_msg(v1::MATRIX_A, 0, 4)}), StatusCode::INVALID_ARGUMENT, "first message");
  expect(send({header_msg(2, 2, 2), header_msg(2, 2, 2)}), StatusCode::INVALID_ARGUMENT, "second `header`");
  expect(send({}), StatusCode::INVALID_ARGUMENT, "ended before its header");
  expect_healthy();
}

TEST_F(BadInputE2E, StreamThatEndsEarly) {
  expect(send({header_msg(2, 2, 2), chunk_msg(v1::MATRIX_A, 0, 4), chunk_msg(v1::MATRIX_B, 0, 3)}),
         StatusCode::INVALID_ARGUMENT, "B has 3 of 4 elements");
  expect(send({header_msg(2, 2, 2, true), chunk_msg(v1::MATRIX_A, 0, 4), chunk_msg(v1::MATRIX_B, 0, 4)}),
         StatusCode::INVALID_ARGUMENT, "C has 0 of 4 elements");
  expect_healthy();
}

TEST_F(BadInputE2E, ClientCancelsMidUpload) {
  for (int i = 0; i < 3; ++i) {
    grpc::ClientContext ctx;
    auto stream = stub_->Multiply(&ctx);
    ASSERT_TRUE(stream->Write(header_msg(512, 512, 512)));
    ASSERT_TRUE(stream->Write(chunk_msg(v1::MATRIX_A, 0, 100000)));
    ctx.TryCancel();
    EXPECT_EQ(stream->Finish().error_code(), StatusCode::CANCELLED);
  }
  expect_healthy();
}

TEST_F(BadInputE2E, ExpiredDeadline) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(300));
  auto stream = stub_->Multiply(&ctx);
  ASSERT_TRUE(stream->Write(header_msg(256, 256, 256)));
  ASSERT_TRUE(stream->Write(chunk_msg(v1::MATRIX_A, 0, 1000)));
  std::this_thread::sleep_for(std::chrono::milliseconds(600));  // the rest never comes in time
  v1::MultiplyResponse resp;
  while (stream->Read(&resp)) {
  }
  EXPECT_EQ(stream->Finish().error_code(), StatusCode::DEADLINE_EXCEEDED);
  expect_healthy();
}

TEST_F(BadInputE2E, UnsupportedKernelOrSplitForTheBackend) {
  auto info = Client::connect(server_->address())->info();
  ASSERT_TRUE(info.ok());
  if (info->backend != "cpu") GTEST_SKIP() << "the server runs " << info->backend << "; this case is for cpu";
  auto m = header_msg(2, 2, 2);
  m.mutable_header()->set_kernel(v1::KERNEL_PINGPONG);
  expect(send({m}), StatusCode::FAILED_PRECONDITION, "kernel 'pingpong' needs the cuda backend");
  expect_healthy();
}

// A server that computes one request at a time and queues none.
TEST(QueueE2E, MoreRequestsThanTheQueueHoldsGetUnavailable) {
  ServerProcess server({"--max-in-flight", "1", "--max-queued", "1"});
  ASSERT_TRUE(server.running()) << server.log();
  auto channel = grpc::CreateChannel(server.address(), grpc::InsecureChannelCredentials());
  auto stub = v1::Sgemm::NewStub(channel);
  // Two requests hold the slot and the queue place: headers sent, data withheld.
  grpc::ClientContext ctx1, ctx2;
  auto s1 = stub->Multiply(&ctx1);
  ASSERT_TRUE(s1->Write(header_msg(4, 4, 4)));
  auto client = Client::connect(server.address());
  for (int i = 0; i < 100; ++i) {
    auto info = client->info();
    if (info.ok() && info->in_flight == 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  auto s2 = stub->Multiply(&ctx2);
  ASSERT_TRUE(s2->Write(header_msg(4, 4, 4)));
  for (int i = 0; i < 100; ++i) {
    auto info = client->info();
    if (info.ok() && info->queued == 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  // The third is refused at once, with a message that says why.
  std::vector<float> a(16, 1.0f);
  auto r = client->multiply({4, 4, 4}, a.data(), a.data(), nullptr, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ::sgemm::StatusCode::kUnavailable) << r.status().to_string();
  EXPECT_NE(r.status().message().find("server busy"), std::string::npos) << r.status().message();
  // Finish the first two properly: both complete once the data arrives.
  for (auto* s : {s1.get(), s2.get()}) {
    s->Write(chunk_msg(v1::MATRIX_A, 0, 16));
    s->Write(chunk_msg(v1::MATRIX_B, 0, 16));
    s->WritesDone();
  }
  for (auto* s : {s1.get(), s2.get()}) {
    v1::MultiplyResponse resp;
    int chunks = 0;
    while (s->Read(&resp)) chunks += resp.has_chunk();
    EXPECT_TRUE(s->Finish().ok());
    EXPECT_GE(chunks, 1);
  }
  auto again = client->multiply({4, 4, 4}, a.data(), a.data(), nullptr, {});
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_FLOAT_EQ(again->c[0], 4.0f);
  EXPECT_EQ(server.stop(), 0);
}

}  // namespace
}  // namespace sgemm
