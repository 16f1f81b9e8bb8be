#include "server/planner/kernel_choice.h"

#include <gtest/gtest.h>

#include "common/fp32x3_slices.h"

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

// ---- select_kernel: the precision contract and the one choice ----

const std::vector<KernelKind> kAll = {KernelKind::kPingpong, KernelKind::kCublas, KernelKind::kTf32,
                                      KernelKind::kFp32x3};

KernelQuery query(GemmShape s, Precision p, std::optional<KernelKind> named = std::nullopt,
                  std::vector<KernelKind> available = kAll) {
  KernelQuery q;
  q.shape = s;
  q.precision = p;
  q.named = named;
  q.available = std::move(available);
  q.sm_count = 132;
  return q;
}

KernelKind selected(const KernelQuery& q) {
  auto s = select_kernel(q);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return s.ok() ? s->kind : KernelKind::kOpenblas;
}

TEST(SelectKernel, Fp32RunsFp32x3WhereItIsFasterAndKeepsTheContract) {
  // Large products; and few tiles with a long K, where fp32x3 cuts K into slices (also
  // where cuBLAS splits K: the slices keep its sums as short).
  for (GemmShape s : {GemmShape{2048, 2048, 2048}, GemmShape{8192, 8192, 8192}, GemmShape{2048, 8192, 8192},
                      GemmShape{1536, 1536, 1000}, GemmShape{4096, 16384, 16384}, GemmShape{512, 4096, 1024},
                      GemmShape{1536, 1536, 256}, GemmShape{4096, 4096, 65536}, GemmShape{2048, 2048, 8192},
                      GemmShape{1024, 1024, 16384}, GemmShape{512, 512, 8192}, GemmShape{1536, 1536, 65536},
                      GemmShape{256, 256, 131072}, GemmShape{256, 1024, 32768}, GemmShape{4096, 256, 16384},
                      GemmShape{1024, 1024, 1024}, GemmShape{512, 512, 4096}}) {
    auto sel = select_kernel(query(s, Precision::kFp32));
    ASSERT_TRUE(sel.ok());
    EXPECT_EQ(sel->kind, KernelKind::kFp32x3) << gemm_shape_text(s);
    EXPECT_NE(sel->reason.find("fp32 contract: fp32x3"), std::string::npos) << sel->reason;
  }
}

TEST(SelectKernel, Fp32x3CutsKWithinTheContractWhereCublasSplitsK) {
  const Fp32x3ContractRule rule = fp32x3_contract_rule();
  for (GemmShape s : {GemmShape{1536, 1536, 65536}, GemmShape{256, 256, 131072}, GemmShape{1024, 1024, 16384},
                      GemmShape{1536, 1536, 2080}}) {
    ASSERT_TRUE(sgemm_may_split_k(s)) << gemm_shape_text(s);
    EXPECT_LE(fp32x3_slices(s, 132).slice_blocks, rule.slice_k_blocks) << gemm_shape_text(s);
  }
  EXPECT_FALSE(sgemm_may_split_k({2048, 2048, 8192}));
  EXPECT_FALSE(sgemm_may_split_k({1536, 1536, 1024}));
  // Where cuBLAS's own sums get very short (k * tiles below min_cublas_sum_k per SM),
  // fp32x3's split error shows: the contract is not claimed there.
  for (GemmShape s : {GemmShape{512, 512, 2048}, GemmShape{256, 256, 4096}, GemmShape{384, 384, 1024}}) {
    EXPECT_FALSE(fp32x3_keeps_fp32_contract(s, 132)) << gemm_shape_text(s);
    EXPECT_NE(selected(query(s, Precision::kFp32)), KernelKind::kFp32x3) << gemm_shape_text(s);
  }
  EXPECT_TRUE(fp32x3_keeps_fp32_contract({512, 512, 4096}, 132));
}

