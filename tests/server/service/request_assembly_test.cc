#include "server/service/request_assembly.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <thread>
#include <vector>

namespace sgemm {
namespace {

GemmRequest header(int64_t m, int64_t n, int64_t k) {
  GemmRequest h;
  h.shape = {m, n, k};
  return h;
}

TEST(CheckLimits, AcceptsOrdinaryShapes) {
  EXPECT_TRUE(check_limits(header(1, 1, 1), {}).ok());
  EXPECT_TRUE(check_limits(header(513, 1025, 257), {}).ok());
}

// The shape and scalar rules are the engine's (one validation): check_limits
// leaves them to Engine::validate / check_gemm_request.
TEST(CheckGemmRequest, RejectsZeroAndNegativeDimensionsNamingThem) {
  for (auto [m, n, k, field] : {std::tuple{0, 1, 1, "header.m"}, {1, -3, 1, "header.n"}, {1, 1, 0, "header.k"}}) {
    EXPECT_TRUE(check_limits(header(m, n, k), {}).ok());
    Status st = check_gemm_request(header(m, n, k));
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find(field), std::string::npos) << st.message();
  }
}

TEST(CheckLimits, RejectsOverflowingElementCounts) {
  const int64_t big = int64_t{1} << 40;
  Status st = check_limits(header(big, 1, big), {});
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("overflows"), std::string::npos) << st.message();
}

TEST(CheckLimits, RejectsMatricesOverTheLimit) {
  RequestLimits limits;
  limits.max_matrix_elements = 1000;
  Status st = check_limits(header(10, 200, 10), limits);  // B = 10 x 200 = 2000
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(st.message().find("B has 2000 elements"), std::string::npos) << st.message();
}

TEST(CheckGemmRequest, RejectsNonFiniteAlphaAndBeta) {
  GemmRequest h = header(2, 2, 2);
  h.alpha = std::numeric_limits<float>::quiet_NaN();
  EXPECT_NE(check_gemm_request(h).message().find("alpha"), std::string::npos);
  h.alpha = 1;
  h.beta = std::numeric_limits<float>::infinity();
  Status st = check_gemm_request(h);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("beta"), std::string::npos);
}

struct Buffers {
  explicit Buffers(GemmShape s) : a(s.m * s.k), b(s.k * s.n), c(s.m * s.n) {}
  std::vector<float> a, b, c;
};

TEST(MatrixAssembler, AssemblesInterleavedInOrderChunks) {
  GemmShape s{3, 4, 5};
  Buffers buf(s);
  MatrixAssembler as(s, true, buf.a.data(), buf.b.data(), buf.c.data(), 1 << 20);
  std::vector<float> a(15), b(20), c(12);
  for (int i = 0; i < 15; ++i) a[i] = float(i);
  for (int i = 0; i < 20; ++i) b[i] = float(100 + i);
  for (int i = 0; i < 12; ++i) c[i] = float(-i);
  ASSERT_TRUE(as.add_chunk(MatrixId::kA, 0, a.data(), 7 * 4).ok());
  ASSERT_TRUE(as.add_chunk(MatrixId::kB, 0, b.data(), 20 * 4).ok());
  ASSERT_TRUE(as.add_chunk(MatrixId::kA, 7, a.data() + 7, 8 * 4).ok());
  ASSERT_TRUE(as.add_chunk(MatrixId::kC, 0, c.data(), 12 * 4).ok());
  ASSERT_TRUE(as.finish().ok());
  EXPECT_EQ(buf.a, a);
  EXPECT_EQ(buf.b, b);
  EXPECT_EQ(buf.c, c);
  EXPECT_EQ(as.bytes_received(), (15 + 20 + 12) * 4);
}

