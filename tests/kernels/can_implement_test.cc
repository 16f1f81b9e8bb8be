// can_implement of the ping-pong kernel and of cuBLAS: pure shape/pointer checks,
// no GPU needed (the pointers are never dereferenced).
#include <gtest/gtest.h>

#include <climits>
#include <string>

#include "kernels/backend_factories.h"
#include "kernels/gemm_backend.h"
#include "kernels/gemv_sgemm.h"
#include "kernels/pingpong_sgemm.h"

namespace sgemm {
namespace {

// Fake, never dereferenced device addresses (16-byte aligned and not).
const float* const kA = reinterpret_cast<const float*>(uintptr_t{0x10000});
const float* const kB = reinterpret_cast<const float*>(uintptr_t{0x20000});
float* const kC = reinterpret_cast<float*>(uintptr_t{0x30000});

GemmArgs args(int64_t m, int64_t n, int64_t k) { return dense_gemm_args({m, n, k}, 1.0f, kA, kB, 0.0f, kC); }

void expect_invalid(const Status& s, const std::string& field) {
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find(field), std::string::npos) << "message should name '" << field << "': " << s.message();
}

TEST(PingpongCanImplement, AcceptsAnyPositiveShape) {
  for (int64_t m : {1, 7, 128, 129, 4095, 8193})
    for (int64_t n : {1, 3, 64, 1000})
      for (int64_t k : {1, 5, 16, 16384})
        EXPECT_TRUE(pingpong_can_implement(args(m, n, k)).ok()) << m << " " << n << " " << k;
}

TEST(PingpongCanImplement, AcceptsUnalignedPointersAndLeadingDimensions) {
  GemmArgs g = args(100, 100, 100);
  g.a = kA + 1;
  g.b = kB + 3;
  g.c = kC + 2;
  g.lda = 101;
  g.ldb = 103;
  g.ldc = 105;
  EXPECT_TRUE(pingpong_can_implement(g).ok());
}

TEST(PingpongCanImplement, RejectsEmptyOrNegativeSizes) {
  expect_invalid(pingpong_can_implement(args(0, 4, 4)), "shape.m");
  expect_invalid(pingpong_can_implement(args(4, 0, 4)), "shape.n");
  expect_invalid(pingpong_can_implement(args(4, 4, 0)), "shape.k");
  expect_invalid(pingpong_can_implement(args(-1, 4, 4)), "shape.m");
}

TEST(PingpongCanImplement, RejectsSizesPast32Bits) {
  expect_invalid(pingpong_can_implement(args(int64_t{INT_MAX} + 1, 4, 4)), "shape.m");
  expect_invalid(pingpong_can_implement(args(4, int64_t{INT_MAX} + 1, 4)), "shape.n");
  expect_invalid(pingpong_can_implement(args(4, 4, int64_t{INT_MAX} + 1)), "shape.k");
}

TEST(PingpongCanImplement, RejectsShortLeadingDimensions) {
  GemmArgs g = args(10, 20, 30);
  g.lda = 29;
  expect_invalid(pingpong_can_implement(g), "lda");
  g = args(10, 20, 30);
  g.ldb = 19;
  expect_invalid(pingpong_can_implement(g), "ldb");
  g = args(10, 20, 30);
  g.ldc = 19;
  expect_invalid(pingpong_can_implement(g), "ldc");
}

TEST(PingpongCanImplement, RejectsNullPointers) {
  GemmArgs g = args(4, 4, 4);
  g.a = nullptr;
  expect_invalid(pingpong_can_implement(g), "a:");
  g = args(4, 4, 4);
  g.b = nullptr;
  expect_invalid(pingpong_can_implement(g), "b:");
  g = args(4, 4, 4);
  g.c = nullptr;
  expect_invalid(pingpong_can_implement(g), "c:");
}

TEST(PingpongVariants, HaveNamesAndPicksAreValid) {
  ASSERT_GT(pingpong_variant_count(), 0);
  for (int v = 0; v < pingpong_variant_count(); ++v) EXPECT_NE(pingpong_variant_name(v), "unknown");
  EXPECT_EQ(pingpong_variant_name(-1), "unknown");
  for (int64_t s : {1, 100, 1024, 2048, 4096, 8192}) {
    const int v = pingpong_pick_variant({s, s, s}, 132);
    EXPECT_GE(v, 0);
    EXPECT_LT(v, pingpong_variant_count());
  }
}

TEST(GemvCanImplement, OnlySingleRowsOrColumnsOfC) {
  EXPECT_TRUE(gemv_can_implement(args(1, 4096, 4096)).ok());
  EXPECT_TRUE(gemv_can_implement(args(4096, 1, 4096)).ok());
  EXPECT_TRUE(gemv_can_implement(args(1, 1, 1)).ok());
  expect_invalid(gemv_can_implement(args(2, 2, 16)), "shape");
  expect_invalid(gemv_can_implement(args(1, 0, 16)), "shape.n");
  expect_invalid(gemv_can_implement(args(1, 16, int64_t{INT_MAX} + 1)), "shape.k");
  GemmArgs g = args(1, 100, 100);
  g.ldb = 99;
  expect_invalid(gemv_can_implement(g), "ldb");
  g = args(100, 1, 100);
  g.a = nullptr;
  expect_invalid(gemv_can_implement(g), "a:");
}

TEST(GemvWorkspace, OnlySplitSingleRowsNeedOne) {
  EXPECT_GT(gemv_workspace_bytes({1, 4096, 4096}, 132), 0u);  // 32 column blocks: K is split
  EXPECT_EQ(gemv_workspace_bytes({4096, 1, 4096}, 132), 0u);
  EXPECT_EQ(gemv_workspace_bytes({1, 1 << 20, 256}, 132), 0u);  // enough column blocks, short K
}

TEST(PingpongVariants, GemvVariantAcceptsOnlyItsShapes) {
  int gemv = -1;
  for (int v = 0; v < pingpong_variant_count(); ++v)
    if (pingpong_variant_name(v) == "gemv") gemv = v;
  ASSERT_GE(gemv, 0);
  EXPECT_TRUE(pingpong_variant_accepts({1, 300, 300}, gemv));
  EXPECT_FALSE(pingpong_variant_accepts({2, 300, 300}, gemv));
  EXPECT_EQ(pingpong_pick_variant({1, 4096, 4096}, 132), gemv);
  EXPECT_EQ(pingpong_pick_variant({4096, 1, 4096}, 132), gemv);
}

// The picker's ids and the variant table agree: each class gets the tile measured for it.
TEST(PingpongVariants, PicksNameTheMeasuredTiles) {
  const auto picked = [](GemmShape s) { return std::string(pingpong_variant_name(pingpong_pick_variant(s, 132))); };
  // Few tiles and a short K: the 64x64 K-major tile (1024^3: 128 tiles of 64x128 on 528 slots).
  EXPECT_EQ(picked({1024, 1024, 1024}), "64x64x32_w32x32_t4x8_s3_akm_splitk512_or_128x64x16");
  EXPECT_EQ(picked({512, 512, 512}), "64x64x32_w32x32_t4x8_s3_akm_splitk512_or_128x64x16");
  EXPECT_EQ(picked({1792, 1792, 1792}), "64x128x16_w32x64_t8x8_s4-aligned_s3-unaligned");  // 392 tiles
  EXPECT_EQ(picked({777, 555, 333}), "64x128x16_w32x64_t8x8_s4-aligned_s3-unaligned");     // K % 4 != 0
  EXPECT_EQ(picked({8192, 8192, 1024}), "64x128x16_w32x64_t8x8_s4-aligned_s3-unaligned");
  EXPECT_EQ(picked({2048, 2048, 2048}), "tma_128x256x32_w64x64_t8x16_s4");
  EXPECT_EQ(picked({4096, 4096, 4096}), "tma_128x256x32_w64x64_t8x16_s4");
  EXPECT_EQ(picked({6144, 6144, 6144}), "tma_128x256x32_w64x64_t8x16_s4");
  EXPECT_EQ(picked({8192, 8192, 8192}), "tma_192x128x32_w64x32_t8x8_s5");
  // The rings where they fill the last wave better than 128x256 (n % 256 in 1..128).
  EXPECT_EQ(picked({4096, 4224, 4096}), "tma_2x128x128x32_w64x64_t8x16_s3_rings");
  // Stream-K where every whole-tile schedule fills the last wave poorly (issue 14, fifth pass).
  EXPECT_EQ(picked({2560, 2560, 2560}), "tma_128x256x32_w64x64_t8x16_s4_streamk");
  EXPECT_EQ(picked({5120, 5120, 5120}), "tma_128x256x32_w64x64_t8x16_s4_streamk");
  EXPECT_EQ(picked({3072, 3072, 3072}), "tma_192x128x32_w64x32_t8x8_s5");
  EXPECT_EQ(picked({5632, 5632, 5632}), "tma_192x128x32_w64x32_t8x8_s5");
  EXPECT_EQ(picked({1024, 1024, 16384}), "tma_128x256x32_w64x64_t8x16_s4_splitk");
  EXPECT_EQ(picked({128, 8192, 8192}), "tma_128x256x32_w64x64_t8x16_s4_splitk");
  EXPECT_EQ(picked({1, 4096, 4096}), "gemv");
  EXPECT_EQ(picked({8192, 1, 8192}), "gemv");
  EXPECT_EQ(picked({8192, 32, 8192}), "128x32x32_w32x32_t4x8_s3_akm_splitk512_or_256x32x16");
  EXPECT_EQ(picked({8192, 64, 8192}), "64x64x32_w32x32_t4x8_s3_akm_splitk512_or_128x64x16");
  EXPECT_EQ(picked({8192, 64, 1024}), "128x64x16_w64x32_t8x8_s3_splitk512_cluster");
  // The engine's 512-row blocks of thin products: the K-major tiles from 256 rows with K >= 2048.
  EXPECT_EQ(picked({512, 32, 8192}), "128x32x32_w32x32_t4x8_s3_akm_splitk512_or_256x32x16");
  EXPECT_EQ(picked({256, 17, 2048}), "128x32x32_w32x32_t4x8_s3_akm_splitk512_or_256x32x16");
  EXPECT_EQ(picked({512, 64, 4096}), "64x64x32_w32x32_t4x8_s3_akm_splitk512_or_128x64x16");
  EXPECT_EQ(picked({768, 40, 6144}), "64x64x32_w32x32_t4x8_s3_akm_splitk512_or_128x64x16");
  EXPECT_EQ(picked({512, 64, 1024}), "64x128x16_w32x64_t8x8_s4-aligned_s3-unaligned");
  EXPECT_EQ(picked({200, 32, 8192}), "64x128x16_w32x64_t8x8_s4_splitk");
  EXPECT_EQ(picked({32, 8192, 8192}), "32x128x16_w16x64_t4x8_s4_splitk512");
  EXPECT_EQ(picked({8192, 128, 8192}), "64x128x16_w32x64_t8x8_s4_splitk");
  // Few tiles and a long K (issue 14, tenth session): the 128x256 split-K tile only where its units
  // fill 90% of a wave and C has more than 64 rows; else the 64x128 split-K tile where its blocks
  // fill 90% of theirs, else the 64x64 K-major tile; 65-96 columns take the 128x32 K-major tile.
  EXPECT_EQ(picked({128, 8192, 4096}), "tma_128x256x32_w64x64_t8x16_s4_splitk");  // 32 tiles x 4 splits
  EXPECT_EQ(picked({80, 8192, 8192}), "tma_128x256x32_w64x64_t8x16_s4_splitk");
  EXPECT_EQ(picked({64, 8192, 8192}), "64x128x16_w32x64_t8x8_s4_splitk");
  EXPECT_EQ(picked({48, 8192, 8192}), "64x128x16_w32x64_t8x8_s4_splitk");
  EXPECT_EQ(picked({128, 4096, 4096}), "64x64x32_w32x32_t4x8_s3_akm_splitk512_or_128x64x16");  // 16 x 4 units
  EXPECT_EQ(picked({64, 4096, 4096}), "64x64x32_w32x32_t4x8_s3_akm_splitk512_or_128x64x16");
  EXPECT_EQ(picked({512, 512, 8192}), "64x64x32_w32x32_t4x8_s3_akm_splitk512_or_128x64x16");
  EXPECT_EQ(picked({256, 256, 16384}), "64x64x32_w32x32_t4x8_s3_akm_splitk512_or_128x64x16");
  EXPECT_EQ(picked({768, 768, 16384}), "tma_128x256x32_w64x64_t8x16_s4_splitk");  // 18 tiles x 7 splits
  EXPECT_EQ(picked({4096, 128, 4096}), "64x64x32_w32x32_t4x8_s3_akm_splitk512_or_128x64x16");
  EXPECT_EQ(picked({2048, 128, 8192}), "64x64x32_w32x32_t4x8_s3_akm_splitk512_or_128x64x16");
  EXPECT_EQ(picked({16384, 128, 4096}), "64x128x16_w32x64_t8x8_s4_splitk");
  EXPECT_EQ(picked({4096, 96, 4096}), "128x32x32_w32x32_t4x8_s3_akm_splitk512_or_256x32x16");
  EXPECT_EQ(picked({8192, 96, 8192}), "128x32x32_w32x32_t4x8_s3_akm_splitk512_or_256x32x16");
  // ... and none pads C more than the smaller tiles: 192 rows or columns are whole 64-wide tiles.
  EXPECT_EQ(picked({192, 4096, 8192}), "64x128x16_w32x64_t8x8_s4_splitk");
  EXPECT_EQ(picked({8192, 192, 4096}), "64x64x32_w32x32_t4x8_s3_akm_splitk512_or_128x64x16");
}

TEST(CublasCanImplement, MirrorsTheInterfaceRules) {
  EXPECT_TRUE(cublas_can_implement(args(1, 1, 1)).ok());
  expect_invalid(cublas_can_implement(args(0, 1, 1)), "shape.m");
  GemmArgs g = args(10, 20, 30);
  g.ldc = 5;
  expect_invalid(cublas_can_implement(g), "ldc");
  g = args(10, 20, 30);
  g.lda = int64_t{INT_MAX} + 1;
  expect_invalid(cublas_can_implement(g), "lda");
}

TEST(KernelKind, EveryGpuKindHasABackendFactory) {
  for (KernelKind k : gpu_kernel_kinds()) {
    EXPECT_EQ(parse_kernel_kind(kernel_kind_name(k)), k);
  }
  EXPECT_FALSE(parse_kernel_kind("fp16").has_value());
}

}  // namespace
}  // namespace sgemm
