// MultiplyUnary (one product in one message each way) against the real server:
// results against the fp64 reference on odd shapes with alpha, beta, C and
// op(A), op(B); the client's choice between it and the stream; bad input
// refused with the stream's statuses, naming the field; a product over the
// unary limit refused with a message that says to use the stream; tokens and
// quotas; the timings record and the metrics of a unary request; an answer
// the client never takes is reset at --idle-timeout and its memory freed.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "client/sgemm_client.h"
#include "common/reference_gemm.h"
#include "sgemm/v1/sgemm.grpc.pb.h"
#include "tests/e2e/in_process_server.h"
#include "tests/e2e/metrics_scrape.h"
#include "tests/e2e/raw_h2_client.h"
#include "tests/e2e/server_process.h"

namespace sgemm {
namespace {

namespace v1 = ::sgemm::v1;
using grpc::StatusCode;
using testing::InProcessServer;

// The stored form of a logical rows x cols row-major `x`: itself, or its transpose under kT.
std::vector<float> stored(const std::vector<float>& x, int64_t rows, int64_t cols, Op op) {
  if (op == Op::kN) return x;
  std::vector<float> t(x.size());
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) t[std::size_t(j * rows + i)] = x[std::size_t(i * cols + j)];
  return t;
}

class UnaryE2E : public testing::SuiteServer<UnaryE2E> {
 public:
  static void configure(ServerOptions& o, EngineOptions&) {
    o.service.log_lines_per_second = 0;
    o.service.limits.max_matrix_elements = 4000000;
  }

 protected:
  static std::unique_ptr<Client> client(MultiplyRpc rpc) {
    ClientOptions o;
    o.rpc = rpc;
    o.retry.max_attempts = 1;
    o.transport = Transport::kGrpc;  // the Unix socket too (SGEMM_E2E_TRANSPORT=shm): the unary call, not a region
    return Client::connect(server_->address(), o);
  }
  // A product with random operands through `c`; EXPECTs it ran on `want` and matches the fp64 reference.
  static void multiply_and_check(Client& c, GemmShape s, float alpha, float beta, bool with_c, Op op_a, Op op_b,
                                 MultiplyRpc want) {
    SCOPED_TRACE(std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k) +
                 " op_a=" + (op_a == Op::kT ? "t" : "n") + " op_b=" + (op_b == Op::kT ? "t" : "n") +
                 " with_c=" + std::to_string(with_c));
    const uint64_t seed = std::random_device{}();
    std::vector<float> a(std::size_t(s.m * s.k)), b(std::size_t(s.k * s.n)), c0(std::size_t(s.m * s.n));
    fill_random(a, seed);
    fill_random(b, seed + 1);
    fill_random(c0, seed + 2);
    const std::vector<float> a_sent = stored(a, s.m, s.k, op_a), b_sent = stored(b, s.k, s.n, op_b);
    MultiplyOptions opt;
    opt.alpha = alpha;
    opt.beta = beta;
    opt.op_a = op_a;
    opt.op_b = op_b;
    auto r = c.multiply(s, a_sent.data(), b_sent.data(), with_c ? c0.data() : nullptr, opt);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->rpc, want) << multiply_rpc_name(r->rpc);
    ASSERT_EQ(int64_t(r->c.size()), s.m * s.n);
    const auto v = verify_gemm(s.m, s.n, s.k, alpha, a.data(), b.data(), beta, with_c ? c0.data() : nullptr,
                               r->c.data(), rows_to_verify(s.m, s.n, s.k, seed));
    EXPECT_TRUE(v.passed(kSgemmTolerance)) << "max rel error " << v.max_rel_error;
    EXPECT_EQ(r->bytes_sent, (s.m * s.k + s.k * s.n + (with_c ? s.m * s.n : 0)) * 4);
    EXPECT_EQ(r->bytes_received, s.m * s.n * 4);
    EXPECT_EQ(r->summary.bytes_in, r->bytes_sent);  // the server's view agrees
    EXPECT_FALSE(r->summary.devices.empty());
    EXPECT_FALSE(r->summary.request_id.empty());
  }
  // The typed stub's MultiplyUnary (protobuf's own encoding, not the client library's).
  static grpc::Status call(const v1::MultiplyUnaryRequest& req, v1::MultiplyUnaryResponse* resp = nullptr,
                           const std::string& token = "") {
    auto stub = v1::Sgemm::NewStub(grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
    v1::MultiplyUnaryResponse ignored;
    return stub->MultiplyUnary(&ctx, req, resp ? resp : &ignored);
  }
  static void expect(const grpc::Status& s, StatusCode code, const std::string& words) {
    EXPECT_EQ(s.error_code(), code) << s.error_message();
    EXPECT_NE(s.error_message().find(words), std::string::npos) << "message: " << s.error_message();
  }
};