TEST(MatrixAssembler, RejectsBadChunksNamingTheProblem) {
  GemmShape s{2, 2, 2};
  Buffers buf(s);
  MatrixAssembler as(s, false, buf.a.data(), buf.b.data(), buf.c.data(), 64);
  float v[32] = {};
  auto expect = [](Status st, StatusCode code, const char* words) {
    EXPECT_EQ(st.code(), code) << st.to_string();
    EXPECT_NE(st.message().find(words), std::string::npos) << st.message();
  };
  expect(as.add_chunk(MatrixId::kC, 0, v, 16), StatusCode::kInvalidArgument, "declared no C");
  expect(as.add_chunk(MatrixId::kA, 0, v, 7), StatusCode::kInvalidArgument, "not a multiple of 4");
  expect(as.add_chunk(MatrixId::kA, 0, v, 0), StatusCode::kInvalidArgument, "empty");
  expect(as.add_chunk(MatrixId::kA, 0, v, 80), StatusCode::kInvalidArgument, "over the limit");
  expect(as.add_chunk(MatrixId::kA, 2, v, 8), StatusCode::kInvalidArgument, "in order");
  expect(as.add_chunk(MatrixId::kA, 0, v, 20), StatusCode::kInvalidArgument, "overruns");
  ASSERT_TRUE(as.add_chunk(MatrixId::kA, 0, v, 8).ok());
  expect(as.add_chunk(MatrixId::kA, 0, v, 8), StatusCode::kInvalidArgument, "in order");  // overlap
  expect(as.finish(), StatusCode::kInvalidArgument, "A has 2 of 4 elements");
}

TEST(MatrixAssembler, WaitForReleasesAsDataArrivesAndFailReleasesWaiters) {
  GemmShape s{4, 1, 1};
  Buffers buf(s);
  MatrixAssembler as(s, false, buf.a.data(), buf.b.data(), nullptr, 1 << 20);
  float v[4] = {1, 2, 3, 4};
  Status waited_a, waited_b;
  std::thread t([&] {
    waited_a = as.wait_for(MatrixId::kA, 4);
    waited_b = as.wait_for(MatrixId::kB, 1);
  });
  ASSERT_TRUE(as.add_chunk(MatrixId::kA, 0, v, 8).ok());
  ASSERT_TRUE(as.add_chunk(MatrixId::kA, 2, v + 2, 8).ok());
  as.fail(Cancelled("client went away"));
  t.join();
  EXPECT_TRUE(waited_a.ok());
  EXPECT_EQ(waited_b.code(), StatusCode::kCancelled);
  EXPECT_EQ(buf.a[3], 4.0f);
  // After a failure, chunks are refused with the failure.
  EXPECT_EQ(as.add_chunk(MatrixId::kB, 0, v, 4).code(), StatusCode::kCancelled);
}

TEST(MatrixAssembler, WithABudgetWaitForYieldsInsteadOfBlockingAndSetWaitBudgetClearsIt) {
  std::vector<float> a(4 * 4), b(4 * 4), c(4 * 4);
  MatrixAssembler asm_({4, 4, 4}, false, a.data(), b.data(), c.data(), 1 << 20);
  std::vector<float> row(4, 1.0f);
  ASSERT_TRUE(asm_.add_chunk(MatrixId::kA, 0, row.data(), 16).ok());
  asm_.set_wait_budget(std::chrono::milliseconds(50));
  EXPECT_TRUE(asm_.wait_for(MatrixId::kA, 4).ok()) << "present data never yields";
  auto st = asm_.wait_for(MatrixId::kA, 8);  // blocks about 50 ms, then yields
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.message();
  EXPECT_TRUE(asm_.yielded());
  EXPECT_EQ(asm_.wait_for(MatrixId::kA, 8).code(), StatusCode::kUnavailable) << "once spent, every wait yields";
  asm_.set_wait_budget(std::chrono::seconds(100));
  EXPECT_FALSE(asm_.yielded());
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    asm_.yield_now();
  });
  EXPECT_EQ(asm_.wait_for(MatrixId::kA, 8).code(), StatusCode::kUnavailable) << "yield_now() releases a waiter";
  t.join();
  asm_.set_wait_budget(std::chrono::milliseconds(0));
  std::thread feeder([&] { ASSERT_TRUE(asm_.add_chunk(MatrixId::kA, 4, row.data(), 16).ok()); });
  EXPECT_TRUE(asm_.wait_for(MatrixId::kA, 8).ok()) << "no budget: blocks until the data comes";
  feeder.join();
}

