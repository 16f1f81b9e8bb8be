// Batches and groups whose operands come from the other input rows, end to
// end against the real server (--auth-tokens, so a region and a handle belong
// to one client) over its Unix socket: every product against the fp64
// reference on odd shapes, with every op(A)/op(B) and alpha, beta and C.
//   - regions: each operand one region reference covering the products'
//     concatenated operands; C back as chunks, into an out region, or in place;
//   - a resident B (or A, or both) read by every product of a strided batch
//     (stride 0), on either backend, check_finite looking at it too;
//   - bad references (no such region, out of bounds, another client's region,
//     regions over TCP, no such handle) refused naming the field, the server
//     serving on, and the host memory budget back to 0 after each test.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "client/batch_command.h"
#include "client/sgemm_client.h"
#include "tests/e2e/in_process_server.h"

namespace sgemm {
namespace {

using testing::InProcessServer;

constexpr const char* kAlice = "alice-batch-token-0123456789abcdef";
constexpr const char* kBob = "bob-batch-token-0123456789abcdefgh";

uint64_t fresh_seed() { return std::random_device{}() | (uint64_t(std::random_device{}()) << 32); }

const std::vector<GemmShape> kOddGroup = {{1, 1, 1}, {1, 65, 33}, {47, 1, 19}, {33, 17, 29}, {7, 129, 3}, {3, 5, 1}};

struct Scalars {
  float alpha, beta;
  bool has_c;
};
constexpr Scalars kScalars[] = {{1.0f, 0.0f, false}, {-1.5f, 0.75f, true}};

// Where C goes in a region batch.
enum class Out { kChunks, kOutRegion, kInPlace };
const char* out_name(Out o) { return o == Out::kChunks ? "chunks" : o == Out::kOutRegion ? "out region" : "in place"; }

class BatchSourcesE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(testing::make_temp_dir());
    const std::string file = *dir_ + "/tokens.json";
    std::ofstream(file) << R"({"clients": [{"name": "alice", "token": ")" << kAlice
                        << R"("}, {"name": "bob", "token": ")" << kBob << R"("}]})";
    server_ = new InProcessServer([&](ServerOptions& o, EngineOptions&) {
      o.auth_tokens = file;
      o.service.log_lines_per_second = 0;
    });
  }
  static void TearDownTestSuite() {
    EXPECT_EQ(server_->stop(), 0) << "server did not shut down cleanly";
    delete server_;
    std::error_code ec;
    std::filesystem::remove_all(*dir_, ec);
    delete dir_;
  }
  void SetUp() override {
    ASSERT_TRUE(server_->running()) << server_->log();
    alice_ = client(kAlice, server_->unix_address());
    auto info = alice_->info();
    ASSERT_TRUE(info.ok()) << info.status().to_string();
  }
  void TearDown() override { expect_memory_returns(); }

  static std::unique_ptr<Client> client(const std::string& token, const std::string& address) {
    ClientOptions o;
    o.token = token;
    o.retry.max_attempts = 1;
    o.chunk_bytes = 4096;  // several chunks per operand, some crossing products
    return Client::connect(address, o);
  }

  // Every request's host memory is back in the budget, within a deadline
  // (a request's last references go after its summary is sent).
  void expect_memory_returns() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    int64_t in_use = -1;
    while (std::chrono::steady_clock::now() < deadline) {
      auto info = alice_->info();
      ASSERT_TRUE(info.ok()) << info.status().to_string();
      in_use = info->host_bytes_in_use;
      if (in_use == 0) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ADD_FAILURE() << "host_bytes_in_use is still " << in_use;
  }

  // A plain batch still computes correctly: the server serves on after a refusal.
  void expect_served() {
    BatchProducts batch;
    batch.shape = {9, 7, 5};
    batch.count = 3;
    const BatchLayout l = batch_layout(batch);
    std::vector<float> a(std::size_t(l.a_elements)), b(std::size_t(l.b_elements));
    fill_random(a, 5);
    fill_random(b, 6);
    auto r = alice_->multiply_batch(batch, a.data(), b.data(), nullptr, {});
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    for (std::size_t i = 0; i < 3; ++i)
      EXPECT_TRUE(
          cli::verify_batch_product(batch, l, i, 1, 0, Op::kN, Op::kN, a.data(), b.data(), nullptr, r->c.data(), 1)
              .passed(kSgemmTolerance));
  }

  static void expect_error(const Status& st, StatusCode code, const std::string& words) {
    EXPECT_EQ(st.code(), code) << st.to_string();
    EXPECT_NE(st.message().find(words), std::string::npos) << "'" << words << "' not in " << st.to_string();
  }

  // Runs `batch` with its A, B (and C) in one region, for every op, scalars
  // and destination of C; each product checked against the fp64 reference.
  void run_from_regions(const BatchProducts& batch) {
    const BatchLayout l = batch_layout(batch);
    // A, B and C one after another, each at a 4-byte offset that is not page aligned.
    const int64_t a_off = 4, b_off = a_off + 4 * l.a_elements, c_off = b_off + 4 * l.b_elements;
    auto in = alice_->create_region(c_off + 4 * l.c_elements);
    ASSERT_TRUE(in.ok()) << in.status().to_string();
    auto out = alice_->create_region(8 + 4 * l.c_elements);
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    const Region* ri = in->get();
    const Region* ro = out->get();
    auto at = [](const Region* r, int64_t off) {
      return reinterpret_cast<float*>(static_cast<char*>(r->data()) + off);
    };
    std::vector<float> a(std::size_t(l.a_elements)), b(std::size_t(l.b_elements)), c0(std::size_t(l.c_elements));
    for (Op op_a : {Op::kN, Op::kT})
      for (Op op_b : {Op::kN, Op::kT})
        for (const Scalars& sc : kScalars)
          for (Out where : {Out::kChunks, Out::kOutRegion, Out::kInPlace}) {
            if (where == Out::kInPlace && !sc.has_c) continue;
            const uint64_t seed = fresh_seed();
            SCOPED_TRACE("op_a " + std::string(op_name(op_a)) + " op_b " + std::string(op_name(op_b)) + " alpha " +
                         std::to_string(sc.alpha) + (sc.has_c ? " C" : "") + " C to " + out_name(where) + " seed " +
                         std::to_string(seed));
            fill_random(a, seed);
            fill_random(b, seed + 1);
            fill_random(c0, seed + 2);
            std::copy(a.begin(), a.end(), at(ri, a_off));
            std::copy(b.begin(), b.end(), at(ri, b_off));
            std::copy(c0.begin(), c0.end(), at(ri, c_off));
            std::fill(at(ro, 8), at(ro, 8) + l.c_elements, -7.0f);
            MultiplyOptions opt;
            opt.alpha = sc.alpha;
            opt.beta = sc.beta;
            opt.op_a = op_a;
            opt.op_b = op_b;
            const std::optional<RegionMatrix> c =
                sc.has_c ? std::optional<RegionMatrix>(RegionMatrix{ri, c_off}) : std::nullopt;
            std::optional<RegionMatrix> dst;
            if (where == Out::kOutRegion) dst = RegionMatrix{ro, 8};
            if (where == Out::kInPlace) dst = c;
            auto r = alice_->multiply_batch_regions(batch, {ri, a_off}, {ri, b_off}, c, dst, opt);
            ASSERT_TRUE(r.ok()) << r.status().to_string();
            EXPECT_EQ(r->products_failed, 0);
            ASSERT_EQ(r->products.size(), l.c_offset.size());
            EXPECT_EQ(r->bytes_sent, 0);  // no operand byte on gRPC
            const float* result = where == Out::kChunks      ? r->c.data()
                                  : where == Out::kOutRegion ? at(ro, 8)
                                                             : at(ri, c_off);
            if (where == Out::kChunks) {
              EXPECT_EQ(r->bytes_received, l.c_elements * 4);
            } else {
              EXPECT_EQ(r->bytes_received, 0);
              EXPECT_TRUE(r->c.empty());
            }
            for (const ProductResult& p : r->products) {
              SCOPED_TRACE("product " + std::to_string(p.index));
              EXPECT_TRUE(p.status.ok()) << p.status.to_string();
              const VerifyResult v =
                  cli::verify_batch_product(batch, l, std::size_t(p.index), sc.alpha, sc.beta, op_a, op_b, a.data(),
                                            b.data(), sc.has_c ? c0.data() : nullptr, result, seed);
              EXPECT_TRUE(v.passed(kSgemmTolerance))
                  << "max rel error " << v.max_rel_error << " at (" << v.worst_row << ", " << v.worst_col << ")";
              EXPECT_GT(v.checked, 0);
            }
            // The inputs are untouched (C only in place).
            EXPECT_TRUE(std::equal(a.begin(), a.end(), at(ri, a_off)));
            EXPECT_TRUE(std::equal(b.begin(), b.end(), at(ri, b_off)));
            if (where != Out::kInPlace) {
              EXPECT_TRUE(std::equal(c0.begin(), c0.end(), at(ri, c_off)));
            }
          }
  }

  static inline InProcessServer* server_ = nullptr;
  static inline std::string* dir_ = nullptr;
  std::unique_ptr<Client> alice_;
};