v1::MultiplyUnaryRequest request(int64_t m, int64_t n, int64_t k, bool has_c = false) {
  v1::MultiplyUnaryRequest r;
  auto* h = r.mutable_header();
  h->set_m(m);
  h->set_n(n);
  h->set_k(k);
  h->set_has_c(has_c);
  return r;
}

void add_chunk(v1::MultiplyUnaryRequest* r, v1::Matrix m, int64_t offset, int64_t count, float value = 0.5f) {
  auto* c = r->add_chunks();
  c->set_matrix(m);
  c->set_offset(offset);
  std::vector<float> v(std::size_t(count), value);
  c->set_data(std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4));
}

TEST_F(UnaryE2E, OddShapesWithAlphaBetaCAndOpsMatchTheFp64Reference) {
  auto c = client(MultiplyRpc::kUnary);
  const std::vector<GemmShape> shapes = {{1, 1, 1}, {37, 53, 29}, {64, 64, 64}, {129, 67, 255}, {1, 300, 77}};
  for (const GemmShape& s : shapes)
    for (Op op_a : {Op::kN, Op::kT})
      for (Op op_b : {Op::kN, Op::kT}) {
        multiply_and_check(*c, s, 1.0f, 0.0f, false, op_a, op_b, MultiplyRpc::kUnary);
        multiply_and_check(*c, s, -1.5f, 0.75f, true, op_a, op_b, MultiplyRpc::kUnary);
      }
  testing::expect_released(*c, "request buffers leaked");
}

TEST_F(UnaryE2E, AutoTakesTheUnaryCallWhenTheProductFitsAndTheStreamOtherwise) {
  auto c = client(MultiplyRpc::kAuto);
  multiply_and_check(*c, {64, 64, 64}, 1.0f, 0.0f, false, Op::kN, Op::kN, MultiplyRpc::kUnary);
  multiply_and_check(*c, {500, 300, 700}, 2.0f, 0.5f, true, Op::kT, Op::kN, MultiplyRpc::kUnary);  // 3.5 MB in
  // C alone over the limit (1100 x 1100 floats = 4.84 MB): the stream.
  multiply_and_check(*c, {1100, 1100, 3}, 1.0f, 0.0f, false, Op::kN, Op::kT, MultiplyRpc::kStream);
  // A and B over it, C small: the stream.
  multiply_and_check(*c, {16, 16, 40000}, 1.0f, 0.0f, false, Op::kN, Op::kN, MultiplyRpc::kStream);
}

TEST_F(UnaryE2E, TheStreamStillWorksWhenForced) {
  auto c = client(MultiplyRpc::kStream);
  for (Op op : {Op::kN, Op::kT}) {
    multiply_and_check(*c, {37, 53, 29}, 1.5f, -0.25f, true, op, Op::kN, MultiplyRpc::kStream);
    multiply_and_check(*c, {64, 64, 64}, 1.0f, 0.0f, false, Op::kN, op, MultiplyRpc::kStream);
  }
}

TEST_F(UnaryE2E, AProductOverTheUnaryLimitIsRefusedSayingToUseTheStream) {
  auto c = client(MultiplyRpc::kUnary);
  std::vector<float> a(1100 * 3, 1.0f), b(3 * 1100, 1.0f);
  auto r = c->multiply({1100, 1100, 3}, a.data(), b.data(), nullptr, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), sgemm::StatusCode::kInvalidArgument) << r.status().to_string();
  EXPECT_NE(r.status().message().find("use the Multiply stream"), std::string::npos) << r.status().to_string();
  EXPECT_NE(r.status().message().find("Limits.max_unary_bytes"), std::string::npos) << r.status().to_string();
  // GetInfo gives the limit.
  auto info = c->info();
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  testing::expect_released(*c, "a refused unary request left memory held");
}