// Stripes (GemmHeader.stripes): blocks of stripe_rows rows, block j on stripe
// j % stripes; each stripe in order; wait_for sees the prefix every stripe has.
TEST(MatrixAssemblerStripes, InterleavedBlocksAssembleAndThePrefixIsTheSlowestStripes) {
  const GemmShape s{10, 2, 3};  // A 10 x 3, B 3 x 2
  std::vector<float> a(30), b(6);
  MatrixAssembler asm_(s, false, a.data(), b.data(), nullptr, 1 << 20);
  asm_.set_stripes(3, 2);  // A's blocks (6 elements): 0 1 2 3 4 -> stripes 0 1 2 0 1; B's (4): 0 1 -> 0 1
  std::vector<float> src(30);
  for (int i = 0; i < 30; ++i) src[std::size_t(i)] = float(i);
  EXPECT_TRUE(asm_.add_chunk(MatrixId::kB, 0, src.data(), 16, 0).ok());
  EXPECT_EQ(asm_.received(MatrixId::kB), 4);
  EXPECT_TRUE(asm_.add_chunk(MatrixId::kB, 4, src.data() + 4, 8, 1).ok());
  EXPECT_EQ(asm_.received(MatrixId::kB), 6);
  EXPECT_TRUE(asm_.add_chunk(MatrixId::kA, 6, src.data() + 6, 24, 1).ok());    // block 1
  EXPECT_TRUE(asm_.add_chunk(MatrixId::kA, 12, src.data() + 12, 24, 2).ok());  // block 2: stripe 2 is done
  EXPECT_EQ(asm_.received(MatrixId::kA), 0);                                   // block 0 is missing
  EXPECT_TRUE(asm_.add_chunk(MatrixId::kA, 0, src.data(), 12, 0).ok());        // half of block 0
  EXPECT_EQ(asm_.received(MatrixId::kA), 3);
  EXPECT_TRUE(asm_.add_chunk(MatrixId::kA, 3, src.data() + 3, 12, 0).ok());
  EXPECT_EQ(asm_.received(MatrixId::kA), 18);  // blocks 0-2; stripe 0's next is block 3 (18)
  EXPECT_TRUE(asm_.finish_stripe(2).ok());
  Status early = asm_.finish_stripe(1);
  EXPECT_EQ(early.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(early.message().find("stripe 1 of 3 ended its stream early"), std::string::npos) << early.message();
  EXPECT_TRUE(asm_.add_chunk(MatrixId::kA, 24, src.data() + 24, 24, 1).ok());  // block 4
  EXPECT_FALSE(asm_.complete());
  EXPECT_TRUE(asm_.add_chunk(MatrixId::kA, 18, src.data() + 18, 24, 0).ok());  // block 3
  EXPECT_TRUE(asm_.complete());
  EXPECT_TRUE(asm_.finish().ok());
  EXPECT_EQ(a, src);
  EXPECT_EQ(b, std::vector<float>(src.begin(), src.begin() + 6));
  EXPECT_EQ(asm_.bytes_received(), (30 + 6) * 4);
}

TEST(MatrixAssemblerStripes, RefusesAnotherStripesBlockAndAChunkAcrossABlockEnd) {
  const GemmShape s{8, 4, 4};
  std::vector<float> a(32), b(16), src(32, 1.0f);
  MatrixAssembler asm_(s, false, a.data(), b.data(), nullptr, 1 << 20);
  asm_.set_stripes(2, 2);  // A blocks of 8 elements: stripes 0 1 0 1
  Status st = asm_.add_chunk(MatrixId::kA, 0, src.data(), 32, 1);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("on stripe 1 of 2 starts at offset 0"), std::string::npos) << st.message();
  st = asm_.add_chunk(MatrixId::kA, 0, src.data(), 64, 0);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("crosses the end of its block at element 8"), std::string::npos) << st.message();
  EXPECT_TRUE(asm_.add_chunk(MatrixId::kA, 0, src.data(), 32, 0).ok());
  EXPECT_TRUE(asm_.add_chunk(MatrixId::kA, 16, src.data(), 32, 0).ok());      // jumps to its next block
  EXPECT_TRUE(asm_.finish_stripe(0).code() == StatusCode::kInvalidArgument);  // B (stripe 0's) is missing
}

