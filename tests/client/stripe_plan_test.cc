#include "client/stripe_plan.h"

#include <gtest/gtest.h>

#include <vector>

namespace sgemm {
namespace {

// Every element of every matrix is sent exactly once, block j on stripe j % stripes, B before A on each stripe.
void expect_covers(const GemmShape& s, bool has_c, const StripePlan& p) {
  std::vector<int> a(std::size_t(s.m * s.k)), b(std::size_t(s.k * s.n)), c(std::size_t(s.m * s.n));
  for (int st = 0; st < p.stripes; ++st) {
    bool seen_a = false;
    for (const StripeRange& r : p.per_stripe[std::size_t(st)]) {
      auto& v = r.matrix == StripeMatrix::kA ? a : r.matrix == StripeMatrix::kB ? b : c;
      if (r.matrix == StripeMatrix::kA) seen_a = true;
      EXPECT_FALSE(seen_a && r.matrix != StripeMatrix::kA) << "B and C go before A";
      for (int64_t e = r.begin; e < r.end; ++e) ++v[std::size_t(e)];
      if (p.stripes > 1) {
        const int64_t width = r.matrix == StripeMatrix::kA ? s.k : s.n;
        EXPECT_EQ((r.begin / width / p.stripe_rows) % p.stripes, st);
        EXPECT_EQ(r.begin % (p.stripe_rows * width), 0);
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

TEST(StripePlan, NoMoreStripesThanBlocksOfA) {
  EXPECT_EQ(plan_stripes({3, 1, 5}, false, 4, 4096).stripes, 1);       // one block of A
  EXPECT_EQ(plan_stripes({64, 1024, 64}, false, 8, 4096).stripes, 8);  // a row per block
  EXPECT_EQ(plan_stripes({2, 1024, 64}, false, 8, 4096).stripes, 2);
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
