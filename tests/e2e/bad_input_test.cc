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
#include "tests/e2e/in_process_server.h"

namespace sgemm {
namespace {

namespace v1 = ::sgemm::v1;
using testing::InProcessServer;

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
    server_ = new InProcessServer([](ServerOptions& o, EngineOptions&) {
      o.service.limits.max_matrix_elements = 1000000;
      o.service.log_lines_per_second = 0;
    });
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
    testing::expect_released(*client, "request buffers leaked");
  }

  static InProcessServer* server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Sgemm::Stub> stub_;
};
InProcessServer* BadInputE2E::server_ = nullptr;

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
  expect(send({header_msg(2, 2, 2), v1::MultiplyRequest()}), StatusCode::INVALID_ARGUMENT,
         "message 2 of the stream is an empty MultiplyRequest");
  expect(send({v1::MultiplyRequest()}), StatusCode::INVALID_ARGUMENT, "neither `header` nor `chunk`");
  expect_healthy();
}

// Raw bytes on the Multiply method, for what a typed stub cannot send.
grpc::Status send_raw(const std::shared_ptr<grpc::Channel>& channel, const std::vector<std::string>& messages) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  const grpc::internal::RpcMethod method("/sgemm.v1.Sgemm/Multiply", grpc::internal::RpcMethod::BIDI_STREAMING,
                                         channel);
  std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>> stream(
      grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer, grpc::ByteBuffer>::Create(channel.get(), method,
                                                                                            &ctx));
  for (const auto& m : messages) {
    grpc::Slice slice(m);
    grpc::ByteBuffer bb(&slice, 1);
    if (!stream->Write(bb)) break;
  }
  stream->WritesDone();
  grpc::ByteBuffer resp;
  while (stream->Read(&resp)) {
  }
  return stream->Finish();
}

TEST_F(BadInputE2E, BytesThatAreNotProtobufAreAParseError) {
  const std::string header = header_msg(2, 2, 2).SerializeAsString();
  expect(send_raw(channel_, {"\xff\xff\xff\xff\x0f not a MultiplyRequest"}), StatusCode::INVALID_ARGUMENT,
         "message 1 of the stream (27 bytes) does not parse as a sgemm.v1.MultiplyRequest");
  expect(send_raw(channel_, {header, "\x12\xff\xff\xff\x7f truncated"}), StatusCode::INVALID_ARGUMENT,
         "message 2 of the stream");
  EXPECT_TRUE(server_->log_has("status=INVALID_ARGUMENT"));
  expect_healthy();
}

TEST_F(BadInputE2E, AMatrixInOneOversizedMessageIsToldToChunkWithTheLimit) {
  // 1.1 M floats (4.4 MB) in one message: over the 4 MiB - 1 KiB chunk limit, under the message cap.
  auto info = Client::connect(server_->address())->info();
  ASSERT_TRUE(info.ok());
  grpc::ClientContext ctx;
  auto stream = stub_->Multiply(&ctx);
  ASSERT_TRUE(stream->Write(header_msg(1000, 1000, 1000)));
  stream->Write(chunk_msg(v1::MATRIX_A, 0, 1100 * 1000));
  stream->WritesDone();
  v1::MultiplyResponse resp;
  while (stream->Read(&resp)) {
  }
  const grpc::Status st = stream->Finish();
  expect(st, StatusCode::INVALID_ARGUMENT, "at most " + std::to_string(info->max_chunk_bytes) + " bytes");
  expect(st, StatusCode::INVALID_ARGUMENT, "several MatrixChunk messages");
  // The server's log shows the code the client got.
  EXPECT_TRUE(server_->log_has("status=INVALID_ARGUMENT"));
  expect_healthy();
}

TEST(BadInputOverMessageCapE2E, AMessageOverTheMessageCapIsRefusedByGrpcAndTheLogSaysWhatItMayBe) {
  // Over --max-message-bytes gRPC answers by itself, before the service sees a
  // byte; the log cannot know why the call ended, and says what it may be.
  InProcessServer server([](ServerOptions& o, EngineOptions&) {
    o.service.max_message_bytes = 4 << 20;
    o.service.log_lines_per_second = 0;
  });
  ASSERT_TRUE(server.running()) << server.log();
  auto channel = grpc::CreateChannel(server.address(), grpc::InsecureChannelCredentials());
  auto stub = v1::Sgemm::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto stream = stub->Multiply(&ctx);
  ASSERT_TRUE(stream->Write(header_msg(1200, 1200, 1200)));
  stream->Write(chunk_msg(v1::MATRIX_A, 0, 1200 * 1200));  // 5.8 MB in one message
  stream->WritesDone();
  v1::MultiplyResponse resp;
  while (stream->Read(&resp)) {
  }
  const grpc::Status st = stream->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  EXPECT_TRUE(server.log_has("or sent a message over --max-message-bytes 4194304")) << server.log();
  auto client = Client::connect(server.address());
  std::vector<float> a(7 * 3), b(3 * 5);
  fill_random(a, std::random_device{}());
  fill_random(b, std::random_device{}());
  auto r = client->multiply({7, 5, 3}, a.data(), b.data(), nullptr, {});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(verify_gemm(7, 5, 3, 1, a.data(), b.data(), 0, nullptr, r->c.data()).passed(kSgemmTolerance));
  EXPECT_EQ(server.stop(), 0);
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
  // Logged with the client's code, naming the phase (on a loaded machine, or
  // under ThreadSanitizer, the deadline can pass before the header is read).
  EXPECT_TRUE(server_->log_has_any({"status=DEADLINE_EXCEEDED phase=\"receiving the matrices\"",
                                    "status=DEADLINE_EXCEEDED phase=\"reading the header\""}))
      << server_->log();
  expect_healthy();
}

// A huge header: 1 MiB of metadata on the call. gRPC refuses it while it
// parses the headers (its metadata limit, 8 KiB), before the service sees the
// call: RESOURCE_EXHAUSTED "received initial metadata size exceeds limit".
// The caller's own connection may not recover: once in CI (1 run of ~100), a
// normal request that then shared that connection got its header through and
// no chunk after it. So the huge call has a connection of its own, and the
// server must serve everyone else: the call has to fail, the others succeed.
TEST_F(BadInputE2E, HugeMetadataIsRefusedBeforeTheServiceAndTheServerServesOn) {
  grpc::ChannelArguments args;
  args.SetInt("sgemm.test.huge_metadata", 1);  // a connection of its own
  auto stub =
      v1::Sgemm::NewStub(grpc::CreateCustomChannel(server_->address(), grpc::InsecureChannelCredentials(), args));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  ctx.AddMetadata("x-padding", std::string(1 << 20, 'a'));
  auto stream = stub->Multiply(&ctx);
  stream->Write(header_msg(2, 2, 2));
  stream->WritesDone();
  v1::MultiplyResponse resp;
  while (stream->Read(&resp)) {
  }
  const grpc::Status st = stream->Finish();
  std::printf("1 MiB of metadata: %d %s\n", int(st.error_code()), st.error_message().c_str());
  EXPECT_FALSE(st.ok());
  if (st.error_code() == StatusCode::RESOURCE_EXHAUSTED) {
    EXPECT_NE(st.error_message().find("metadata size exceeds limit"), std::string::npos) << st.error_message();
  }
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

}  // namespace
}  // namespace sgemm
