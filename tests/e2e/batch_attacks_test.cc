// End to end: unfriendly callers of batched and grouped requests
// (GemmHeader.batch / group; docs/transport.md, "Batches and groups";
// docs/security.md). A batch stream that stalls after its header and a first
// chunk, one that sends its header only, one that never reads its results and
// one that never sends anything: each is ended by the server (--idle-timeout,
// --min-upload-rate), and while it is open a normal caller's requests complete
// correctly (fp64 reference); once it ends the server holds no request memory
// and no stream (GetInfo, polled with a deadline).
//
// The server runs in this process (tests/e2e/in_process_server.h) with a 2 s
// idle timeout; the bounds on how long the server takes are generous (shared
// CI machines, ThreadSanitizer), and each is far below how long the attack
// would hold on its own.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <future>
#include <vector>

#include "client/sgemm_client.h"
#include "sgemm/v1/sgemm.grpc.pb.h"
#include "tests/e2e/attack_checks.h"
#include "tests/e2e/in_process_server.h"

namespace sgemm {
namespace {

namespace v1 = ::sgemm::v1;
using Clock = std::chrono::steady_clock;

// A strided batch of 16 products of 128^3: 3 MiB of A, B and C.
constexpr int64_t kEdge = 128, kBatch = 16;
constexpr int64_t kElements = kBatch * kEdge * kEdge;  // of each operand

v1::MultiplyRequest batch_header() {
  v1::MultiplyRequest r;
  r.mutable_header()->set_m(kEdge);
  r.mutable_header()->set_n(kEdge);
  r.mutable_header()->set_k(kEdge);
  r.mutable_header()->set_batch(int32_t(kBatch));
  return r;
}

// A group of three odd shapes whose C (6 MiB) is more than the transport
// buffers: a client that never reads leaves the server with C to send.
v1::MultiplyRequest group_header(int64_t* a_elements, int64_t* b_elements) {
  v1::MultiplyRequest r;
  *a_elements = *b_elements = 0;
  for (const GemmShape& s :
       {GemmShape{1024, 1024, 16}, GemmShape{512, 1024, 8}, GemmShape{77, 33, 5}, GemmShape{2048, 2048, 4}}) {
    v1::ProductShape* p = r.mutable_header()->add_group();
    p->set_m(s.m);
    p->set_n(s.n);
    p->set_k(s.k);
    *a_elements += s.m * s.k;
    *b_elements += s.k * s.n;
  }
  return r;
}

v1::MultiplyRequest chunk(v1::Matrix m, int64_t offset, int64_t count) {
  v1::MultiplyRequest r;
  r.mutable_chunk()->set_matrix(m);
  r.mutable_chunk()->set_offset(offset);
  std::vector<float> v(std::size_t(count), 0.25f);
  r.mutable_chunk()->set_data(reinterpret_cast<const char*>(v.data()), v.size() * 4);
  return r;
}

// How long the server may take to end a stream that stalls, sends nothing or
// reads nothing: its 2 s idle timeout (or upload grace) and the watchdog's
// look, with room for a loaded machine.
constexpr std::chrono::milliseconds kEndedWithin{20000};

class BatchAttacks : public testing::SuiteServer<BatchAttacks> {
 public:
  static void configure(ServerOptions& o, EngineOptions&) {
    o.idle_timeout_s = 2;
    o.service.log_lines_per_second = 0;
  }

 protected:
  void SetUp() override {
    ASSERT_TRUE(server_->running()) << server_->log();
    watcher_ = Client::connect(server_->tcp_address());
    testing::expect_released(*watcher_, "before the attack");
    stub_ = v1::Sgemm::NewStub(grpc::CreateChannel(server_->tcp_address(), grpc::InsecureChannelCredentials()));
  }

  // The attack's stream is open (the server counts it) while a normal caller
  // multiplies; returns the normal caller's figures once `ended` is ready.
  template <typename Future>
  testing::NormalTraffic normal_traffic_until(Future& ended) {
    auto normal = Client::connect(server_->tcp_address());
    testing::NormalTrafficThread traffic(*normal);
    const auto give_up = Clock::now() + kEndedWithin;
    while (ended.wait_for(std::chrono::milliseconds(10)) != std::future_status::ready && Clock::now() < give_up) {
    }
    return traffic.stop();
  }