TEST(SelectKernel, Fp32FallsBackToFfmaWhereFp32x3IsSlowerOrUnproven) {
  const Fp32x3ContractRule rule = fp32x3_contract_rule();
  ASSERT_GT(rule.min_k, 0);
  // A thin side, too little work, or K below the rule.
  for (GemmShape s : {GemmShape{128, 8192, 8192}, GemmShape{8192, 128, 8192}, GemmShape{1, 4096, 4096},
                      GemmShape{4096, 4096, rule.min_k - 1}, GemmShape{512, 512, 512}, GemmShape{256, 256, 256}}) {
    const KernelKind k = selected(query(s, Precision::kFp32));
    EXPECT_TRUE(k == KernelKind::kPingpong || k == KernelKind::kCublas) << gemm_shape_text(s);
    // The FFMA pick is the measured table's, as for fp32-ffma, on these shapes.
    EXPECT_EQ(k, selected(query(s, Precision::kFp32Ffma))) << gemm_shape_text(s);
  }
  // Where cuBLAS splits K and fp32x3 is not offered, only cuBLAS SGEMM is held to its
  // own error: fp32 runs it even where the FFMA table would run ping-pong.
  for (GemmShape s : {GemmShape{1536, 1536, 4096}, GemmShape{1536, 1536, 65536}, GemmShape{2047, 2048, 2049}}) {
    EXPECT_TRUE(fp32_needs_cublas(s)) << gemm_shape_text(s);
    EXPECT_EQ(selected(query(s, Precision::kFp32, std::nullopt, {KernelKind::kPingpong, KernelKind::kCublas})),
              KernelKind::kCublas)
        << gemm_shape_text(s);
  }
  EXPECT_EQ(selected(query({1536, 1536, 65536}, Precision::kFp32Ffma)), KernelKind::kPingpong);
  // The contract is judged on the request's whole product: a launch of a product whose
  // K is below the rule stays FFMA.
  KernelQuery block = query({4096, 4096, 4096}, Precision::kFp32);
  block.product = {4096, 4096, rule.min_k - 1};
  EXPECT_NE(selected(block), KernelKind::kFp32x3);
  // Without fp32x3 (a GPU that is not sm_90), fp32 is FFMA everywhere.
  EXPECT_EQ(
      selected(query({8192, 8192, 8192}, Precision::kFp32, std::nullopt, {KernelKind::kPingpong, KernelKind::kCublas})),
      KernelKind::kCublas);
}

TEST(SelectKernel, Fp32FfmaNeverRunsTensorCores) {
  for (GemmShape s : {GemmShape{8192, 8192, 8192}, GemmShape{2048, 2048, 2048}, GemmShape{1, 8192, 8192},
                      GemmShape{8192, 32, 8192}, GemmShape{777, 1025, 3001}})
    EXPECT_EQ(kernel_arithmetic(selected(query(s, Precision::kFp32Ffma))), ArithmeticClass::kFfma)
        << gemm_shape_text(s);
}

