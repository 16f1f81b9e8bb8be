// fp32x3_can_implement and its workspace size: pure checks, no GPU needed (the
// pointers are never dereferenced).
#include <gtest/gtest.h>

#include <climits>
#include <string>

#include "kernels/fp32x3_sgemm.h"

namespace sgemm {
namespace {

const float* const kA = reinterpret_cast<const float*>(uintptr_t{0x10000});
const float* const kB = reinterpret_cast<const float*>(uintptr_t{0x20000});
float* const kC = reinterpret_cast<float*>(uintptr_t{0x30000});

GemmArgs args(int64_t m, int64_t n, int64_t k) { return dense_gemm_args({m, n, k}, 1.0f, kA, kB, 0.0f, kC); }

void expect_invalid(const Status& s, const std::string& field) {
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find(field), std::string::npos) << "message should name '" << field << "': " << s.message();
}

TEST(Fp32x3CanImplement, AcceptsAnyPositiveShapeAndAlignment) {
  for (int64_t m : {1, 7, 128, 129, 4095, 8193})
    for (int64_t n : {1, 3, 64, 1000})
      for (int64_t k : {1, 5, 16, 65536}) EXPECT_TRUE(fp32x3_can_implement(args(m, n, k)).ok()) << m << n << k;
  GemmArgs g = args(100, 100, 100);
  g.a = kA + 1;
  g.b = kB + 3;
  g.c = kC + 2;
  g.lda = 101;
  g.ldb = 103;
  g.ldc = 105;
  EXPECT_TRUE(fp32x3_can_implement(g).ok());
}

TEST(Fp32x3CanImplement, RefusalsNameTheField) {
  expect_invalid(fp32x3_can_implement(args(0, 5, 5)), "shape.m");
  expect_invalid(fp32x3_can_implement(args(5, 0, 5)), "shape.n");
  expect_invalid(fp32x3_can_implement(args(5, 5, 0)), "shape.k");
  expect_invalid(fp32x3_can_implement(args(int64_t{INT_MAX} + 1, 5, 5)), "shape.m");
  GemmArgs g = args(10, 20, 30);
  g.a = nullptr;
  expect_invalid(fp32x3_can_implement(g), "a:");
  g = args(10, 20, 30);
  g.b = nullptr;
  expect_invalid(fp32x3_can_implement(g), "b:");
  g = args(10, 20, 30);
  g.c = nullptr;
  expect_invalid(fp32x3_can_implement(g), "c:");
  g = args(10, 20, 30);
  g.lda = 29;
  expect_invalid(fp32x3_can_implement(g), "lda");
  g = args(10, 20, 30);
  g.ldb = 19;
  expect_invalid(fp32x3_can_implement(g), "ldb");
  g = args(10, 20, 30);
  g.ldc = 19;
  expect_invalid(fp32x3_can_implement(g), "ldc");
  // m * k beyond what a tensor map's byte stride can hold.
  expect_invalid(fp32x3_can_implement(args(int64_t{1} << 30, 4, int64_t{1} << 10)), "shape.m");
}

TEST(Fp32x3Workspace, HoldsBothSplitOperands) {
  // hi and lo planes of A (m x kp) and of B transposed (n x kp), kp = k rounded up to 4,
  // and one 256-byte aligned slot for the infinity mark's word.
  EXPECT_GE(fp32x3_workspace_bytes({100, 50, 30}), size_t(2 * (100 + 50) * 32 * 4));
  EXPECT_EQ(fp32x3_workspace_bytes({4096, 4096, 4096}), size_t(2) * 8192 * 4096 * 4 + 256);
  EXPECT_LT(fp32x3_workspace_bytes({1, 1, 1}), size_t(1024));
}

}  // namespace
}  // namespace sgemm