TEST_F(BatchSourcesE2E, StridedBatchFromRegionsEveryOpScalarsAndDestination) {
  BatchProducts batch;
  batch.shape = {33, 17, 29};
  batch.count = 5;
  run_from_regions(batch);
}

TEST_F(BatchSourcesE2E, GroupFromRegionsEveryOpScalarsAndDestination) {
  BatchProducts batch;
  batch.group = kOddGroup;
  run_from_regions(batch);
}

// One resident matrix as B (then as A) of every product of a strided batch:
// the common "same weights, many inputs" case. The CPU engine reads it in
// place for every product, the cuda backend from each GPU's copy.
TEST_F(BatchSourcesE2E, ResidentOperandSharedByEveryProductOfAStridedBatch) {
  const GemmShape s{37, 23, 19};
  BatchProducts batch;
  batch.shape = s;
  batch.count = 6;
  for (MatrixId shared : {MatrixId::kB, MatrixId::kA})
    for (Op op_a : {Op::kN, Op::kT})
      for (Op op_b : {Op::kN, Op::kT})
        for (const Scalars& sc : kScalars) {
          const uint64_t seed = fresh_seed();
          const bool b_shared = shared == MatrixId::kB;
          SCOPED_TRACE(std::string(b_shared ? "B" : "A") + " resident, op_a " + std::string(op_name(op_a)) + " op_b " +
                       std::string(op_name(op_b)) + (sc.has_c ? " C" : "") + " seed " + std::to_string(seed));
          // The layout the products read: the shared operand's offsets are all 0.
          BatchLayout l = batch_layout(batch);
          if (b_shared) std::fill(l.b_offset.begin(), l.b_offset.end(), 0);
          if (!b_shared) std::fill(l.a_offset.begin(), l.a_offset.end(), 0);
          const MatrixDims stored =
              b_shared ? stored_b_dims(s, op_b) : stored_a_dims(s, op_a);  // as put: k x n, or n x k under op_b = t
          std::vector<float> a(std::size_t(b_shared ? l.a_elements : s.m * s.k));
          std::vector<float> b(std::size_t(b_shared ? s.k * s.n : l.b_elements));
          std::vector<float> c0(std::size_t(l.c_elements));
          fill_random(a, seed);
          fill_random(b, seed + 1);
          fill_random(c0, seed + 2);
          const std::vector<float>& kept = b_shared ? b : a;
          auto put = alice_->put(stored.rows, stored.cols, kept.data());
          ASSERT_TRUE(put.ok()) << put.status().to_string();
          MultiplyOptions opt;
          opt.alpha = sc.alpha;
          opt.beta = sc.beta;
          opt.op_a = op_a;
          opt.op_b = op_b;
          (b_shared ? opt.b_handle : opt.a_handle) = put->handle;
          auto r = alice_->multiply_batch(batch, b_shared ? a.data() : nullptr, b_shared ? nullptr : b.data(),
                                          sc.has_c ? c0.data() : nullptr, opt);
          ASSERT_TRUE(r.ok()) << r.status().to_string();
          EXPECT_EQ(r->products_failed, 0);
          // Only the per-product operand (and C) crossed gRPC.
          const int64_t sent = (b_shared ? l.a_elements : l.b_elements) + (sc.has_c ? l.c_elements : 0);
          EXPECT_EQ(r->bytes_sent, sent * 4);
          for (const ProductResult& p : r->products) {
            SCOPED_TRACE("product " + std::to_string(p.index));
            EXPECT_TRUE(p.status.ok()) << p.status.to_string();
            const VerifyResult v =
                cli::verify_batch_product(batch, l, std::size_t(p.index), sc.alpha, sc.beta, op_a, op_b, a.data(),
                                          b.data(), sc.has_c ? c0.data() : nullptr, r->c.data(), seed);
            EXPECT_TRUE(v.passed(kSgemmTolerance))
                << "max rel error " << v.max_rel_error << " at (" << v.worst_row << ", " << v.worst_col << ")";
          }
          auto removed = alice_->remove(put->handle);
          EXPECT_TRUE(removed.ok()) << removed.status().to_string();
        }
  // A and B both resident: nothing but C (when given) is uploaded, and every product is the same A B + beta C_i.
  {
    std::vector<float> a(std::size_t(s.m * s.k)), b(std::size_t(s.k * s.n)), c0(std::size_t(6 * s.m * s.n));
    fill_random(a, 31);
    fill_random(b, 32);
    fill_random(c0, 33);
    auto pa = alice_->put(s.m, s.k, a.data());
    auto pb = alice_->put(s.k, s.n, b.data());
    ASSERT_TRUE(pa.ok() && pb.ok());
    BatchLayout l = batch_layout(batch);
    std::fill(l.a_offset.begin(), l.a_offset.end(), 0);
    std::fill(l.b_offset.begin(), l.b_offset.end(), 0);
    MultiplyOptions opt;
    opt.a_handle = pa->handle;
    opt.b_handle = pb->handle;
    opt.beta = 0.5f;
    for (bool has_c : {false, true}) {
      SCOPED_TRACE(has_c ? "with C" : "without C");
      auto r = alice_->multiply_batch(batch, nullptr, nullptr, has_c ? c0.data() : nullptr, opt);
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      EXPECT_EQ(r->bytes_sent, has_c ? l.c_elements * 4 : 0);
      for (std::size_t i = 0; i < 6; ++i)
        EXPECT_TRUE(cli::verify_batch_product(batch, l, i, 1, 0.5f, Op::kN, Op::kN, a.data(), b.data(),
                                              has_c ? c0.data() : nullptr, r->c.data(), 34)
                        .passed(kSgemmTolerance));
    }
    EXPECT_TRUE(alice_->remove(pa->handle).ok());
    EXPECT_TRUE(alice_->remove(pb->handle).ok());
  }
  // check_finite looks at the shared matrix too: a NaN in it leaves out every
  // product (each status names B), or fails the request with fail_fast.
  {
    std::vector<float> a(std::size_t(batch_layout(batch).a_elements)), b(std::size_t(s.k * s.n));
    fill_random(a, 41);
    fill_random(b, 42);
    b[std::size_t(s.n + 3)] = std::nanf("");
    auto pb = alice_->put(s.k, s.n, b.data());
    ASSERT_TRUE(pb.ok()) << pb.status().to_string();
    MultiplyOptions opt;
    opt.b_handle = pb->handle;
    for (bool fail_fast : {false, true}) {
      SCOPED_TRACE(fail_fast ? "fail_fast" : "each product reported");
      BatchProducts checked = batch;
      checked.check_finite = true;
      checked.fail_fast = fail_fast;
      auto r = alice_->multiply_batch(checked, a.data(), nullptr, nullptr, opt);
      if (fail_fast) {
        expect_error(r.status(), StatusCode::kInvalidArgument, "product 0");
        continue;
      }
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      EXPECT_EQ(r->products_failed, 6);
      EXPECT_EQ(r->bytes_received, 0);
      for (const ProductResult& p : r->products)
        expect_error(p.status, StatusCode::kInvalidArgument, "B holds a non-finite value");
    }
    EXPECT_TRUE(alice_->remove(pb->handle).ok());
  }
  // A handle of the wrong shape names the field and the shape it must have.
  std::vector<float> wrong(std::size_t(s.k * (s.n + 1)), 1.0f);
  auto put = alice_->put(s.k, s.n + 1, wrong.data());
  ASSERT_TRUE(put.ok()) << put.status().to_string();
  std::vector<float> a(std::size_t(batch_layout(batch).a_elements), 1.0f);
  MultiplyOptions opt;
  opt.b_handle = put->handle;
  auto r = alice_->multiply_batch(batch, a.data(), nullptr, nullptr, opt);
  expect_error(r.status(), StatusCode::kInvalidArgument, "header.b_handle");
  EXPECT_TRUE(alice_->remove(put->handle).ok());
  expect_served();
}