TEST_F(UnaryE2E, BadHeadersGetTheStreamsStatusesNamingTheField) {
  expect(call(request(0, 4, 4)), StatusCode::INVALID_ARGUMENT, "header.m must be >= 1, got 0");
  expect(call(request(4, -2, 4)), StatusCode::INVALID_ARGUMENT, "header.n must be >= 1, got -2");
  auto r = request(2, 2, 2);
  r.mutable_header()->set_alpha(std::numeric_limits<float>::quiet_NaN());
  expect(call(r), StatusCode::INVALID_ARGUMENT, "header.alpha must be finite");
  r = request(2, 2, 2);
  r.mutable_header()->set_kernel(static_cast<v1::Kernel>(42));
  expect(call(r), StatusCode::INVALID_ARGUMENT, "header.kernel has unknown value 42");
  r = request(2, 2, 2);
  r.mutable_header()->set_op_b(static_cast<v1::Op>(5));
  expect(call(r), StatusCode::INVALID_ARGUMENT, "header.op_b");
  expect(call(request(4000, 1001, 1)), StatusCode::RESOURCE_EXHAUSTED, "elements");  // over max_matrix_elements
  // What only the stream carries.
  r = request(2, 2, 2);
  r.mutable_header()->set_batch(3);
  expect(call(r), StatusCode::INVALID_ARGUMENT, "header.batch");
  r = request(2, 2, 2);
  r.mutable_header()->set_stripes(2);
  expect(call(r), StatusCode::INVALID_ARGUMENT, "header.stripes");
  r = request(2, 2, 2);
  r.mutable_header()->set_keep_result(true);
  expect(call(r), StatusCode::INVALID_ARGUMENT, "header.keep_result");
  // A handle is carried (tests/e2e/resident_test.cc), and checked as on the stream.
  r = request(2, 2, 2);
  r.mutable_header()->set_a_handle("0123456789abcdef0123456789abcdef");
  add_chunk(&r, v1::MATRIX_B, 0, 4);
  expect(call(r), StatusCode::NOT_FOUND, "0123456789abcdef0123456789abcdef");
  r = request(2, 2, 2);
  r.mutable_header()->set_a_handle("0123456789abcdef0123456789abcdef");
  add_chunk(&r, v1::MATRIX_A, 0, 4);  // a chunk of an operand named by handle
  add_chunk(&r, v1::MATRIX_B, 0, 4);
  expect(call(r), StatusCode::NOT_FOUND, "0123456789abcdef0123456789abcdef");
  r = request(2, 2, 2);
  r.mutable_header()->mutable_b_at()->set_row(0);  // an offset without its handle, as the stream says it
  expect(call(r), StatusCode::INVALID_ARGUMENT, "header.b_at is set but header.b_handle is not");
  // Regions are carried (tests/e2e/shm_test.cc) on the Unix socket alone, with no chunk besides.
  r = request(2, 2, 2);
  r.mutable_header()->mutable_a_region()->set_region("r");
  r.mutable_header()->mutable_b_region()->set_region("r");
  if (server_->address().rfind("unix:", 0) != 0) expect(call(r), StatusCode::FAILED_PRECONDITION, "Unix-domain socket");
  add_chunk(&r, v1::MATRIX_A, 0, 4);
  expect(call(r), StatusCode::INVALID_ARGUMENT, "no chunk may follow");
  r = request(2, 2, 2);
  r.mutable_header()->mutable_a_device()->set_device("GPU-0");
  expect(call(r), StatusCode::INVALID_ARGUMENT, "header.a_device");
}

