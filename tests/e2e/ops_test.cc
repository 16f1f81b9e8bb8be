// Transposed operands (GemmHeader.op_a / op_b) and submatrices end to end: the
// real server (SGEMM_E2E_BACKEND: cpu in CI, cuda through the GPU checks) and
// the real client, every combination of op(A), op(B) with chunks over TCP
// (on one connection and striped over several),
// shared-memory regions with leading dimensions wider than the stored width,
// and blocks of resident matrices, with alpha, beta and C, against the fp64
// reference; bad input gets INVALID_ARGUMENT naming the field; the CLI sends
// a Fortran-order .npy as it is.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <random>

#include "client/sgemm_client.h"
#include "common/reference_gemm.h"
#include "sgemm/v1/sgemm.grpc.pb.h"
#include "tests/e2e/in_process_server.h"

namespace sgemm {
namespace {

namespace v1 = ::sgemm::v1;
using testing::InProcessServer;

uint64_t fresh_seed() { return std::random_device{}() | (uint64_t(std::random_device{}()) << 32); }

// The stored form of a logical rows x cols matrix under `op`, at (row0, col0)
// of a total_rows x ld row-major buffer whose other elements are NaN.
std::vector<float> stored(const std::vector<float>& x, int64_t rows, int64_t cols, Op op, int64_t total_rows,
                          int64_t ld, int64_t row0 = 0, int64_t col0 = 0) {
  std::vector<float> out(std::size_t(total_rows * ld), std::nanf(""));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      const int64_t r = op == Op::kN ? i : j, c = op == Op::kN ? j : i;
      out[std::size_t((row0 + r) * ld + col0 + c)] = x[std::size_t(i * cols + j)];
    }
  return out;
}

struct Scalars {
  float alpha, beta;
  bool has_c;
};
constexpr Scalars kScalars[] = {{1.0f, 0.0f, false}, {-1.5f, 0.75f, true}, {2.0f, 0.0f, true}};
const GemmShape kShapes[] = {{37, 53, 29}, {1, 61, 40}, {45, 1, 33}, {23, 19, 1}, {64, 128, 96}};

std::string case_name(const GemmShape& s, Op a, Op b, const Scalars& sc, uint64_t seed) {
  return gemm_shape_text(s) + " op_a " + std::string(op_name(a)) + " op_b " + std::string(op_name(b)) + " alpha " +
         std::to_string(sc.alpha) + " beta " + std::to_string(sc.beta) + (sc.has_c ? " C" : "") + " seed " +
         std::to_string(seed);
}

void expect_product(const GemmShape& s, const Scalars& sc, const std::vector<float>& a, const std::vector<float>& b,
                    const std::vector<float>& c0, const float* c) {
  const VerifyResult v =
      verify_gemm(s.m, s.n, s.k, sc.alpha, a.data(), b.data(), sc.beta, sc.has_c ? c0.data() : nullptr, c);
  EXPECT_TRUE(v.passed(kSgemmTolerance)) << "max rel error " << v.max_rel_error << " at (" << v.worst_row << ", "
                                         << v.worst_col << "), nonfinite mismatches " << v.mismatched_nonfinite;
}

class OpsE2E : public testing::SuiteServer<OpsE2E> {
 public:
  static void configure(ServerOptions& o, EngineOptions&) { o.service.log_lines_per_second = 0; }