TEST_F(BatchSourcesE2E, BadReferencesAreRefusedNamingTheFieldAndTheServerServesOn) {
  BatchProducts batch;
  batch.shape = {13, 11, 7};
  batch.count = 4;
  const BatchLayout l = batch_layout(batch);
  const int64_t b_off = 4 * l.a_elements;
  auto in = alice_->create_region(b_off + 4 * l.b_elements);
  ASSERT_TRUE(in.ok()) << in.status().to_string();
  const Region* ri = in->get();
  std::fill(ri->floats(), ri->floats() + l.a_elements + l.b_elements, 0.5f);
  // Correct first: the region holds exactly the concatenated A and B.
  auto ok = alice_->multiply_batch_regions(batch, {ri, 0}, {ri, b_off}, std::nullopt, std::nullopt, {});
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_FLOAT_EQ(ok->c[0], 0.25f * 7);
  // The concatenated B one element past the region's end.
  auto over = alice_->multiply_batch_regions(batch, {ri, 0}, {ri, b_off + 4}, std::nullopt, std::nullopt, {});
  expect_error(over.status(), StatusCode::kInvalidArgument, "header.b_region");
  expect_error(over.status(), StatusCode::kInvalidArgument, "its 4 products' matrices concatenated, 308 elements");
  // Forty products: the concatenated A overruns the region.
  BatchProducts more = batch;
  more.count = 40;
  auto bigger = alice_->multiply_batch_regions(more, {ri, 0}, {ri, 0}, std::nullopt, std::nullopt, {});
  expect_error(bigger.status(), StatusCode::kInvalidArgument, "header.a_region");
  // An out region overlapping an input.
  auto overlap = alice_->multiply_batch_regions(batch, {ri, 0}, {ri, b_off}, std::nullopt, RegionMatrix{ri, 0}, {});
  expect_error(overlap.status(), StatusCode::kInvalidArgument, "header.out_region");
  // No such region: the region is unregistered by its owner first.
  {
    auto gone = alice_->create_region(4096);
    ASSERT_TRUE(gone.ok());
    const Region* rg = gone->get();
    ASSERT_TRUE((*gone)->unregister().ok());
    auto missing = alice_->multiply_batch_regions(batch, {rg, 0}, {ri, b_off}, std::nullopt, std::nullopt, {});
    expect_error(missing.status(), StatusCode::kNotFound, "header.a_region");
  }
  // Another client's region (same uid, same socket, another token).
  auto bob = client(kBob, server_->unix_address());
  auto theirs = bob->multiply_batch_regions(batch, {ri, 0}, {ri, b_off}, std::nullopt, std::nullopt, {});
  expect_error(theirs.status(), StatusCode::kPermissionDenied, "header.a_region");
  // Regions over TCP: the Unix socket only.
  auto tcp = client(kAlice, server_->tcp_address());
  auto remote = tcp->multiply_batch_regions(batch, {ri, 0}, {ri, b_off}, std::nullopt, std::nullopt, {});
  expect_error(remote.status(), StatusCode::kFailedPrecondition, "Unix");
  // No such handle, and another client's handle.
  std::vector<float> a(std::size_t(l.a_elements), 1.0f);
  MultiplyOptions opt;
  opt.b_handle = "0123456789abcdef0123456789abcdef";
  auto no_handle = alice_->multiply_batch(batch, a.data(), nullptr, nullptr, opt);
  expect_error(no_handle.status(), StatusCode::kNotFound, "header.b_handle");
  std::vector<float> b(std::size_t(7 * 11), 1.0f);
  auto put = alice_->put(7, 11, b.data());
  ASSERT_TRUE(put.ok()) << put.status().to_string();
  opt.b_handle = put->handle;
  auto bobs = bob->multiply_batch(batch, a.data(), nullptr, nullptr, opt);
  EXPECT_FALSE(bobs.ok());
  EXPECT_NE(bobs.status().message().find("header.b_handle"), std::string::npos) << bobs.status().to_string();
  EXPECT_TRUE(alice_->remove(put->handle).ok());
  // A shared operand on a group is refused before anything is sent.
  BatchProducts group;
  group.group = kOddGroup;
  auto on_group = alice_->multiply_batch(group, a.data(), nullptr, nullptr, opt);
  EXPECT_EQ(on_group.status().code(), StatusCode::kInvalidArgument) << on_group.status().to_string();
  expect_served();
}

}  // namespace
}  // namespace sgemm
