// Resident matrices end to end (docs/resident.md): PutMatrix, handles in
// Multiply headers for every combination of operands, kept results and
// chains of them, delete during use, eviction order, NOT_FOUND, another
// client's handle, the budget's message, and the CLI. Every result is checked
// against the fp64 reference on fresh random inputs, odd shapes and round.
// Runs on the backend SGEMM_E2E_BACKEND names (cpu in CI; cuda through
// scripts/gpu-check.sh resident).
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <thread>

#include "client/sgemm_client.h"
#include "common/reference_gemm.h"
#include "sgemm/v1/sgemm.grpc.pb.h"
#include "tests/e2e/in_process_server.h"

namespace sgemm {
namespace {

namespace v1 = ::sgemm::v1;
using testing::InProcessServer;

uint64_t fresh_seed() { return std::random_device{}() | (uint64_t(std::random_device{}()) << 32); }

std::vector<float> random_matrix(int64_t rows, int64_t cols, uint64_t seed) {
  std::vector<float> v(std::size_t(rows * cols));
  fill_random(v, seed);
  return v;
}

// rows x cols product of double-precision row-major matrices: the chain's reference.
std::vector<double> gemm_fp64(const std::vector<double>& a, const std::vector<double>& b, int64_t m, int64_t n,
                              int64_t k) {
  std::vector<double> c(std::size_t(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p) {
      const double x = a[std::size_t(i * k + p)];
      for (int64_t j = 0; j < n; ++j) c[std::size_t(i * n + j)] += x * b[std::size_t(p * n + j)];
    }
  return c;
}

class ResidentE2E : public testing::SuiteServer<ResidentE2E> {
 public:
  static void configure(ServerOptions& o, EngineOptions&) { o.service.log_lines_per_second = 0; }

 protected:
  void SetUp() override {
    ASSERT_TRUE(server_->running()) << server_->log();
    ClientOptions o;
    o.retry.max_attempts = 1;
    client_ = Client::connect(server_->tcp_address(), o);
  }
  std::string put(const std::vector<float>& m, int64_t rows, int64_t cols, bool evictable = false) {
    PutOptions po;
    po.evictable = evictable;
    auto r = client_->put(rows, cols, m.data(), po);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    if (!r.ok()) return {};
    EXPECT_EQ(r->handle.size(), 32u);
    EXPECT_EQ(r->bytes, rows * cols * 4);
    return r->handle;
  }

  std::unique_ptr<Client> client_;
};

// A, B and C each sent or named by handle: all 8 combinations with an input C
// and the 4 without, on an odd shape and a round one, on the stream and on
// MultiplyUnary (the header names the handles there too).
TEST_F(ResidentE2E, EveryCombinationOfSentAndResidentOperands) {
  for (const MultiplyRpc rpc : {MultiplyRpc::kStream, MultiplyRpc::kUnary}) {
    ClientOptions co;
    co.retry.max_attempts = 1;
    co.rpc = rpc;
    const auto client = Client::connect(server_->tcp_address(), co);
    for (const GemmShape s : {GemmShape{37, 29, 53}, GemmShape{128, 64, 256}}) {
      const uint64_t seed = fresh_seed();
      const auto a = random_matrix(s.m, s.k, seed), b = random_matrix(s.k, s.n, seed + 1),
                 c = random_matrix(s.m, s.n, seed + 2);
      const std::string ha = put(a, s.m, s.k), hb = put(b, s.k, s.n), hc = put(c, s.m, s.n);
      ASSERT_FALSE(ha.empty() || hb.empty() || hc.empty());
      for (int with_c = 0; with_c < 2; ++with_c)
        for (int mask = 0; mask < (with_c ? 8 : 4); ++mask) {
          SCOPED_TRACE(std::string(multiply_rpc_name(rpc)) + " shape " + std::to_string(s.m) + "x" +
                       std::to_string(s.n) + "x" + std::to_string(s.k) + " seed " + std::to_string(seed) + " mask " +
                       std::to_string(mask) + " c " + std::to_string(with_c));
          MultiplyOptions o;
          o.alpha = 1.5f;
          o.beta = with_c ? 0.5f : 0.0f;
          if (mask & 1) o.a_handle = ha;
          if (mask & 2) o.b_handle = hb;
          if (mask & 4) o.c_handle = hc;
          const float* c_sent = with_c && !(mask & 4) ? c.data() : nullptr;
          auto r = client->multiply(s, (mask & 1) ? nullptr : a.data(), (mask & 2) ? nullptr : b.data(), c_sent, o);
          ASSERT_TRUE(r.ok()) << r.status().to_string();
          EXPECT_EQ(r->rpc, rpc);
          const int64_t sent = ((mask & 1) ? 0 : s.m * s.k) + ((mask & 2) ? 0 : s.k * s.n) + (c_sent ? s.m * s.n : 0);
          EXPECT_EQ(r->summary.bytes_in, sent * 4);
          const auto v =
              verify_gemm(s.m, s.n, s.k, o.alpha, a.data(), b.data(), o.beta, with_c ? c.data() : nullptr, r->c.data());
          EXPECT_TRUE(v.passed(kSgemmTolerance)) << "max rel error " << v.max_rel_error;
        }
      for (const auto& h : {ha, hb, hc}) EXPECT_TRUE(client_->remove(h).ok());
    }
  }
}

// The client's own choice (rpc auto): a product whose operands are named by
// handle and whose sent part fits goes as one MultiplyUnary; a kept result
// takes the stream. A block of a resident B (b_at) on both.
TEST_F(ResidentE2E, AutoSendsHandleProductsAsOneMessageAndKeptResultsOnTheStream) {
  const int64_t m = 3, n = 41, k = 67;
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const auto a = random_matrix(m, k, seed), big = random_matrix(k + 5, n + 9, seed + 1);
  const std::string hb = put(big, k + 5, n + 9);
  ASSERT_FALSE(hb.empty());
  std::vector<float> b(std::size_t(k * n));  // the k x n block at (5, 9)
  for (int64_t i = 0; i < k; ++i)
    for (int64_t j = 0; j < n; ++j) b[std::size_t(i * n + j)] = big[std::size_t((i + 5) * (n + 9) + j + 9)];
  MultiplyOptions o;
  o.b_handle = hb;
  o.b_at = MatrixOffset{5, 9};
  o.alpha = -0.75f;
  for (const bool keep : {false, true}) {
    o.keep_result = keep;
    o.send_c = keep;
    auto r = client_->multiply({m, n, k}, a.data(), nullptr, nullptr, o);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->rpc, keep ? MultiplyRpc::kStream : MultiplyRpc::kUnary);
    EXPECT_EQ(r->summary.bytes_in, m * k * 4);
    ASSERT_EQ(r->c.size(), std::size_t(m * n));
    const auto v = verify_gemm(m, n, k, o.alpha, a.data(), b.data(), 0.0f, nullptr, r->c.data());
    EXPECT_TRUE(v.passed(kSgemmTolerance)) << "max rel error " << v.max_rel_error;
    if (keep) {
      EXPECT_TRUE(client_->remove(r->summary.result_handle).ok());
    }
  }
  EXPECT_TRUE(client_->remove(hb).ok());
}

// C1 = A B kept resident (its bytes not sent), then C2 = C1 B and C3 = C2 B
// from handles alone, against an fp64 chain.
TEST_F(ResidentE2E, KeptResultChainsMatchTheFp64Reference) {
  const int64_t m = 45, n = 64, k = 64;  // B square so the chain continues
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const auto a = random_matrix(m, k, seed);
  auto b = random_matrix(k, n, seed + 1);
  for (auto& x : b) x *= 0.25f;  // keep the chain's values near 1
  const std::string hb = put(b, k, n);
  MultiplyOptions keep;
  keep.b_handle = hb;
  keep.keep_result = true;
  auto c1 = client_->multiply({m, n, k}, a.data(), nullptr, nullptr, keep);
  ASSERT_TRUE(c1.ok()) << c1.status().to_string();
  ASSERT_EQ(c1->summary.result_handle.size(), 32u);
  EXPECT_EQ(c1->bytes_received, 0);  // kept without send_c: no byte of C came back
  EXPECT_TRUE(c1->c.empty());

  MultiplyOptions chain;
  chain.a_handle = c1->summary.result_handle;
  chain.b_handle = hb;
  chain.keep_result = true;
  auto c2 = client_->multiply({m, n, k}, nullptr, nullptr, nullptr, chain);
  ASSERT_TRUE(c2.ok()) << c2.status().to_string();
  EXPECT_EQ(c2->summary.bytes_in, 0);
  chain.a_handle = c2->summary.result_handle;
  chain.send_c = true;  // the last link sends its bytes (and is kept too)
  auto c3 = client_->multiply({m, n, k}, nullptr, nullptr, nullptr, chain);
  ASSERT_TRUE(c3.ok()) << c3.status().to_string();
  EXPECT_FALSE(c3->summary.result_handle.empty());
  ASSERT_EQ(c3->c.size(), std::size_t(m * n));

  const std::vector<double> ad(a.begin(), a.end()), bd(b.begin(), b.end());
  const auto r1 = gemm_fp64(ad, bd, m, n, k);
  const auto r2 = gemm_fp64(r1, bd, m, n, k);
  const auto r3 = gemm_fp64(r2, bd, m, n, k);
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < r3.size(); ++i) {
    worst = std::max(worst, std::abs(double(c3->c[i]) - r3[i]));
    scale = std::max(scale, std::abs(r3[i]));
  }
  EXPECT_LE(worst / scale, 1e-4) << "max abs error " << worst << " of scale " << scale;