  std::unique_ptr<Client> watcher_;
  std::unique_ptr<v1::Sgemm::Stub> stub_;
};

// Reads the stream to its end and returns its status.
grpc::Status finish(grpc::ClientReaderWriter<v1::MultiplyRequest, v1::MultiplyResponse>& s) {
  v1::MultiplyResponse resp;
  while (s.Read(&resp)) {
  }
  return s.Finish();
}

// A batch's header and its first chunk reserve the batch's footprint; then
// nothing. The upload falls behind --min-upload-rate once its grace is over:
// the server ends the stream and the memory comes back whole.
TEST_F(BatchAttacks, ABatchThatStallsAfterItsHeaderLosesItsMemory) {
  grpc::ClientContext ctx;
  auto stream = stub_->Multiply(&ctx);
  ASSERT_TRUE(stream->Write(batch_header()));
  ASSERT_TRUE(stream->Write(chunk(v1::MATRIX_B, 0, 1024)));
  const auto held = testing::info_when(*watcher_, [](const ServerInfo& i) { return i.host_bytes_in_use > 0; });
  EXPECT_GE(held.host_bytes_in_use, 3 * 4 * kElements) << "the stalled batch's footprint was never reserved";
  const auto t0 = Clock::now();
  auto ended = std::async(std::launch::async, [&] { return finish(*stream); });
  testing::expect_traffic_served(normal_traffic_until(ended), "beside a stalled batch");
  ASSERT_EQ(ended.wait_for(kEndedWithin), std::future_status::ready) << "the stalled batch was never ended";
  const grpc::Status st = ended.get();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << st.error_message();
  std::printf("[ info ] a stalled batch held %lld bytes until ended after %.2f s: %s\n",
              (long long)held.host_bytes_in_use, std::chrono::duration<double>(Clock::now() - t0).count(),
              st.error_message().c_str());
  testing::expect_released(*watcher_, "after the stalled batch", kEndedWithin);
}

// A batch's header alone holds no memory (a header allocates nothing); the
// stream, silent after it, is ended at the idle timeout.
TEST_F(BatchAttacks, ABatchHeaderAloneHoldsNothingAndIsEnded) {
  grpc::ClientContext ctx;
  auto stream = stub_->Multiply(&ctx);
  ASSERT_TRUE(stream->Write(batch_header()));
  const auto open = testing::info_when(*watcher_, [](const ServerInfo& i) { return i.open_streams >= 1; });
  ASSERT_GE(open.open_streams, 1) << "the header-only stream never reached the server";
  auto ended = std::async(std::launch::async, [&] { return finish(*stream); });
  testing::expect_traffic_served(normal_traffic_until(ended), "beside a header-only batch");
  ASSERT_EQ(ended.wait_for(kEndedWithin), std::future_status::ready) << "the header-only batch was never ended";
  const grpc::Status st = ended.get();
  EXPECT_FALSE(st.ok()) << "a header-only batch answered OK";
  std::printf("[ info ] a header-only batch was ended: %d %s\n", int(st.error_code()), st.error_message().c_str());
  testing::expect_released(*watcher_, "after the header-only batch", kEndedWithin);
}

// A group sent whole (WritesDone) whose client never reads a result: the
// server computes it, cannot send C, and ends the stream at the idle timeout,
// freeing what it held.
TEST_F(BatchAttacks, AGroupWhoseResultsAreNeverReadIsEnded) {
  int64_t a_elements = 0, b_elements = 0;
  const v1::MultiplyRequest header = group_header(&a_elements, &b_elements);
  // The client's receive window stays at its initial size (no BDP probing grows it while
  // nothing is read), so the server cannot push C's 22 MiB into the client's buffers.
  grpc::ChannelArguments no_growth;
  no_growth.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  auto reader = v1::Sgemm::NewStub(
      grpc::CreateCustomChannel(server_->tcp_address(), grpc::InsecureChannelCredentials(), no_growth));
  grpc::ClientContext ctx;
  auto stream = reader->Multiply(&ctx);
  ASSERT_TRUE(stream->Write(header));
  ASSERT_TRUE(stream->Write(chunk(v1::MATRIX_B, 0, b_elements)));
  ASSERT_TRUE(stream->Write(chunk(v1::MATRIX_A, 0, a_elements)));
  ASSERT_TRUE(stream->WritesDone());
  const auto held = testing::info_when(*watcher_, [](const ServerInfo& i) { return i.host_bytes_in_use > 0; });
  EXPECT_GT(held.host_bytes_in_use, 0) << "the group never reached the server";
  // Never read: wait (on the server's log, not reading) until it lets the request go.
  const auto t0 = Clock::now();
  auto released = std::async(
      std::launch::async, [&] { return server_->log_has("the client read no part of C", int(kEndedWithin.count())); });
  testing::expect_traffic_served(normal_traffic_until(released), "beside a group never read");
  ASSERT_EQ(released.wait_for(kEndedWithin), std::future_status::ready);
  EXPECT_TRUE(released.get()) << "the unread group's stream was never reset: " << server_->log().substr(0, 4000);
  std::printf("[ info ] a group whose results were never read was let go after %.2f s\n",
              std::chrono::duration<double>(Clock::now() - t0).count());
  const grpc::Status st = finish(*stream);
  EXPECT_FALSE(st.ok()) << "a group whose results were never read answered OK";
  std::printf("[ info ] its status: %d %s\n", int(st.error_code()), st.error_message().c_str());
  testing::expect_released(*watcher_, "after the unread group", kEndedWithin);
}

// A stream opened for a batch that never sends its header: ended at the idle
// timeout, holding nothing meanwhile.
TEST_F(BatchAttacks, AnIdleStreamIsEndedHoldingNothing) {
  grpc::ClientContext ctx;
  auto stream = stub_->Multiply(&ctx);
  const auto open = testing::info_when(*watcher_, [](const ServerInfo& i) { return i.open_streams >= 1; });
  ASSERT_GE(open.open_streams, 1) << "the idle stream never reached the server";
  EXPECT_EQ(open.host_bytes_in_use, 0) << "an idle stream holds request memory";
  auto ended = std::async(std::launch::async, [&] { return finish(*stream); });
  testing::expect_traffic_served(normal_traffic_until(ended), "beside an idle stream");
  ASSERT_EQ(ended.wait_for(kEndedWithin), std::future_status::ready) << "the idle stream was never ended";
  const grpc::Status st = ended.get();
  EXPECT_FALSE(st.ok()) << "an idle stream answered OK";
  std::printf("[ info ] an idle stream was ended: %d %s\n", int(st.error_code()), st.error_message().c_str());
  testing::expect_released(*watcher_, "after the idle stream", kEndedWithin);
}

}  // namespace
}  // namespace sgemm
