// The rule that cuts fp32x3's K (common/fp32x3_slices.h), on a 132-SM GPU.
#include "common/fp32x3_slices.h"

#include <gtest/gtest.h>

namespace sgemm {
namespace {

constexpr int kSms = 132;

int64_t units(const GemmShape& s, const Fp32x3Slices& cut) {
  return ((s.m + 127) / 128) * ((s.n + 127) / 128) * cut.count;
}

TEST(Fp32x3Slices, CountCoversKWithEqualSlices) {
  for (GemmShape s : {GemmShape{1, 1, 1}, GemmShape{7, 9, 33}, GemmShape{256, 256, 131072}, GemmShape{5, 5, 100001}})
    for (int64_t want : {1, 2, 3, 7, 64, 1000, 1 << 20}) {
      const Fp32x3Slices cut = fp32x3_slices_of_count(s, want);
      const int64_t k_blocks = (s.k + 31) / 32;
      EXPECT_GE(cut.count, 1);
      EXPECT_LE(cut.count, std::min(want, k_blocks));
      // Every slice but the last is full; the last holds at least one k-block.
      EXPECT_GE(cut.count * cut.slice_blocks, k_blocks) << s.k << " " << want;
      EXPECT_LT((cut.count - 1) * cut.slice_blocks, k_blocks) << s.k << " " << want;
    }
}

TEST(Fp32x3Slices, FullWavesAreNotCut) {
  for (GemmShape s : {GemmShape{8192, 8192, 8192}, GemmShape{2048, 2048, 32768}, GemmShape{16384, 4096, 4096},
                      GemmShape{3072, 3072, 3072}, GemmShape{2560, 2560, 2560}, GemmShape{2048, 2048, 2048}})
    EXPECT_EQ(fp32x3_slices(s, kSms).count, 1) << gemm_shape_text(s);
}

TEST(Fp32x3Slices, FewTilesAndLongKAreCut) {
  for (GemmShape s : {GemmShape{128, 128, 131072}, GemmShape{256, 256, 131072}, GemmShape{512, 512, 65536},
                      GemmShape{1024, 1024, 16384}, GemmShape{1536, 1536, 65536}, GemmShape{1536, 1536, 8192},
                      GemmShape{4096, 256, 16384}}) {
    const Fp32x3Slices cut = fp32x3_slices(s, kSms);
    EXPECT_GT(cut.count, 1) << gemm_shape_text(s);
    EXPECT_GE(fp32x3_wave_fill(units(s, cut), kSms), 0.5) << gemm_shape_text(s);
    EXPECT_GE(cut.slice_blocks, kFp32x3MinSliceKBlocks) << gemm_shape_text(s);
  }
}

TEST(Fp32x3Slices, WhereCublasSplitsKNoSliceIsLongerThanTheContractAllows) {
  for (GemmShape s : {GemmShape{256, 256, 131072}, GemmShape{512, 512, 65536}, GemmShape{1536, 1536, 65536},
                      GemmShape{1536, 1536, 2080}, GemmShape{1000, 300, 1 << 20}}) {
    ASSERT_TRUE(sgemm_may_split_k(s)) << gemm_shape_text(s);
    EXPECT_LE(fp32x3_slices(s, kSms).slice_blocks, kFp32x3ContractSliceKBlocks) << gemm_shape_text(s);
  }
  // The speed model alone would cut 512^2 x 65536 into 8 slices of 256 k-blocks.
  EXPECT_EQ(fp32x3_slices({512, 512, 65536}, kSms).count, 32);
  // Outside that region the cut is for speed only.
  EXPECT_FALSE(sgemm_may_split_k({4096, 4096, 16384}));
  EXPECT_EQ(fp32x3_slices({4096, 4096, 16384}, kSms).count, 1);
}

TEST(Fp32x3Slices, ShortKIsNotCutBelowTheMinimumSlice) {
  for (GemmShape s : {GemmShape{128, 128, 255}, GemmShape{256, 256, 300}, GemmShape{1, 1, 1}})
    EXPECT_EQ(fp32x3_slices(s, kSms).count, 1) << gemm_shape_text(s);
  const Fp32x3Slices cut = fp32x3_slices({128, 128, 1024}, kSms);  // 32 k-blocks: at most 4 slices
  EXPECT_EQ(cut.count, 4);
  EXPECT_EQ(cut.slice_blocks, 8);
}

TEST(Fp32x3Slices, WaveFill) {
  EXPECT_DOUBLE_EQ(fp32x3_wave_fill(132, kSms), 1.0);
  EXPECT_DOUBLE_EQ(fp32x3_wave_fill(144, kSms), 144.0 / 264.0);
  EXPECT_DOUBLE_EQ(fp32x3_wave_fill(0, kSms), 0.0);
}

}  // namespace
}  // namespace sgemm
