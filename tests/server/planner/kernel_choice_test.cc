#include "server/planner/kernel_choice.h"

#include <gtest/gtest.h>

namespace sgemm {
namespace {

const std::vector<KernelKind> kBoth = {KernelKind::kPingpong, KernelKind::kCublas};

TEST(KernelChoice, ThinClassesGoToTheMeasuredWinner) {
  // The GEMV kernels, even where the engine's default is cuBLAS.
  EXPECT_EQ(choose_kernel({1, 4096, 4096}, KernelKind::kCublas, kBoth), KernelKind::kPingpong);
  EXPECT_EQ(choose_kernel({4096, 1, 4096}, KernelKind::kCublas, kBoth), KernelKind::kPingpong);
  EXPECT_EQ(choose_kernel({1, 1, 4096}, KernelKind::kCublas, kBoth), KernelKind::kPingpong);
  EXPECT_EQ(choose_kernel({8192, 64, 8192}, KernelKind::kPingpong, kBoth), KernelKind::kCublas);
  // n <= 32: ping-pong's K-major tile, an odd K too (the engine pads A's rows to 16 bytes).
  EXPECT_EQ(choose_kernel({8192, 32, 8192}, KernelKind::kCublas, kBoth), KernelKind::kPingpong);
  EXPECT_EQ(choose_kernel({4096, 17, 4096}, KernelKind::kCublas, kBoth), KernelKind::kPingpong);
  EXPECT_EQ(choose_kernel({8192, 32, 8191}, KernelKind::kCublas, kBoth), KernelKind::kPingpong);
  EXPECT_EQ(choose_kernel({1024, 32, 8191}, KernelKind::kCublas, kBoth), KernelKind::kPingpong);
  EXPECT_EQ(choose_kernel({8192, 128, 8192}, KernelKind::kPingpong, kBoth), KernelKind::kCublas);
  EXPECT_EQ(choose_kernel({128, 8192, 8192}, KernelKind::kPingpong, kBoth), KernelKind::kCublas);
  // 33-64 columns, m and K up to 4096, aligned A: the K-major 64x64x32 tile.
  EXPECT_EQ(choose_kernel({4096, 64, 4096}, KernelKind::kCublas, kBoth), KernelKind::kPingpong);
  EXPECT_EQ(choose_kernel({3001, 60, 2500}, KernelKind::kCublas, kBoth), KernelKind::kPingpong);
  EXPECT_EQ(choose_kernel({3001, 60, 2501}, KernelKind::kCublas, kBoth), KernelKind::kPingpong);
  EXPECT_EQ(choose_kernel({8192, 64, 4096}, KernelKind::kPingpong, kBoth), KernelKind::kCublas);
  // The engine's 1024-row blocks of thin products: the K-major tiles; its 512-row blocks: cuBLAS.
  EXPECT_EQ(choose_kernel({1024, 64, 8192}, KernelKind::kCublas, kBoth), KernelKind::kPingpong);
  EXPECT_EQ(choose_kernel({1024, 32, 8192}, KernelKind::kCublas, kBoth), KernelKind::kPingpong);
  EXPECT_EQ(choose_kernel({1024, 128, 8192}, KernelKind::kPingpong, kBoth), KernelKind::kCublas);
  for (GemmShape s : {GemmShape{512, 32, 4096}, GemmShape{512, 64, 8192}, GemmShape{512, 128, 2048},
                      GemmShape{768, 64, 6144}, GemmShape{512, 60, 2501}})
    EXPECT_EQ(choose_kernel(s, KernelKind::kPingpong, kBoth), KernelKind::kCublas) << s.m << "x" << s.n << "x" << s.k;
  EXPECT_EQ(choose_kernel({32, 8192, 8192}, KernelKind::kCublas, kBoth), KernelKind::kPingpong);
  EXPECT_EQ(choose_kernel({64, 8192, 8192}, KernelKind::kCublas, kBoth), KernelKind::kPingpong);
}

TEST(KernelChoice, LargeAndLongKClassesGoToCublasWherePingpongTrails) {
  for (GemmShape s : {GemmShape{2048, 2048, 2048}, GemmShape{4096, 4096, 4096}, GemmShape{8192, 8192, 8192},
                      GemmShape{8192, 8192, 1024}, GemmShape{4095, 4095, 4095}, GemmShape{8191, 8193, 1000},
                      GemmShape{1024, 1024, 16384},
                      // The engine's pipeline blocks of large products (512 to 2048 rows).
                      GemmShape{512, 2048, 2048}, GemmShape{1024, 8192, 8192}, GemmShape{768, 6144, 6144},
                      GemmShape{512, 8192, 1024}})
    EXPECT_EQ(choose_kernel(s, KernelKind::kPingpong, kBoth), KernelKind::kCublas) << s.m << "x" << s.n << "x" << s.k;
}

TEST(KernelChoice, AMeasuredKernelWinsOnlyByMoreThanTheMargin) {
  const KernelKind c = KernelKind::kCublas, p = KernelKind::kPingpong;
  EXPECT_EQ(prefer_measured(c, 0.409, p, 0.383, 0.02), p);  // 6.4% faster
  EXPECT_EQ(prefer_measured(c, 1.000, p, 0.985, 0.02), c);  // 1.5%: a near-tie keeps the table's pick
  EXPECT_EQ(prefer_measured(c, 1.000, p, 1.100, 0.02), c);
  EXPECT_EQ(prefer_measured(p, 2.678, c, 2.434, 0.02), c);
  // No measurement (0 or negative): the table's pick.
  EXPECT_EQ(prefer_measured(c, 0.0, p, 0.5, 0.02), c);
  EXPECT_EQ(prefer_measured(c, 1.0, p, 0.0, 0.02), c);
}

TEST(KernelChoice, OtherShapesKeepTheDefault) {
  // No row: 1024 and smaller, short K (ping-pong 103-109% at 1024, 100.9% at 8192x64x1024).
  for (GemmShape s : {GemmShape{1024, 1024, 1024}, GemmShape{64, 64, 64}, GemmShape{200, 300, 100},
                      GemmShape{8192, 64, 1024}, GemmShape{1024, 1024, 4096}, GemmShape{2048, 2048, 512}}) {
    EXPECT_EQ(choose_kernel(s, KernelKind::kPingpong, kBoth), KernelKind::kPingpong) << s.m << "x" << s.n << "x" << s.k;
    EXPECT_EQ(find_kernel_choice(s), nullptr);
  }
}

TEST(KernelChoice, FallsBackWhenTheWinnerIsMissing) {
  EXPECT_EQ(choose_kernel({8192, 64, 8192}, KernelKind::kPingpong, {KernelKind::kPingpong}), KernelKind::kPingpong);
}

TEST(KernelChoice, EveryRowCitesItsMeasurement) {
  for (const KernelChoiceRow& row : kernel_choice_table()) {
    EXPECT_NE(std::string(row.shape_class), "");
    EXPECT_NE(std::string(row.evidence).find("%"), std::string::npos) << row.shape_class;
  }
}

}  // namespace
}  // namespace sgemm
