#include "common/reference_gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "common/status.h"

namespace sgemm {
namespace {

TEST(ReferenceGemm, AcceptsAnExactResultAndRejectsAPerturbedOne) {
  const int64_t m = 5, n = 7, k = 9;
  std::vector<float> a(m * k), b(k * n), c0(m * n), c(m * n);
  fill_random(a, 1);
  fill_random(b, 2);
  fill_random(c0, 3);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < k; ++p) acc += double(a[i * k + p]) * b[p * n + j];
      c[i * n + j] = float(2.0 * acc + 0.5 * c0[i * n + j]);
    }
  EXPECT_TRUE(verify_gemm(m, n, k, 2.0f, a.data(), b.data(), 0.5f, c0.data(), c.data()).passed(kSgemmTolerance));
  c[3 * n + 4] += 0.01f;
  auto r = verify_gemm(m, n, k, 2.0f, a.data(), b.data(), 0.5f, c0.data(), c.data());
  EXPECT_FALSE(r.passed(kSgemmTolerance));
  EXPECT_EQ(r.worst_row, 3);
  EXPECT_EQ(r.worst_col, 4);
}

TEST(ReferenceGemm, NanMustBeMatchedByNan) {
  std::vector<float> a = {std::numeric_limits<float>::quiet_NaN(), 1}, b = {1, 1}, c = {0};
  EXPECT_FALSE(verify_gemm(1, 1, 2, 1, a.data(), b.data(), 0, nullptr, c.data()).passed(kSgemmTolerance));
  c[0] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(verify_gemm(1, 1, 2, 1, a.data(), b.data(), 0, nullptr, c.data()).passed(kSgemmTolerance));
}

TEST(ReferenceGemm, SamplesRowsOfLargeProblemsIncludingFirstAndLast) {
  auto all = rows_to_verify(100, 100, 100, 1);
  EXPECT_EQ(all.size(), 100u);
  auto some = rows_to_verify(8192, 8192, 8192, 1, 64);
  EXPECT_EQ(some.size(), 64u);
  EXPECT_EQ(some.front(), 0);
  EXPECT_EQ(some.back(), 8191);
}

TEST(Status, CarriesCodeMessageAndContext) {
  Status st = InvalidArgument("m must be >= 1").with_context("header");
  EXPECT_EQ(st.to_string(), "INVALID_ARGUMENT: header: m must be >= 1");
  StatusOr<int> v = 3;
  EXPECT_TRUE(v.ok());
  StatusOr<int> e = Unavailable("busy");
  EXPECT_EQ(e.status().code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace sgemm