TEST(SelectKernel, NamedKernelsAndOwnKernelPrecisions) {
  const GemmShape big{8192, 8192, 8192};
  EXPECT_EQ(selected(query(big, Precision::kFp32, KernelKind::kPingpong)), KernelKind::kPingpong);
  EXPECT_EQ(selected(query(big, Precision::kFp32Ffma, KernelKind::kCublas)), KernelKind::kCublas);
  EXPECT_EQ(selected(query(big, Precision::kTf32)), KernelKind::kTf32);
  EXPECT_EQ(selected(query({1, 1, 1}, Precision::kFp32x3)), KernelKind::kFp32x3);
  // A tensor-core kernel is chosen by precision, never by name; tf32 with an FFMA kernel named is refused.
  EXPECT_EQ(select_kernel(query(big, Precision::kFp32, KernelKind::kFp32x3)).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(select_kernel(query(big, Precision::kTf32, KernelKind::kPingpong)).status().code(),
            StatusCode::kInvalidArgument);
  // What the devices lack: FAILED_PRECONDITION.
  const std::vector<KernelKind> ffma_only = {KernelKind::kPingpong, KernelKind::kCublas};
  EXPECT_EQ(select_kernel(query(big, Precision::kFp32x3, std::nullopt, ffma_only)).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(select_kernel(query(big, Precision::kFp32, KernelKind::kCublas, {KernelKind::kPingpong})).status().code(),
            StatusCode::kFailedPrecondition);
}

TEST(SelectKernel, ContractsListTheKernelsBehindThem) {
  EXPECT_EQ(kernels_serving(Precision::kFp32, kAll),
            (std::vector<KernelKind>{KernelKind::kFp32x3, KernelKind::kPingpong, KernelKind::kCublas}));
  EXPECT_EQ(kernels_serving(Precision::kFp32Ffma, kAll),
            (std::vector<KernelKind>{KernelKind::kPingpong, KernelKind::kCublas}));
  EXPECT_EQ(kernels_serving(Precision::kTf32, kAll), (std::vector<KernelKind>{KernelKind::kTf32}));
  EXPECT_TRUE(kernels_serving(Precision::kFp32x3, {KernelKind::kPingpong}).empty());
  for (Precision p : all_precisions()) {
    EXPECT_EQ(parse_precision(precision_name(p)), p);
    EXPECT_FALSE(precision_contract(p).empty());
  }
  EXPECT_EQ(parse_precision("fp32-ffma"), Precision::kFp32Ffma);
}

// select_kernel_row: select_kernel's family, then the registry's concrete row in it.
TEST(SelectKernelRow, ReturnsTheConcreteRegistryRow) {
  const auto row = [](GemmShape s, Precision p, KernelLayout layout = {}) {
    KernelQuery q = query(s, p);
    q.layout = layout;
    StatusOr<KernelRowSelection> sel = select_kernel_row(q);
    EXPECT_TRUE(sel.ok()) << sel.status().to_string();
    return sel.ok() ? sel->pick.name() : std::string();
  };
  // fp32 on a large product: fp32x3, A split in the kernel where TMA reads A in place...
  EXPECT_EQ(row({4096, 4096, 4096}, Precision::kFp32), "fp32x3_wgmma_coop_128x128_s4_promote1_splitA_group16");
  // ... else both operands through the split pass; K cut where few tiles meet a long K.
  EXPECT_EQ(row({4096, 4096, 4096}, Precision::kFp32, {.a_16byte_aligned = false}),
            "fp32x3_wgmma_coop_128x128_s3_promote1");
  EXPECT_EQ(row({4096, 4096, 4095}, Precision::kFp32, {.lda = 4095}), "fp32x3_wgmma_coop_128x128_s3_promote1");
  EXPECT_EQ(row({1024, 1024, 16384}, Precision::kFp32), "fp32x3_wgmma_coop_128x128_s4_promote1_splitA_group16_splitk8");
  // FFMA: the measured table's family, then the SIMT family's tile.
  EXPECT_EQ(row({4096, 4096, 4096}, Precision::kFp32Ffma), "cublas_sgemm");
  EXPECT_EQ(row({8191, 2047, 4096}, Precision::kFp32Ffma), "simt_tma_128x256x32_w64x64_t8x16_s4");
  EXPECT_EQ(row({1, 4096, 4096}, Precision::kFp32), "gemv");
  EXPECT_EQ(row({4096, 4096, 4096}, Precision::kTf32), "cublas_tf32");
}

TEST(SelectKernelRow, KeepsSelectKernelsReasonAndErrors) {
  KernelQuery q = query({4096, 4096, 4096}, Precision::kFp32);
  StatusOr<KernelRowSelection> sel = select_kernel_row(q);
  ASSERT_TRUE(sel.ok());
  EXPECT_EQ(sel->kind(), KernelKind::kFp32x3);
  EXPECT_EQ(sel->reason, select_kernel(q)->reason);
  q.precision = Precision::kTf32;
  q.named = KernelKind::kPingpong;
  EXPECT_EQ(select_kernel_row(q).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sgemm
