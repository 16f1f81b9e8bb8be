#include "client/stripe_plan.h"

#include <gtest/gtest.h>

#include <vector>

namespace sgemm {
namespace {

// Every element of every stored matrix is sent exactly once, block j of its
// stored rows on stripe j % stripes, B before A on each stripe, and a block
// holds at most `chunk_bytes` (one chunk).
void expect_covers(const GemmShape& s, bool has_c, const StripePlan& p, Op op_a = Op::kN, Op op_b = Op::kN,
                   int64_t chunk_bytes = 0) {
  std::vector<int> a(std::size_t(s.m * s.k)), b(std::size_t(s.k * s.n)), c(std::size_t(s.m * s.n));
  for (int st = 0; st < p.stripes; ++st) {
    bool seen_a = false;
    for (const StripeRange& r : p.per_stripe[std::size_t(st)]) {
      auto& v = r.matrix == StripeMatrix::kA ? a : r.matrix == StripeMatrix::kB ? b : c;
      if (r.matrix == StripeMatrix::kA) seen_a = true;
      EXPECT_FALSE(seen_a && r.matrix != StripeMatrix::kA) << "B and C go before A";
      for (int64_t e = r.begin; e < r.end; ++e) ++v[std::size_t(e)];
      if (p.stripes > 1) {
        const int64_t width = r.matrix == StripeMatrix::kA   ? (op_a == Op::kT ? s.m : s.k)
                              : r.matrix == StripeMatrix::kB ? (op_b == Op::kT ? s.k : s.n)
                                                             : s.n;
        EXPECT_EQ((r.begin / width / p.stripe_rows) % p.stripes, st);
        EXPECT_EQ(r.begin % (p.stripe_rows * width), 0);
        EXPECT_LE(r.end - r.begin, p.stripe_rows * width);
        if (chunk_bytes > 0) {
          EXPECT_LE((r.end - r.begin) * int64_t(sizeof(float)), chunk_bytes);
        }
      }
    }
  }
  for (int x : a) EXPECT_EQ(x, 1);
  for (int x : b) EXPECT_EQ(x, 1);
  for (int x : c) EXPECT_EQ(x, has_c ? 1 : 0);
}

TEST(StripePlan, OneStripeIsTheWholeMatricesBThenCThenA) {
  const StripePlan p = plan_stripes({5, 7, 3}, true, 1, 1 << 20);
  ASSERT_EQ(p.stripes, 1);
  ASSERT_EQ(p.per_stripe[0].size(), 3u);
  EXPECT_EQ(p.per_stripe[0][0].matrix, StripeMatrix::kB);
  EXPECT_EQ(p.per_stripe[0][1].matrix, StripeMatrix::kC);
  EXPECT_EQ(p.per_stripe[0][2].matrix, StripeMatrix::kA);
  expect_covers({5, 7, 3}, true, p);
}

TEST(StripePlan, BlocksHoldOneChunkOfTheWidestMatrixAndCoverEverything) {
  const StripePlan p = plan_stripes({8192, 8192, 8192}, false, 4, 1 << 20);
  EXPECT_EQ(p.stripes, 4);
  EXPECT_EQ(p.stripe_rows, 32);  // 32 rows of 8192 floats = 1 MiB
  for (const GemmShape& s : {GemmShape{257, 129, 193}, GemmShape{1000, 37, 300}, GemmShape{64, 512, 1}})
    for (int n : {2, 3, 4, 8})
      for (bool has_c : {false, true}) expect_covers(s, has_c, plan_stripes(s, has_c, n, 4096));
}

TEST(StripePlan, NoMoreStripesThanBlocksOfC) {
  EXPECT_EQ(plan_stripes({3, 1, 5}, false, 4, 4096).stripes, 1);       // one block of A
  EXPECT_EQ(plan_stripes({64, 1024, 64}, false, 8, 4096).stripes, 8);  // a row per block
  EXPECT_EQ(plan_stripes({2, 1024, 64}, false, 8, 4096).stripes, 2);
}

// Transposed operands are cut by their stored rows (A k x m under op_a = t,
// B n x k under op_b = t), so their block counts differ from C's.
TEST(StripePlan, TransposedOperandsAreCutByStoredRows) {
  for (const GemmShape& s : {GemmShape{301, 131, 67}, GemmShape{97, 23, 211}, GemmShape{40, 300, 5}})
    for (Op op_a : {Op::kN, Op::kT})
      for (Op op_b : {Op::kN, Op::kT})
        for (int n : {2, 3, 4})
          for (bool has_c : {false, true}) {
            SCOPED_TRACE(gemm_shape_text(s) + " op_a " + std::string(op_name(op_a)) + " op_b " +
                         std::string(op_name(op_b)) + " stripes " + std::to_string(n));
            const StripePlan p = plan_stripes(s, has_c, n, 4096, op_a, op_b);
            EXPECT_EQ(p.stripes, n);
            expect_covers(s, has_c, p, op_a, op_b, 4096);
          }
  // 97 x 23 x 211 with op_a = t: A is stored 211 x 97, the widest (10 rows of
  // 97 floats per 4 KiB block): 22 blocks of A, 10 of C.
  const StripePlan p = plan_stripes({97, 23, 211}, false, 4, 4096, Op::kT, Op::kN);
  EXPECT_EQ(p.stripe_rows, 10);
  int64_t a_blocks = 0;
  for (const auto& stripe : p.per_stripe)
    for (const StripeRange& r : stripe) a_blocks += r.matrix == StripeMatrix::kA;
  EXPECT_EQ(a_blocks, 22);
}

// C's blocks bound the stripes (each stripe answers with its rows of C),
// whatever the stored A's: 8 rows of C but 64 stored rows of A under op_a = t.
TEST(StripePlan, NoMoreStripesThanBlocksOfCWithATransposedA) {
  EXPECT_EQ(plan_stripes({8, 1024, 64}, false, 8, 4096, Op::kT, Op::kN).stripes, 8);  // a row per block
  EXPECT_EQ(plan_stripes({2, 1024, 64}, false, 8, 4096, Op::kT, Op::kN).stripes, 2);
  EXPECT_EQ(plan_stripes({64, 1024, 2}, false, 8, 4096, Op::kT, Op::kT).stripes, 8);  // A: 2 stored rows
  expect_covers({64, 1024, 2}, true, plan_stripes({64, 1024, 2}, true, 8, 4096, Op::kT, Op::kT), Op::kT, Op::kT, 4096);
}

TEST(StripePlan, ConnectionsBySize) {
  EXPECT_EQ(stripes_for({256, 256, 256}, false, 0), 1);
  EXPECT_EQ(stripes_for({1024, 1024, 1024}, false, 0), 1);                       // 12 MiB
  EXPECT_EQ(stripes_for({1536, 1024, 1024}, false, 0), kStripeAutoConnections);  // 16 MiB
  EXPECT_EQ(stripes_for({1024, 1024, 1024}, false, 2), 2);
  EXPECT_EQ(stripes_for({8192, 8192, 8192}, true, 0), kStripeAutoConnections);
}

}  // namespace
}  // namespace sgemm