TEST_F(UnaryE2E, BadChunksGetTheStreamsStatusesNamingTheChunk) {
  v1::MultiplyUnaryRequest none;
  add_chunk(&none, v1::MATRIX_A, 0, 4);
  expect(call(none), StatusCode::INVALID_ARGUMENT, "MultiplyUnaryRequest.header is missing");
  expect(call(v1::MultiplyUnaryRequest()), StatusCode::INVALID_ARGUMENT, "MultiplyUnaryRequest.header is missing");
  auto r = request(2, 2, 2);
  add_chunk(&r, v1::MATRIX_A, 0, 3);
  add_chunk(&r, v1::MATRIX_A, 3, 2);
  expect(call(r), StatusCode::INVALID_ARGUMENT, "overruns");
  r = request(2, 2, 2);
  add_chunk(&r, v1::MATRIX_A, 1, 2);
  expect(call(r), StatusCode::INVALID_ARGUMENT, "in order");
  r = request(2, 2, 2);
  add_chunk(&r, v1::MATRIX_A, 0, 4);
  add_chunk(&r, v1::MATRIX_B, 0, 4);
  add_chunk(&r, v1::MATRIX_C, 0, 4);
  expect(call(r), StatusCode::INVALID_ARGUMENT, "declared no C");
  r = request(2, 2, 2);
  add_chunk(&r, v1::MATRIX_A, 0, 4);
  add_chunk(&r, static_cast<v1::Matrix>(7), 0, 4);
  expect(call(r), StatusCode::INVALID_ARGUMENT, "MultiplyUnaryRequest.chunks[1]: chunk.matrix has unknown value 7");
  // B never sent: the status names it.
  r = request(2, 2, 2);
  add_chunk(&r, v1::MATRIX_A, 0, 4);
  expect(call(r), StatusCode::INVALID_ARGUMENT, "B");
  // A whole request through protobuf's own encoding is answered with C and the summary.
  r = request(2, 3, 2, true);
  r.mutable_header()->set_beta(2.0f);
  add_chunk(&r, v1::MATRIX_C, 0, 6, 1.0f);
  add_chunk(&r, v1::MATRIX_B, 0, 6, 2.0f);
  add_chunk(&r, v1::MATRIX_A, 0, 4, 0.5f);
  v1::MultiplyUnaryResponse resp;
  const grpc::Status st = call(r, &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  ASSERT_EQ(resp.c().data().size(), 6u * 4);
  EXPECT_EQ(resp.c().matrix(), v1::MATRIX_C);
  std::vector<float> out(6);
  std::memcpy(out.data(), resp.c().data().data(), 24);
  for (float x : out) EXPECT_FLOAT_EQ(x, 2.0f * 0.5f * 2.0f + 2.0f);  // k * a * b + beta * c
  EXPECT_EQ(resp.summary().bytes_received(), (4 + 6 + 6) * 4);
  EXPECT_EQ(resp.summary().bytes_sent(), 6 * 4);
  EXPECT_FALSE(resp.summary().request_id().empty());
  auto c = client(MultiplyRpc::kUnary);
  testing::expect_released(*c, "a refused unary request left memory held");
}

TEST_F(UnaryE2E, TheTimingsRecordAndTheLogSayUnary) {
  auto c = client(MultiplyRpc::kUnary);
  std::vector<float> a(3 * 5, 1.0f), b(5 * 7, 1.0f);
  MultiplyOptions opt;
  opt.trace = true;
  auto r = c->multiply({3, 7, 5}, a.data(), b.data(), nullptr, opt);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_FALSE(r->summary.trace_json.empty());
  const std::string id = r->summary.request_id;
  EXPECT_TRUE(server_->log_has("request id=" + id + " peer=")) << server_->log();
  EXPECT_TRUE(server_->log_has("rpc=unary m=3 n=7 k=5")) << server_->log();
  // The timings record (written before the answer went out).
  std::ifstream timings(server_->dir() + "/logs/timings.jsonl");
  std::string line, mine;
  while (std::getline(timings, line))
    if (line.find("\"request_id\":\"" + id + "\"") != std::string::npos) mine = line;
  ASSERT_FALSE(mine.empty()) << "no timings.jsonl line for request " << id;
  const auto j = nlohmann::json::parse(mine);
  EXPECT_EQ(j["shape"]["m"], 3);
  EXPECT_NE(mine.find("\"rpc\":\"unary\""), std::string::npos) << mine;
}

// Tokens: the unary call authenticates and admits as the stream does.
TEST(UnaryAuthE2E, TokensAndRightsApply) {
  const std::string dir = testing::make_temp_dir();
  const std::string file = dir + "/tokens.json";
  std::ofstream(file) << R"({"clients": [
    {"name": "alice", "token": "alice-token-0123456789abcdef"},
    {"name": "small", "token": "small-bytes-token-0123456789", "max_bytes_in_flight": 2000},
    {"name": "reader", "token": "reader-token-0123456789abcdef", "multiply": false}
  ]})";
  InProcessServer server([&](ServerOptions& o, EngineOptions&) {
    o.auth_tokens = file;
    o.service.log_lines_per_second = 0;
  });
  ASSERT_TRUE(server.running()) << server.log();
  auto with = [&](const std::string& token) {
    ClientOptions o;
    o.token = token;
    o.rpc = MultiplyRpc::kUnary;
    o.retry.max_attempts = 1;
    return Client::connect(server.tcp_address(), o);
  };
  std::vector<float> a(20 * 20, 1.0f), b(20 * 20, 1.0f);
  auto r = with("")->multiply({20, 20, 20}, a.data(), b.data(), nullptr, {});
  EXPECT_EQ(r.status().code(), sgemm::StatusCode::kUnauthenticated) << r.status().to_string();
  r = with("nobody-knows-this-token-012345")->multiply({20, 20, 20}, a.data(), b.data(), nullptr, {});
  EXPECT_EQ(r.status().code(), sgemm::StatusCode::kUnauthenticated) << r.status().to_string();
  r = with("reader-token-0123456789abcdef")->multiply({20, 20, 20}, a.data(), b.data(), nullptr, {});
  EXPECT_EQ(r.status().code(), sgemm::StatusCode::kPermissionDenied) << r.status().to_string();
  EXPECT_NE(r.status().message().find("may not call Multiply"), std::string::npos) << r.status().to_string();
  // 20 x 20 x 20: 4800 bytes of A, B and C, over small's 2000.
  r = with("small-bytes-token-0123456789")->multiply({20, 20, 20}, a.data(), b.data(), nullptr, {});
  EXPECT_EQ(r.status().code(), sgemm::StatusCode::kPermissionDenied) << r.status().to_string();
  r = with("alice-token-0123456789abcdef")->multiply({20, 20, 20}, a.data(), b.data(), nullptr, {});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->rpc, MultiplyRpc::kUnary);
  for (float x : r->c) EXPECT_FLOAT_EQ(x, 20.0f);
  EXPECT_TRUE(server.log_has("client=alice rpc=unary")) << server.log();
  EXPECT_EQ(server.stop(), 0);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