  // C2 fetched through another product: C2 * I = C2, checked against its own reference.
  std::vector<float> eye(std::size_t(n * n), 0.0f);
  for (int64_t i = 0; i < n; ++i) eye[std::size_t(i * n + i)] = 1.0f;
  MultiplyOptions fetch;
  fetch.a_handle = c2->summary.result_handle;
  auto got2 = client_->multiply({m, n, n}, nullptr, eye.data(), nullptr, fetch);
  ASSERT_TRUE(got2.ok()) << got2.status().to_string();
  double worst2 = 0, scale2 = 0;
  for (std::size_t i = 0; i < r2.size(); ++i) {
    worst2 = std::max(worst2, std::abs(double(got2->c[i]) - r2[i]));
    scale2 = std::max(scale2, std::abs(r2[i]));
  }
  EXPECT_LE(worst2 / scale2, 1e-4);

  auto listed = client_->list();
  ASSERT_TRUE(listed.ok());
  int kept = 0;
  for (const auto& mi : listed->matrices)
    if (mi.label.rfind("result of request", 0) == 0) ++kept;
  EXPECT_GE(kept, 3);
  for (const auto& h : {hb, c1->summary.result_handle, c2->summary.result_handle, c3->summary.result_handle})
    EXPECT_TRUE(client_->remove(h).ok());
}

TEST_F(ResidentE2E, UnknownHandleIsNotFoundNamingItAndAWrongShapeIsInvalid) {
  const std::string bogus = "00112233445566778899aabbccddeeff";
  const auto a = random_matrix(4, 5, fresh_seed());
  MultiplyOptions o;
  o.b_handle = bogus;
  auto r = client_->multiply({4, 6, 5}, a.data(), nullptr, nullptr, o);
  ASSERT_EQ(r.status().code(), StatusCode::kNotFound) << r.status().to_string();
  EXPECT_NE(r.status().message().find(bogus), std::string::npos);
  EXPECT_EQ(client_->remove(bogus).status().code(), StatusCode::kNotFound);

  const auto b = random_matrix(7, 6, fresh_seed());
  const std::string hb = put(b, 7, 6);  // B must be k x n = 5 x 6
  o.b_handle = hb;
  r = client_->multiply({4, 6, 5}, a.data(), nullptr, nullptr, o);
  ASSERT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().to_string();
  EXPECT_NE(r.status().message().find("b_handle"), std::string::npos) << r.status().to_string();
  EXPECT_NE(r.status().message().find("7 x 6"), std::string::npos) << r.status().to_string();
  EXPECT_TRUE(client_->remove(hb).ok());
  o.b_handle = hb;  // deleted: NOT_FOUND
  EXPECT_EQ(client_->multiply({4, 6, 7}, a.data(), nullptr, nullptr, o).status().code(), StatusCode::kNotFound);
}

// DeleteMatrix while a request holds the matrix: the name goes at once (new
// requests get NOT_FOUND, the list drops it), the running request finishes
// with it and gets the right answer.
TEST_F(ResidentE2E, DeleteDuringUseRemovesTheNameAndTheRequestStillCompletes) {
  const int64_t m = 33, n = 17, k = 41;
  const uint64_t seed = fresh_seed();
  const auto a = random_matrix(m, k, seed), b = random_matrix(k, n, seed + 1);
  const std::string hb = put(b, k, n);
  auto channel = grpc::CreateChannel(server_->tcp_address(), grpc::InsecureChannelCredentials());
  auto stub = v1::Sgemm::NewStub(channel);
  grpc::ClientContext ctx;
  auto stream = stub->Multiply(&ctx);
  v1::MultiplyRequest req;
  v1::GemmHeader* h = req.mutable_header();
  h->set_m(m);
  h->set_n(n);
  h->set_k(k);
  h->set_b_handle(hb);
  ASSERT_TRUE(stream->Write(req));  // the header pins B; A has not come yet
  int using_now = 0;
  for (int i = 0; i < 3000 && using_now == 0; ++i) {
    auto l = client_->list();
    ASSERT_TRUE(l.ok());
    for (const auto& mi : l->matrices)
      if (mi.handle == hb) using_now = mi.requests_using;
    if (!using_now) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(using_now, 1);
  auto del = client_->remove(hb);
  ASSERT_TRUE(del.ok()) << del.status().to_string();
  EXPECT_EQ(*del, 1);
  {
    auto after = client_->list();
    ASSERT_TRUE(after.ok());
    for (const auto& mi : after->matrices) EXPECT_NE(mi.handle, hb);
  }
  MultiplyOptions o;
  o.b_handle = hb;
  EXPECT_EQ(client_->multiply({m, n, k}, a.data(), nullptr, nullptr, o).status().code(), StatusCode::kNotFound);
  // Now A: the first request completes with the deleted B.
  v1::MultiplyRequest chunk;
  chunk.mutable_chunk()->set_matrix(v1::MATRIX_A);
  chunk.mutable_chunk()->set_data(a.data(), a.size() * sizeof(float));
  ASSERT_TRUE(stream->Write(chunk));
  ASSERT_TRUE(stream->WritesDone());
  std::vector<float> c(std::size_t(m * n));
  v1::MultiplyResponse resp;
  bool summary = false;
  while (stream->Read(&resp)) {
    if (resp.has_chunk()) {
      const auto& d = resp.chunk().data();
      std::memcpy(c.data() + resp.chunk().offset(), d.data(), d.size());
    }
    summary = summary || resp.has_summary();
  }
  const grpc::Status st = stream->Finish();
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_TRUE(summary);
  const auto v = verify_gemm(m, n, k, 1.0f, a.data(), b.data(), 0.0f, nullptr, c.data());
  EXPECT_TRUE(v.passed(kSgemmTolerance)) << v.max_rel_error;
}

TEST_F(ResidentE2E, AChunkForAMatrixNamedByHandleIsRefused) {
  const auto b = random_matrix(3, 3, fresh_seed());
  const std::string hb = put(b, 3, 3);
  auto stub = v1::Sgemm::NewStub(grpc::CreateChannel(server_->tcp_address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  auto stream = stub->Multiply(&ctx);
  v1::MultiplyRequest req;
  req.mutable_header()->set_m(3);
  req.mutable_header()->set_n(3);
  req.mutable_header()->set_k(3);
  req.mutable_header()->set_b_handle(hb);
  stream->Write(req);
  v1::MultiplyRequest chunk;
  chunk.mutable_chunk()->set_matrix(v1::MATRIX_B);
  chunk.mutable_chunk()->set_data(b.data(), b.size() * sizeof(float));
  stream->Write(chunk);
  stream->WritesDone();
  v1::MultiplyResponse resp;
  while (stream->Read(&resp)) {
  }
  const grpc::Status st = stream->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("by handle"), std::string::npos) << st.error_message();
  // The same in one MultiplyUnary message.
  v1::MultiplyUnaryRequest unary;
  *unary.mutable_header() = req.header();
  auto* a_chunk = unary.add_chunks();
  a_chunk->set_matrix(v1::MATRIX_A);
  a_chunk->set_data(b.data(), b.size() * sizeof(float));
  *unary.add_chunks() = chunk.chunk();
  grpc::ClientContext unary_ctx;
  v1::MultiplyUnaryResponse unary_resp;
  const grpc::Status ust = stub->MultiplyUnary(&unary_ctx, unary, &unary_resp);
  EXPECT_EQ(ust.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(ust.error_message().find("by handle"), std::string::npos) << ust.error_message();
  EXPECT_TRUE(client_->remove(hb).ok());
}

// PutMatrix from a shared-memory region on the Unix socket: strided, no byte on gRPC.
TEST_F(ResidentE2E, PutFromASharedMemoryRegion) {
  auto local = Client::connect(server_->unix_address());
  const int64_t rows = 19, cols = 23, ld = 32;
  auto region = local->create_region(rows * ld * 4 + 64);
  ASSERT_TRUE(region.ok()) << region.status().to_string();
  const auto b = random_matrix(rows, cols, fresh_seed());
  for (int64_t i = 0; i < rows; ++i)
    std::copy(b.begin() + i * cols, b.begin() + (i + 1) * cols, (*region)->floats() + 16 + i * ld);
  auto put = local->put_region(rows, cols, RegionMatrix{region->get(), 64, ld});
  ASSERT_TRUE(put.ok()) << put.status().to_string();
  const auto a = random_matrix(5, rows, fresh_seed());
  MultiplyOptions o;
  o.b_handle = put->handle;
  auto r = client_->multiply({5, cols, rows}, a.data(), nullptr, nullptr, o);  // used over TCP too
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(verify_gemm(5, cols, rows, 1.0f, a.data(), b.data(), 0.0f, nullptr, r->c.data()).passed(kSgemmTolerance));
  // Past the region's end: INVALID_ARGUMENT; over TCP: FAILED_PRECONDITION.
  EXPECT_EQ(local->put_region(rows * 4, cols, RegionMatrix{region->get(), 64, ld}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->put_region(rows, cols, RegionMatrix{region->get(), 64, ld}).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_TRUE(client_->remove(put->handle).ok());
}

TEST_F(ResidentE2E, PutRejectsBadShapesAndIncompleteStreams) {
  PutOptions po;
  std::vector<float> one(1, 1.0f);
  EXPECT_EQ(client_->put(0, 4, one.data(), po).status().code(), StatusCode::kInvalidArgument);
  // A stream that ends early: raw, as the library always sends everything.
  auto stub = v1::Sgemm::NewStub(grpc::CreateChannel(server_->tcp_address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  v1::PutMatrixResponse resp;
  auto w = stub->PutMatrix(&ctx, &resp);
  v1::PutMatrixRequest req;
  req.mutable_header()->set_rows(4);
  req.mutable_header()->set_cols(4);
  ASSERT_TRUE(w->Write(req));
  v1::PutMatrixRequest chunk;
  chunk.mutable_chunk()->set_data(one.data(), 4);
  ASSERT_TRUE(w->Write(chunk));
  w->WritesDone();
  const grpc::Status st = w->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("ended after 1 of 16 elements"), std::string::npos) << st.error_message();
}

TEST_F(ResidentE2E, TheCliPutsListsMultipliesKeepsAndRemoves) {
  const std::string cli = testing::client_bin() + " ";
  const std::string server = " --server " + server_->tcp_address();
  auto put = testing::run_command(cli + "put --rows 64 --cols 48 --label weights" + server + " 2>/dev/null");
  ASSERT_EQ(put.exit_code, 0) << put.output;
  const std::string h = put.output.substr(0, 32);
  auto ls = testing::run_command(cli + "ls" + server);
  ASSERT_EQ(ls.exit_code, 0);
  EXPECT_NE(ls.output.find(h), std::string::npos) << ls.output;
  EXPECT_NE(ls.output.find("weights"), std::string::npos) << ls.output;
  EXPECT_NE(ls.output.find("64x48"), std::string::npos) << ls.output;
  auto sub = testing::run_command(cli + "submit --m 5 --n 48 --k 64 --b-handle " + h + " --keep" + server);
  ASSERT_EQ(sub.exit_code, 0) << sub.output;
  EXPECT_NE(sub.output.find("result handle: "), std::string::npos) << sub.output;
  auto bad = testing::run_command(cli + "submit --m 5 --n 48 --k 64 --b-handle " + h + " --verify" + server + " 2>&1");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  auto rm = testing::run_command(cli + "rm " + h + server);
  EXPECT_EQ(rm.exit_code, 0) << rm.output;
  auto rm2 = testing::run_command(cli + "rm " + h + server + " 2>&1");
  EXPECT_EQ(rm2.exit_code, 3);
  EXPECT_NE(rm2.output.find("NOT_FOUND"), std::string::npos) << rm2.output;
}

// A small budget: three 64 x 64 matrices (16 KiB each) fit.
class ResidentBudgetE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<InProcessServer>([](ServerOptions& o, EngineOptions& e) {
      e.resident_bytes = 3 * kBytes;
      o.service.log_lines_per_second = 0;
    });
    ASSERT_TRUE(server_->running()) << server_->log();
    ClientOptions o;
    o.retry.max_attempts = 1;
    client_ = Client::connect(server_->tcp_address(), o);
    // The cuda backend budgets each GPU; the test's arithmetic is for one location.
    auto info = client_->info();
    ASSERT_TRUE(info.ok());
    if (info->backend == "cuda" && info->devices.size() > 1)
      GTEST_SKIP() << "budget arithmetic assumes one location; " << info->devices.size() << " GPUs here";
  }
  StatusOr<std::string> put(bool evictable) {
    PutOptions po;
    po.evictable = evictable;
    auto r = client_->put(64, 64, m_.data(), po);
    if (!r.ok()) return r.status();
    return r->handle;
  }
  static constexpr int64_t kBytes = 64 * 64 * 4;
  std::unique_ptr<InProcessServer> server_;
  std::unique_ptr<Client> client_;
  std::vector<float> m_ = random_matrix(64, 64, fresh_seed());
};

TEST_F(ResidentBudgetE2E, EvictableMatricesGoLeastRecentlyUsedFirst) {
  auto e1 = put(true), e2 = put(true), pinned = put(false);
  ASSERT_TRUE(e1.ok() && e2.ok() && pinned.ok());
  const auto a = random_matrix(2, 64, fresh_seed());
  MultiplyOptions o;
  o.b_handle = *e1;  // e1 used after e2: e2 is the least recently used
  auto r = client_->multiply({2, 64, 64}, a.data(), nullptr, nullptr, o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  auto e3 = put(true);
  ASSERT_TRUE(e3.ok()) << e3.status().to_string();
  o.b_handle = *e2;
  r = client_->multiply({2, 64, 64}, a.data(), nullptr, nullptr, o);
  ASSERT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("evicted"), std::string::npos) << r.status().to_string();
  EXPECT_NE(r.status().message().find(*e2), std::string::npos);
  for (const auto& h : {*e1, *pinned, *e3}) {
    o.b_handle = h;
    r = client_->multiply({2, 64, 64}, a.data(), nullptr, nullptr, o);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    const auto v = verify_gemm(2, 64, 64, 1.0f, a.data(), m_.data(), 0.0f, nullptr, r->c.data());
    EXPECT_TRUE(v.passed(kSgemmTolerance));
  }
  // e1 is now the least recently used evictable one.
  ASSERT_TRUE(put(true).ok());
  o.b_handle = *e1;
  EXPECT_EQ(client_->multiply({2, 64, 64}, a.data(), nullptr, nullptr, o).status().code(), StatusCode::kNotFound);
}

// Unfriendly callers: PutMatrix headers (one that fits only by evicting, and
// ones at the size limit) and a keep_result Multiply header, none followed by
// data. They reserve nothing and evict nothing; a normal request against the
// resident matrices is served correctly meanwhile; --idle-timeout ends them.
TEST(ResidentStallingE2E, HeadersWithoutDataHoldNoBudgetAndEvictNothing) {
  constexpr int64_t kBytes = 64 * 64 * 4;
  InProcessServer server([&](ServerOptions& o, EngineOptions& e) {
    e.resident_bytes = 3 * kBytes;
    o.idle_timeout_s = 2;
    o.service.log_lines_per_second = 0;
  });
  ASSERT_TRUE(server.running()) << server.log();
  ClientOptions co;
  co.retry.max_attempts = 1;
  auto client = Client::connect(server.tcp_address(), co);
  auto info0 = client->info();
  ASSERT_TRUE(info0.ok());
  if (info0->backend == "cuda" && info0->devices.size() > 1) GTEST_SKIP() << "budget arithmetic assumes one location";
  const auto b = random_matrix(64, 64, fresh_seed());
  PutOptions po;
  po.evictable = true;
  std::vector<std::string> handles;
  for (int i = 0; i < 3; ++i) {
    auto r = client->put(64, 64, b.data(), po);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    handles.push_back(r->handle);
  }
  auto stub = v1::Sgemm::NewStub(grpc::CreateChannel(server.tcp_address(), grpc::InsecureChannelCredentials()));
  struct HeldPut {
    grpc::ClientContext ctx;
    v1::PutMatrixResponse resp;
    std::unique_ptr<grpc::ClientWriter<v1::PutMatrixRequest>> w;
  };
  std::vector<std::unique_ptr<HeldPut>> puts;
  // One 64 x 64 (room only by evicting) and two at --max-matrix-elements.
  const std::pair<int64_t, int64_t> shapes[] = {
      {64, 64}, {info0->max_matrix_elements, 1}, {info0->max_matrix_elements, 1}};
  for (const auto& [rows, cols] : shapes) {
    auto h = std::make_unique<HeldPut>();
    h->w = stub->PutMatrix(&h->ctx, &h->resp);
    v1::PutMatrixRequest req;
    req.mutable_header()->set_rows(rows);
    req.mutable_header()->set_cols(cols);
    ASSERT_TRUE(h->w->Write(req));
    puts.push_back(std::move(h));
  }
  // A Multiply header asking to keep a 64 x 64 C, its A never sent.
  grpc::ClientContext mctx;
  auto mstream = stub->Multiply(&mctx);
  v1::MultiplyRequest mh;
  mh.mutable_header()->set_m(64);
  mh.mutable_header()->set_n(64);
  mh.mutable_header()->set_k(64);
  mh.mutable_header()->set_b_handle(handles[0]);
  mh.mutable_header()->set_keep_result(true);
  ASSERT_TRUE(mstream->Write(mh));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto held = client->info();
  ASSERT_TRUE(held.ok());
  EXPECT_EQ(held->host_bytes_in_use, 0);
  EXPECT_EQ(held->resident_bytes_in_use, 3 * kBytes);
  EXPECT_EQ(held->resident_matrices, 3);
  // Every matrix is still there and serves a normal request correctly.
  const auto a = random_matrix(5, 64, fresh_seed());
  for (const auto& h : handles) {
    MultiplyOptions o;
    o.b_handle = h;
    auto r = client->multiply({5, 64, 64}, a.data(), nullptr, nullptr, o);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_TRUE(verify_gemm(5, 64, 64, 1.0f, a.data(), b.data(), 0.0f, nullptr, r->c.data()).passed(kSgemmTolerance));
  }
  // --idle-timeout (2 s) ends the silent streams.
  for (auto& h : puts) EXPECT_EQ(h->w->Finish().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_EQ(mstream->Finish().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  const auto after = testing::expect_released(*client, "after --idle-timeout");
  EXPECT_EQ(after.resident_bytes_in_use, 3 * kBytes);
}

TEST_F(ResidentBudgetE2E, AFullBudgetOfUnevictableMatricesRefusesPutsNamingTheNumbers) {
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(put(false).ok());
  auto r = put(false);
  ASSERT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  const std::string& msg = r.status().message();
  EXPECT_NE(msg.find("--resident-bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find(std::to_string(3 * kBytes)), std::string::npos) << msg;
  EXPECT_NE(msg.find(std::to_string(kBytes) + " bytes"), std::string::npos) << msg;
  // keep_result needs room too: refused with the request's first data, before it computes.
  const auto a = random_matrix(64, 64, fresh_seed());
  MultiplyOptions o;
  o.keep_result = true;
  auto kept = client_->multiply({64, 64, 64}, a.data(), m_.data(), nullptr, o);
  ASSERT_EQ(kept.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(kept.status().message().find("keep_result"), std::string::npos) << kept.status().to_string();
  // The budget's use is visible.
  auto list = client_->list();
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->budget_bytes, 3 * kBytes);
  EXPECT_EQ(list->bytes_in_use, 3 * kBytes);
  auto info = client_->info();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->resident_bytes, 3 * kBytes);
  EXPECT_EQ(info->resident_bytes_in_use, 3 * kBytes);
  EXPECT_EQ(info->resident_matrices, 3);
}

// With --auth-tokens a handle belongs to the client that put it.
TEST(ResidentAuthE2E, AnotherClientsHandleIsPermissionDeniedAndResidentBytesHaveAQuota) {
  const std::string dir = testing::make_temp_dir();
  const std::string file = dir + "/tokens.json";
  std::ofstream(file) << R"({"clients": [{"name": "alice", "token": "alice-token-0123456789abcdef"},
                                         {"name": "bob", "token": "bob-token-0123456789abcdef00"},
                                         {"name": "carol", "token": "carol-token-0123456789abcdef",
                                          "max_resident_bytes": 300}]})";
  InProcessServer server([&](ServerOptions& o, EngineOptions&) { o.auth_tokens = file; });
  ASSERT_TRUE(server.running()) << server.log();
  ClientOptions ao, bo;
  ao.token = "alice-token-0123456789abcdef";
  bo.token = "bob-token-0123456789abcdef00";
  auto alice = Client::connect(server.tcp_address(), ao);
  auto bob = Client::connect(server.tcp_address(), bo);
  const auto b = random_matrix(8, 8, fresh_seed());
  auto put = alice->put(8, 8, b.data());
  ASSERT_TRUE(put.ok()) << put.status().to_string();
  MultiplyOptions o;
  o.b_handle = put->handle;
  auto r = bob->multiply({2, 8, 8}, b.data(), nullptr, nullptr, o);
  ASSERT_EQ(r.status().code(), StatusCode::kPermissionDenied) << r.status().to_string();
  EXPECT_NE(r.status().message().find("alice"), std::string::npos);
  EXPECT_EQ(bob->remove(put->handle).status().code(), StatusCode::kPermissionDenied);
  auto bl = bob->list();
  ASSERT_TRUE(bl.ok());
  EXPECT_TRUE(bl->matrices.empty());
  auto al = alice->list();
  ASSERT_TRUE(al.ok());
  ASSERT_EQ(al->matrices.size(), 1u);
  EXPECT_EQ(al->matrices[0].owner, "alice");
  EXPECT_TRUE(alice->multiply({2, 8, 8}, b.data(), nullptr, nullptr, o).ok());
  EXPECT_TRUE(alice->remove(put->handle).ok());
  // carol may hold 300 bytes: one 8 x 8 matrix (256), not two; nor a kept C beside it.
  ClientOptions co;
  co.token = "carol-token-0123456789abcdef";
  auto carol = Client::connect(server.tcp_address(), co);
  auto first = carol->put(8, 8, b.data());
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  auto second = carol->put(8, 8, b.data());
  ASSERT_EQ(second.status().code(), StatusCode::kPermissionDenied) << second.status().to_string();
  EXPECT_NE(second.status().message().find("max_resident_bytes"), std::string::npos);
  MultiplyOptions keep;
  keep.keep_result = true;
  EXPECT_EQ(carol->multiply({8, 8, 8}, b.data(), b.data(), nullptr, keep).status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_TRUE(carol->remove(first->handle).ok());
  EXPECT_TRUE(carol->put(8, 8, b.data()).ok());
  EXPECT_EQ(server.stop(), 0);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

}  // namespace
}  // namespace sgemm