 protected:
  void SetUp() override {
    ASSERT_TRUE(server_->running()) << server_->log();
    ClientOptions o;
    o.retry.max_attempts = 1;
    tcp_ = Client::connect(server_->tcp_address(), o);
  }
  // Sends `msgs` on a raw stream and returns the final status.
  grpc::Status send_raw(const std::vector<v1::MultiplyRequest>& msgs) {
    auto stub = v1::Sgemm::NewStub(grpc::CreateChannel(server_->tcp_address(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    auto stream = stub->Multiply(&ctx);
    for (const auto& m : msgs)
      if (!stream->Write(m)) break;
    stream->WritesDone();
    v1::MultiplyResponse resp;
    while (stream->Read(&resp)) {
    }
    return stream->Finish();
  }
  static void expect_invalid(const Status& s, const std::string& words) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
    EXPECT_NE(s.message().find(words), std::string::npos) << s.to_string();
  }

  std::unique_ptr<Client> tcp_;
};

// Chunks over TCP: A and B sent as stored (k x m under op_a = t), dense.
TEST_F(OpsE2E, EveryOpCombinationSentAsChunks) {
  for (const GemmShape& s : kShapes)
    for (Op op_a : {Op::kN, Op::kT})
      for (Op op_b : {Op::kN, Op::kT})
        for (const Scalars& sc : kScalars) {
          const uint64_t seed = fresh_seed();
          SCOPED_TRACE(case_name(s, op_a, op_b, sc, seed));
          std::vector<float> a(std::size_t(s.m * s.k)), b(std::size_t(s.k * s.n)), c0(std::size_t(s.m * s.n));
          fill_random(a, seed);
          fill_random(b, seed + 1);
          fill_random(c0, seed + 2);
          const MatrixDims ad = stored_a_dims(s, op_a), bd = stored_b_dims(s, op_b);
          const auto sa = stored(a, s.m, s.k, op_a, ad.rows, ad.cols), sb = stored(b, s.k, s.n, op_b, bd.rows, bd.cols);
          MultiplyOptions o;
          o.alpha = sc.alpha;
          o.beta = sc.beta;
          o.op_a = op_a;
          o.op_b = op_b;
          auto r = tcp_->multiply(s, sa.data(), sb.data(), sc.has_c ? c0.data() : nullptr, o);
          ASSERT_TRUE(r.ok()) << r.status().to_string();
          expect_product(s, sc, a, b, c0, r->c.data());
          if (op_a == Op::kT || op_b == Op::kT) {
            EXPECT_NE(r->summary.plan_reason.find("op_a = " + std::string(op_name(op_a))), std::string::npos)
                << r->summary.plan_reason;
          }
        }
}

// Chunks over 2 to 4 connections (GemmHeader.stripes): each stripe carries
// blocks of the STORED rows, so with op_a = t the blocks of A (k rows) differ
// in number from C's (m rows): 64 x 7 x 300 has 300 stored rows of A^T.
TEST_F(OpsE2E, EveryOpCombinationStripedOverTwoToFourConnections) {
  const GemmShape shapes[] = {{301, 131, 67}, {64, 7, 300}, {150, 41, 9}};
  for (int connections : {2, 3, 4}) {
    ClientOptions co;
    co.retry.max_attempts = 1;
    co.connections = connections;
    co.chunk_bytes = 2048;  // small blocks: many per stripe
    auto client = Client::connect(server_->tcp_address(), co);
    for (const GemmShape& s : shapes)
      for (Op op_a : {Op::kN, Op::kT})
        for (Op op_b : {Op::kN, Op::kT})
          for (const Scalars& sc : kScalars) {
            const uint64_t seed = fresh_seed();
            SCOPED_TRACE(case_name(s, op_a, op_b, sc, seed) + " connections " + std::to_string(connections));
            std::vector<float> a(std::size_t(s.m * s.k)), b(std::size_t(s.k * s.n)), c0(std::size_t(s.m * s.n));
            fill_random(a, seed);
            fill_random(b, seed + 1);
            fill_random(c0, seed + 2);
            const MatrixDims ad = stored_a_dims(s, op_a), bd = stored_b_dims(s, op_b);
            const auto sa = stored(a, s.m, s.k, op_a, ad.rows, ad.cols),
                       sb = stored(b, s.k, s.n, op_b, bd.rows, bd.cols);
            MultiplyOptions o;
            o.alpha = sc.alpha;
            o.beta = sc.beta;
            o.op_a = op_a;
            o.op_b = op_b;
            auto r = client->multiply(s, sa.data(), sb.data(), sc.has_c ? c0.data() : nullptr, o);
            ASSERT_TRUE(r.ok()) << r.status().to_string();
            EXPECT_EQ(r->summary.stripes, connections);
            expect_product(s, sc, a, b, c0, r->c.data());
          }
  }
}

// Shared-memory regions on the Unix socket, every leading dimension wider than
// the stored width (C's too): a part of a larger matrix, multiplied in place.
TEST_F(OpsE2E, EveryOpCombinationInRegionsWithLeadingDimensions) {
  auto client = Client::connect(server_->unix_address());
  for (const GemmShape& s : kShapes)
    for (Op op_a : {Op::kN, Op::kT})
      for (Op op_b : {Op::kN, Op::kT})
        for (const Scalars& sc : kScalars) {
          const uint64_t seed = fresh_seed();
          SCOPED_TRACE(case_name(s, op_a, op_b, sc, seed));
          std::vector<float> a(std::size_t(s.m * s.k)), b(std::size_t(s.k * s.n)), c0(std::size_t(s.m * s.n));
          fill_random(a, seed);
          fill_random(b, seed + 1);
          fill_random(c0, seed + 2);
          const MatrixDims ad = stored_a_dims(s, op_a), bd = stored_b_dims(s, op_b);
          const int64_t lda = ad.cols + 3, ldb = bd.cols + 5, ldc = s.n + 2;
          const auto sa = stored(a, s.m, s.k, op_a, ad.rows, lda), sb = stored(b, s.k, s.n, op_b, bd.rows, ldb);
          const int64_t a_off = 64, b_off = a_off + 4 * int64_t(sa.size()) + 16,
                        c_off = b_off + 4 * int64_t(sb.size()) + 32;
          auto region = client->create_region(c_off + 4 * s.m * ldc);
          ASSERT_TRUE(region.ok()) << region.status().to_string();
          const Region* reg = region->get();
          char* base = static_cast<char*>(reg->data());
          std::memcpy(base + a_off, sa.data(), sa.size() * 4);
          std::memcpy(base + b_off, sb.data(), sb.size() * 4);
          float* pc = reinterpret_cast<float*>(base + c_off);
          for (int64_t i = 0; i < s.m; ++i) std::memcpy(pc + i * ldc, &c0[std::size_t(i * s.n)], std::size_t(s.n) * 4);
          MultiplyOptions o;
          o.alpha = sc.alpha;
          o.beta = sc.beta;
          o.op_a = op_a;
          o.op_b = op_b;
          const RegionMatrix ra{reg, a_off, lda}, rb{reg, b_off, ldb}, rc{reg, c_off, ldc};
          auto r =
              client->multiply_regions(s, ra, rb, sc.has_c ? std::optional<RegionMatrix>(rc) : std::nullopt, rc, o);
          ASSERT_TRUE(r.ok()) << r.status().to_string();
          std::vector<float> out(std::size_t(s.m * s.n));
          for (int64_t i = 0; i < s.m; ++i) std::memcpy(&out[std::size_t(i * s.n)], pc + i * ldc, std::size_t(s.n) * 4);
          expect_product(s, sc, a, b, c0, out.data());
        }
}

// Blocks of larger resident matrices (a_at, b_at, c_at), NaN around them.
TEST_F(OpsE2E, EveryOpCombinationOnResidentSubmatrices) {
  for (const GemmShape& s : kShapes)
    for (Op op_a : {Op::kN, Op::kT})
      for (Op op_b : {Op::kN, Op::kT})
        for (const Scalars& sc : kScalars) {
          const uint64_t seed = fresh_seed();
          SCOPED_TRACE(case_name(s, op_a, op_b, sc, seed));
          std::vector<float> a(std::size_t(s.m * s.k)), b(std::size_t(s.k * s.n)), c0(std::size_t(s.m * s.n));
          fill_random(a, seed);
          fill_random(b, seed + 1);
          fill_random(c0, seed + 2);
          const MatrixDims ad = stored_a_dims(s, op_a), bd = stored_b_dims(s, op_b);
          const auto big_a = stored(a, s.m, s.k, op_a, ad.rows + 3, ad.cols + 4, 2, 1);
          const auto big_b = stored(b, s.k, s.n, op_b, bd.rows + 1, bd.cols + 6, 1, 5);
          const auto big_c = stored(c0, s.m, s.n, Op::kN, s.m + 2, s.n + 2, 2, 2);
          auto ha = tcp_->put(ad.rows + 3, ad.cols + 4, big_a.data());
          auto hb = tcp_->put(bd.rows + 1, bd.cols + 6, big_b.data());
          auto hc = tcp_->put(s.m + 2, s.n + 2, big_c.data());
          ASSERT_TRUE(ha.ok() && hb.ok() && hc.ok());
          MultiplyOptions o;
          o.alpha = sc.alpha;
          o.beta = sc.beta;
          o.op_a = op_a;
          o.op_b = op_b;
          o.a_handle = ha->handle;
          o.b_handle = hb->handle;
          o.a_at = MatrixOffset{2, 1};
          o.b_at = MatrixOffset{1, 5};
          if (sc.has_c) {
            o.c_handle = hc->handle;
            o.c_at = MatrixOffset{2, 2};
          }
          auto r = tcp_->multiply(s, nullptr, nullptr, nullptr, o);
          ASSERT_TRUE(r.ok()) << r.status().to_string();
          EXPECT_EQ(r->summary.bytes_in, 0);
          expect_product(s, sc, a, b, c0, r->c.data());
          for (const auto& h : {ha->handle, hb->handle, hc->handle}) EXPECT_TRUE(tcp_->remove(h).ok());
        }
}

TEST_F(OpsE2E, BadOpsShapesAndSubmatricesAreInvalidArgumentNamingTheField) {
  // An op the enum does not know.
  v1::MultiplyRequest bad_op;
  auto* h = bad_op.mutable_header();
  h->set_m(4);
  h->set_n(4);
  h->set_k(4);
  h->set_op_a(static_cast<v1::Op>(7));
  grpc::Status st = send_raw({bad_op});
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  EXPECT_NE(st.error_message().find("header.op_a"), std::string::npos) << st.error_message();
  bad_op.mutable_header()->set_op_a(v1::OP_N);
  bad_op.mutable_header()->set_op_b(static_cast<v1::Op>(-2));
  st = send_raw({bad_op});
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  EXPECT_NE(st.error_message().find("header.op_b"), std::string::npos) << st.error_message();

  // A resident A stored m x k named with op_a = t (which needs k x m).
  const GemmShape s{6, 5, 4};
  std::vector<float> a(24, 0.5f), b(20, 0.25f);
  auto ha = tcp_->put(6, 4, a.data());
  ASSERT_TRUE(ha.ok());
  MultiplyOptions o;
  o.op_a = Op::kT;
  o.a_handle = ha->handle;
  auto r = tcp_->multiply(s, nullptr, b.data(), nullptr, o);
  ASSERT_FALSE(r.ok());
  expect_invalid(r.status(), "header.a_handle");
  expect_invalid(r.status(), "k x m");
  // A block that does not fit: 6 x 4 at (1, 0) of a 6 x 4 matrix.
  o.op_a = Op::kN;
  o.a_at = MatrixOffset{1, 0};
  r = tcp_->multiply(s, nullptr, b.data(), nullptr, o);
  ASSERT_FALSE(r.ok());
  expect_invalid(r.status(), "header.a_at");
  o.a_at = MatrixOffset{-1, 0};
  r = tcp_->multiply(s, nullptr, b.data(), nullptr, o);
  ASSERT_FALSE(r.ok());
  expect_invalid(r.status(), "header.a_at");
  // An offset without its handle.
  MultiplyOptions no_handle;
  no_handle.b_at = MatrixOffset{0, 0};
  r = tcp_->multiply(s, a.data(), b.data(), nullptr, no_handle);
  ASSERT_FALSE(r.ok());
  expect_invalid(r.status(), "header.b_at");
  EXPECT_TRUE(tcp_->remove(ha->handle).ok());

  // Stripes are counted against C's blocks, not the stored A's: with op_a = t
  // A is stored 64 x 16 (8 blocks of 8 rows) but C's 16 rows make 2 blocks.
  v1::MultiplyRequest striped;
  h = striped.mutable_header();
  h->set_m(16);
  h->set_n(8);
  h->set_k(64);
  h->set_op_a(v1::OP_T);
  h->set_stripes(4);
  h->set_stripe_rows(8);
  st = send_raw({striped});
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  EXPECT_NE(st.error_message().find("header.stripes 4 exceeds the 2 blocks of C"), std::string::npos)
      << st.error_message();

  // A region's ld narrower than the stored width of a transposed A (k x m: width m = 6).
  auto client = Client::connect(server_->unix_address());
  auto region = client->create_region(4096);
  ASSERT_TRUE(region.ok()) << region.status().to_string();
  MultiplyOptions ro;
  ro.op_a = Op::kT;
  auto rr = client->multiply_regions(s, RegionMatrix{region->get(), 0, 5}, RegionMatrix{region->get(), 1024, 0},
                                     std::nullopt, std::nullopt, ro);
  ASSERT_FALSE(rr.ok());
  expect_invalid(rr.status(), "header.a_region.ld 5 is less than the matrix's width 6");
}

// The CLI: --op-a t with random data and --verify, and a Fortran-order .npy A
// sent as it is (its values are the transpose of its row-major view).
TEST_F(OpsE2E, TheCliSaysItTheBlasWayAndSendsFortranOrderAsItIs) {
  const std::string cli = testing::client_bin() + " ";
  const std::string server = " --server " + server_->tcp_address();
  auto t = testing::run_command(cli + "submit --m 33 --n 17 --k 21 --op-a t --op-b t --beta 0.5 --verify --json" +
                                server + " 2>&1");
  ASSERT_EQ(t.exit_code, 0) << t.output;
  EXPECT_NE(t.output.find("\"passed\":true"), std::string::npos) << t.output;

  // A block of a resident matrix: 4 x 3 at (2, 1) of a 10 x 8 one (stored 3 x 4 under --op-a t fits too).
  auto put = testing::run_command(cli + "put --rows 10 --cols 8" + server + " 2>/dev/null");
  ASSERT_EQ(put.exit_code, 0) << put.output;
  const std::string h = put.output.substr(0, 32);
  auto sub = testing::run_command(cli + "submit --m 4 --n 5 --k 3 --a-handle " + h + " --a-at 2,1" + server + " 2>&1");
  EXPECT_EQ(sub.exit_code, 0) << sub.output;
  sub = testing::run_command(cli + "submit --m 4 --n 5 --k 3 --op-a t --a-handle " + h + " --a-at 7,4" + server +
                             " 2>&1");
  EXPECT_EQ(sub.exit_code, 0) << sub.output;
  auto over = testing::run_command(cli + "submit --m 4 --n 5 --k 3 --a-handle " + h + " --a-at 7,6" + server + " 2>&1");
  EXPECT_EQ(over.exit_code, 3) << over.output;
  EXPECT_NE(over.output.find("header.a_at"), std::string::npos) << over.output;
  auto syntax = testing::run_command(cli + "submit --m 4 --n 5 --k 3 --a-handle " + h + " --a-at 2" + server + " 2>&1");
  EXPECT_EQ(syntax.exit_code, 2) << syntax.output;
  EXPECT_NE(syntax.output.find("--a-at wants ROW,COL"), std::string::npos) << syntax.output;
  EXPECT_EQ(testing::run_command(cli + "rm " + h + server).exit_code, 0);

  // A Fortran-order 9 x 7 A: column after column in the file.
  const int64_t m = 9, k = 7, n = 5;
  std::vector<float> a(std::size_t(m * k)), b(std::size_t(k * n));
  fill_random(a, 11);
  fill_random(b, 12);
  auto npy = [](const std::vector<float>& x, int64_t rows, int64_t cols, bool fortran) {
    std::string header = std::string("{'descr': '<f4', 'fortran_order': ") + (fortran ? "True" : "False") +
                         ", 'shape': (" + std::to_string(rows) + ", " + std::to_string(cols) + "), }";
    header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');
    header.push_back('\n');
    std::string file = std::string("\x93NUMPY\x01\x00", 8);
    file.push_back(char(header.size() & 0xff));
    file.push_back(char(header.size() >> 8));
    file += header;
    for (int64_t t = 0; t < rows * cols; ++t) {  // element t of the file: column-major under Fortran order
      const int64_t i = fortran ? t % rows : t / cols, j = fortran ? t / rows : t % cols;
      file.append(reinterpret_cast<const char*>(&x[std::size_t(i * cols + j)]), 4);
    }
    return file;
  };
  const std::string dir = ::testing::TempDir();
  const std::string a_path = dir + "/ops_a_fortran.npy", b_path = dir + "/ops_b.npy", out = dir + "/ops_c.raw";
  std::ofstream(a_path, std::ios::binary) << npy(a, m, k, true);
  std::ofstream(b_path, std::ios::binary) << npy(b, k, n, false);
  auto f = testing::run_command(cli + "submit --a " + a_path + " --b " + b_path + " --out " + out + " --verify" +
                                server + " 2>&1");
  ASSERT_EQ(f.exit_code, 0) << f.output;
  EXPECT_NE(f.output.find("PASS"), std::string::npos) << f.output;
  // Sent as the file holds it: the transpose of its row-major view, op_a = t.
  EXPECT_NE(f.output.find("op_a = t, op_b = n"), std::string::npos) << f.output;
  std::ifstream in(out, std::ios::binary);
  std::vector<float> c(std::size_t(m * n));
  in.read(reinterpret_cast<char*>(c.data()), std::streamsize(c.size() * 4));
  ASSERT_EQ(in.gcount(), std::streamsize(c.size() * 4));
  expect_product({m, n, k}, Scalars{1.0f, 0.0f, false}, a, b, {}, c.data());
}

}  // namespace
}  // namespace sgemm