// Transposed operands are cut by their stored rows: with op_a = kT A (m 2, k 5)
// is stored 5 x 2, blocks of 3 stored rows (6 elements, then 4) on stripes 0
// and 1; with op_b = kT B (k 5, n 3) is stored 3 x 5, one block, stripe 0's.
// Stripe 2 of 3 has no block of either: its share is complete from the start.
TEST(MatrixAssemblerStripes, TransposedOperandsAreCutByStoredRows) {
  const GemmShape s{2, 3, 5};
  std::vector<float> a(10), b(15), src(15);
  for (int i = 0; i < 15; ++i) src[std::size_t(i)] = float(i);
  MatrixAssembler asm_(s, false, a.data(), b.data(), nullptr, 1 << 20, Op::kT, Op::kT);
  asm_.set_stripes(3, 3);
  EXPECT_TRUE(asm_.finish_stripe(2).ok()) << "stripe 2 owns no block of the stored A or B";
  Status st = asm_.add_chunk(MatrixId::kA, 0, src.data(), 8 * 4, 0);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("crosses the end of its block at element 6"), std::string::npos) << st.message();
  EXPECT_TRUE(asm_.add_chunk(MatrixId::kA, 0, src.data(), 6 * 4, 0).ok());
  EXPECT_TRUE(asm_.add_chunk(MatrixId::kA, 6, src.data() + 6, 4 * 4, 1).ok());
  EXPECT_TRUE(asm_.finish_stripe(1).ok()) << "stripe 1 owns block 1 of A alone";
  EXPECT_FALSE(asm_.complete());
  EXPECT_TRUE(asm_.add_chunk(MatrixId::kB, 0, src.data(), 15 * 4, 0).ok());
  EXPECT_TRUE(asm_.complete());
  EXPECT_EQ(a, std::vector<float>(src.begin(), src.begin() + 10));
  EXPECT_EQ(b, src);
}

TEST(MatrixAssemblerStripes, TheEngineWaitsForThePrefixOfEveryStripe) {
  const GemmShape s{4, 1, 1};
  std::vector<float> a(4), b(1), one(4, 1.0f);
  MatrixAssembler asm_(s, false, a.data(), b.data(), nullptr, 1 << 20);
  asm_.set_stripes(2, 1);
  std::thread waiter([&] { EXPECT_TRUE(asm_.wait_for(MatrixId::kA, 2).ok()); });
  EXPECT_TRUE(asm_.add_chunk(MatrixId::kA, 1, one.data(), 4, 1).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(asm_.received(MatrixId::kA), 0);
  EXPECT_TRUE(asm_.add_chunk(MatrixId::kA, 0, one.data(), 4, 0).ok());
  waiter.join();
  EXPECT_EQ(asm_.received(MatrixId::kA), 2);
}

}  // namespace
// A matrix named by handle (docs/resident.md) is not sent: it counts as
// complete, waits for it return at once, and a chunk for it is refused.
TEST(MatrixAssembler, AProvidedMatrixIsCompleteAndTakesNoChunk) {
  std::vector<float> a(6, 1.0f);
  MatrixAssembler asm_(GemmShape{2, 4, 3}, /*has_c=*/true, a.data(), nullptr, nullptr, 1 << 20);
  asm_.mark_provided(MatrixId::kB);
  asm_.mark_provided(MatrixId::kC);
  EXPECT_FALSE(asm_.complete());
  EXPECT_EQ(asm_.received(MatrixId::kB), 12);
  EXPECT_TRUE(asm_.wait_for(MatrixId::kB, 12).ok());
  const Status refused = asm_.check_chunk(MatrixId::kB, 0, 16);
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("by handle"), std::string::npos) << refused.to_string();
  ASSERT_TRUE(asm_.add_chunk(MatrixId::kA, 0, a.data(), a.size() * sizeof(float)).ok());
  EXPECT_TRUE(asm_.complete());
  EXPECT_TRUE(asm_.finish().ok());
}

}  // namespace sgemm