// Host memory: a unary request that finds the budget full waits for it as a
// stream's first chunk does (queued, holding nothing of the budget), is
// cancelled out of the queue by its deadline, and computes once memory is freed.
TEST(UnaryMemoryE2E, AUnaryRequestWaitsForMemoryAndLeavesTheQueueAtItsDeadline) {
  const int64_t budget = 4 << 20;
  InProcessServer server([&](ServerOptions& o, EngineOptions&) {
    o.service.host_memory_bytes = budget;
    o.service.log_lines_per_second = 0;
  });
  ASSERT_TRUE(server.running()) << server.log();
  const std::string addr = server.tcp_address();
  ClientOptions co;
  co.rpc = MultiplyRpc::kUnary;
  co.retry.max_attempts = 1;
  auto c = Client::connect(addr, co);
  // A stream holding 3 MiB of the 4: a 512^3 request whose A is in and whose B is not.
  auto stub = v1::Sgemm::NewStub(grpc::CreateChannel(addr, grpc::InsecureChannelCredentials()));
  grpc::ClientContext held_ctx;
  auto held = stub->Multiply(&held_ctx);
  v1::MultiplyRequest h;
  h.mutable_header()->set_m(512);
  h.mutable_header()->set_n(512);
  h.mutable_header()->set_k(512);
  ASSERT_TRUE(held->Write(h));
  auto chunk = [](v1::Matrix m, float value) {
    v1::MultiplyRequest r;
    r.mutable_chunk()->set_matrix(m);
    std::vector<float> v(512 * 512, value);
    r.mutable_chunk()->set_data(std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4));
    return r;
  };
  ASSERT_TRUE(held->Write(chunk(v1::MATRIX_A, 1.0f)));
  const int64_t held_bytes = 3 * 512 * 512 * 4;
  EXPECT_EQ(
      testing::info_when(*c, [&](const ServerInfo& i) { return i.host_bytes_in_use == held_bytes; }).host_bytes_in_use,
      held_bytes);
  // 256 x 512 x 512 needs 1.5 MiB more: it waits, and its deadline takes it out of the queue.
  std::vector<float> a(256 * 512, 1.0f), b(512 * 512, 0.5f);
  MultiplyOptions quick;
  quick.timeout = std::chrono::milliseconds(300);
  auto r = c->multiply({256, 512, 512}, a.data(), b.data(), nullptr, quick);
  EXPECT_EQ(r.status().code(), sgemm::StatusCode::kDeadlineExceeded) << r.status().to_string();
  EXPECT_EQ(testing::info_when(*c, [](const ServerInfo& i) { return i.queued == 0; }).queued, 0)
      << "the cancelled wait stayed queued";
  // Again without a deadline: it waits (queued) until the stream completes and frees its memory.
  std::atomic<bool> done{false};
  StatusOr<MultiplyResult> waited = Internal("not run");
  std::thread second([&] {
    waited = c->multiply({256, 512, 512}, a.data(), b.data(), nullptr, {});
    done = true;
  });
  const ServerInfo waiting = testing::info_when(*c, [](const ServerInfo& i) { return i.queued >= 1; });
  EXPECT_GE(waiting.queued, 1);
  EXPECT_FALSE(done.load()) << "the unary request did not wait for memory";
  EXPECT_LE(waiting.host_bytes_in_use, budget);
  ASSERT_TRUE(held->Write(chunk(v1::MATRIX_B, 2.0f)));
  held->WritesDone();
  v1::MultiplyResponse resp;
  while (held->Read(&resp)) {
  }
  EXPECT_TRUE(held->Finish().ok());
  second.join();
  ASSERT_TRUE(waited.ok()) << waited.status().to_string();
  EXPECT_EQ(waited->rpc, MultiplyRpc::kUnary);
  for (float x : waited->c) ASSERT_FLOAT_EQ(x, 256.0f);  // k * 1 * 0.5
  testing::expect_released(*c, "memory held after the wait");
  EXPECT_EQ(server.stop(), 0);
}

// An answer the client never takes: a 1000 x 1000 C (4 MB, far over HTTP/2's
// initial window of 64 KiB) for a raw client that never sends WINDOW_UPDATE,
// so gRPC can neither deliver it nor report the call done. --idle-timeout
// after the answer went to gRPC the server resets the call (RST_STREAM) and
// frees its memory; a normal request from another client is served beside it.
TEST(UnaryIdleE2E, AnAnswerTheClientNeverTakesIsResetAtTheIdleTimeoutAndItsMemoryFreed) {
  // 2 s: the call is seen holding its memory well before the timeout ends it, even on a loaded machine.
  InProcessServer server([](ServerOptions& o, EngineOptions&) {
    o.idle_timeout_s = 2;
    o.service.log_lines_per_second = 0;
    o.metrics_listen = "127.0.0.1:0";
  });
  ASSERT_TRUE(server.running()) << server.log();
  const std::string addr = server.tcp_address();
  const int metrics = server.server().metrics_port();
  const std::string cancelled = R"(sgemm_requests_total{client="",code="CANCELLED"})";
  const double cancelled_before = testing::value(testing::samples(testing::scrape(metrics)), cancelled);
  ClientOptions co;
  co.rpc = MultiplyRpc::kUnary;
  co.retry.max_attempts = 1;
  co.transport = Transport::kGrpc;
  auto probe = Client::connect(addr, co);

  // k = 1: cheap to send and to compute; C alone is what the answer carries.
  constexpr int64_t kM = 1000, kN = 1000;
  v1::MultiplyUnaryRequest req = request(kM, kN, 1);
  add_chunk(&req, v1::MATRIX_A, 0, kM, 1.0f);
  add_chunk(&req, v1::MATRIX_B, 0, kN, 2.0f);
  testing::RawH2Client stalled;
  ASSERT_TRUE(stalled.connect(server.server().port(), "127.0.0.2"));
  const uint32_t stream = stalled.open_unary("/sgemm.v1.Sgemm/MultiplyUnary", req.SerializeAsString());
  ASSERT_NE(stream, 0u);
  // The answer went to gRPC (its log line is written just before) and
  // cannot leave: the call still holds C (and A and B).
  ASSERT_TRUE(server.log_has("rpc=unary m=1000 n=1000 k=1 ")) << server.log();
  const auto held = probe->info();
  ASSERT_TRUE(held.ok()) << held.status().to_string();
  EXPECT_GE(held->host_bytes_in_use, kM * kN * 4) << "the stalled call holds no memory";

  // Another client is served correctly beside it (odd shape, fp64 reference).
  {
    const GemmShape s{129, 63, 257};
    const uint64_t seed = std::random_device{}();
    std::vector<float> a(std::size_t(s.m * s.k)), b(std::size_t(s.k * s.n));
    fill_random(a, seed);
    fill_random(b, seed + 1);
    auto r = Client::connect(addr, co)->multiply(s, a.data(), b.data(), nullptr, {});
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->rpc, MultiplyRpc::kUnary);
    const auto v = verify_gemm(s.m, s.n, s.k, 1.0f, a.data(), b.data(), 0.0f, nullptr, r->c.data(),
                               rows_to_verify(s.m, s.n, s.k, seed));
    EXPECT_TRUE(v.passed(kSgemmTolerance)) << "max rel error " << v.max_rel_error;
  }

  // The server resets the stalled call and keeps the connection (gRPC ends
  // the stream with its trailers, then RST_STREAM NO_ERROR).
  EXPECT_GE(stalled.wait_reset(stream, testing::ServerLog::kEventWaitMs), 0) << "the stalled call was not reset";
  EXPECT_LE(stalled.data_bytes(stream), 65535) << "more of the answer came than the window allows";
  // Its status, before the reset: CANCELLED (gRPC writes the trailers' grpc-status as an HPACK literal).
  EXPECT_NE(stalled.headers(stream).find(std::string("grpc-status\x01") + "1"), std::string::npos)
      << "the trailers carry no grpc-status 1 (CANCELLED)";
  EXPECT_FALSE(stalled.closed_by_server()) << "the server closed the connection instead of resetting the call";
  // Its memory goes back: the budget is idle again, as GetInfo and /metrics say.
  EXPECT_EQ(testing::info_when(*probe, [](const ServerInfo& i) { return i.host_bytes_in_use == 0; }).host_bytes_in_use,
            0);
  const auto after = testing::samples(testing::scrape(metrics));
  EXPECT_EQ(testing::value(after, "sgemm_host_memory_in_use_bytes"), 0.0);
  // Counted and logged as the stream counts a reset for an unread answer.
  EXPECT_EQ(testing::value(after, cancelled) - cancelled_before, 1.0);
  ASSERT_TRUE(server.log_has("reset by the server")) << server.log();
  {
    const std::string log = server.log();
    const auto at = log.find("reset by the server");
    const auto line_start = log.rfind('\n', at) + 1;
    const std::string line = log.substr(line_start, at - line_start);
    EXPECT_NE(line.find("peer=ipv4:127.0.0.2:"), std::string::npos) << line;
    EXPECT_NE(line.find("rpc=unary m=1000 n=1000 k=1 status=CANCELLED"), std::string::npos) << line;
    EXPECT_NE(log.find("--idle-timeout", at), std::string::npos) << log.substr(at);
  }
  testing::expect_released(*probe, "the reset call left memory held");
  EXPECT_EQ(server.stop(), 0);
}

}  // namespace
}  // namespace sgemm
