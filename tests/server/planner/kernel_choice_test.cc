#include "server/planner/kernel_choice.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "common/fp32x3_slices.h"

namespace sgemm {
namespace {

const std::vector<KernelKind> kBoth = {KernelKind::kPingpong, KernelKind::kCublas};

// A speed table as sgemm-bench writes it: one made-up GPU whose rates put
// ping-pong ahead on the thin classes and cuBLAS ahead on the large ones (the
// pattern measured on the H100), and a second GPU of another SM count with the
// opposite pattern.
std::string test_csv() {
  std::string csv = "# made up for the tests\n" + std::string(KernelSpeeds::kHeader) + "\n";
  for (const KernelShapeClass& c : kernel_shape_classes()) {
    const std::string id = c.id;
    const bool pingpong_wins =
        id == "gemv" || id == "few_rows" || id == "narrow32" || id == "narrow64_mid" || id == "other";
    for (const GemmShape& p : c.probes) {
      const std::string dims = std::to_string(p.m) + "," + std::to_string(p.n) + "," + std::to_string(p.k);
      csv += "Test GPU,132,abc1234," + id + "," + dims + ",pingpong," + (pingpong_wins ? "50.0" : "40.0") + "\n";
      csv += "Test GPU,132,abc1234," + id + "," + dims + ",cublas,45.0\n";
      csv += "Small GPU,20,abc1234," + id + "," + dims + ",cublas," + (pingpong_wins ? "11.0" : "9.0") + "\n";
      csv += "Small GPU,20,abc1234," + id + "," + dims + ",pingpong,10.0\n";
    }
  }
  return csv;
}

const KernelSpeeds& test_speeds() {
  static const KernelSpeeds speeds = *KernelSpeeds::parse(test_csv());
  return speeds;
}

KernelKind chosen(GemmShape s, KernelKind fallback, const std::vector<KernelKind>& available,
                  std::string_view device = "Test GPU") {
  return choose_kernel(s, fallback, available, {device, 132, &test_speeds()}).kind;
}

TEST(KernelShapeClasses, EveryProbeFallsInItsOwnClassAndTheLastClassTakesEveryShape) {
  std::set<std::string> ids;
  for (const KernelShapeClass& c : kernel_shape_classes()) {
    EXPECT_TRUE(ids.insert(c.id).second) << c.id;
    EXPECT_FALSE(c.probes.empty()) << c.id;
    for (const GemmShape& p : c.probes) EXPECT_STREQ(kernel_shape_class(p).id, c.id) << gemm_shape_text(p);
  }
  EXPECT_STREQ(kernel_shape_class({7, 9, 11}).id, "other");
  EXPECT_STREQ(kernel_shape_class({1, 4096, 4096}).id, "gemv");
  EXPECT_STREQ(kernel_shape_class({8192, 64, 8192}).id, "narrow64");
  EXPECT_STREQ(kernel_shape_class({8192, 72, 8192}).id, "narrow128");
}

TEST(KernelChoice, EachClassGoesToTheKernelMeasuredFastestOnIt) {
  // Thin classes: ping-pong, even where the engine's default is cuBLAS.
  for (GemmShape s : {GemmShape{1, 4096, 4096}, GemmShape{4096, 1, 4096}, GemmShape{8192, 32, 8191},
                      GemmShape{4096, 17, 4096}, GemmShape{3001, 60, 2501}, GemmShape{32, 8192, 8192}})
    EXPECT_EQ(chosen(s, KernelKind::kCublas, kBoth), KernelKind::kPingpong) << gemm_shape_text(s);
  // Large, long-K and 65-128-wide classes: cuBLAS, where the default is ping-pong.
  for (GemmShape s : {GemmShape{4096, 4096, 4096}, GemmShape{8191, 8193, 1000}, GemmShape{1024, 1024, 16384},
                      GemmShape{8192, 128, 8192}, GemmShape{128, 8192, 8192}, GemmShape{512, 60, 2501}})
    EXPECT_EQ(chosen(s, KernelKind::kPingpong, kBoth), KernelKind::kCublas) << gemm_shape_text(s);
  // Unprobed shapes of a class follow the class.
  EXPECT_EQ(chosen({777, 3333, 1111}, KernelKind::kPingpong, kBoth), KernelKind::kCublas);
  EXPECT_EQ(chosen({100, 200, 300}, KernelKind::kCublas, kBoth), KernelKind::kPingpong);
}

TEST(KernelChoice, TheReasonNamesTheClassTheMeasurementAndTheDevice) {
  const KernelChoice c =
      choose_kernel({4100, 4100, 4100}, KernelKind::kPingpong, kBoth, {"Test GPU", 132, &test_speeds()});
  EXPECT_EQ(c.kind, KernelKind::kCublas);
  for (const char* part : {"kernel cublas for 4100x4100x4100 (class large: m >= 512, n >= 2048 with k >= 1000",
                           "at the nearest measured shape 4096x4096x4096, 45.0 TFLOP/s against pingpong's 40.0",
                           "on Test GPU", "kernel_speeds.csv"})
    EXPECT_NE(c.reason.find(part), std::string::npos) << c.reason;
  // The data agreeing with the default adds nothing to the plan's reason.
  EXPECT_EQ(choose_kernel({1, 4096, 4096}, KernelKind::kPingpong, kBoth, {"Test GPU", 132, &test_speeds()}).reason, "");
}

TEST(KernelChoice, TheGpuIsFoundByNameElseByItsSmCount) {
  // By name, whatever the SM count says.
  EXPECT_EQ(choose_kernel({4096, 4096, 4096}, KernelKind::kCublas, kBoth, {"Small GPU", 132, &test_speeds()}).kind,
            KernelKind::kPingpong);
  // An unmeasured GPU reads the rows of the measured one nearest in SM count.
  EXPECT_EQ(test_speeds().device_for("Same Chip, Other Memory", 132), "Test GPU");
  EXPECT_EQ(choose_kernel({4096, 4096, 4096}, KernelKind::kPingpong, kBoth, {"Same Chip", 132, &test_speeds()}).kind,
            KernelKind::kCublas);
  EXPECT_EQ(test_speeds().device_for("Other GPU", 84), "Test GPU");
  EXPECT_EQ(test_speeds().device_for("Tiny GPU", 24), "Small GPU");
  EXPECT_EQ(choose_kernel({4096, 4096, 4096}, KernelKind::kCublas, kBoth, {"Tiny GPU", 24, &test_speeds()}).kind,
            KernelKind::kPingpong);
  // No rows at all: the configured default.
  const KernelSpeeds none = *KernelSpeeds::parse(KernelSpeeds::kHeader);
  EXPECT_EQ(none.device_for("Other GPU", 84), "");
  EXPECT_EQ(choose_kernel({4096, 4096, 4096}, KernelKind::kPingpong, kBoth, {"Other GPU", 84, &none}).kind,
            KernelKind::kPingpong);
}

TEST(KernelChoice, NoKernelIsPreferredToTheDefaultWithoutAMeasurement) {
  // Only cuBLAS measured on a class: the default ping-pong stays.
  const KernelSpeeds one =
      *KernelSpeeds::parse(std::string(KernelSpeeds::kHeader) + "\nG,132,c,large,4096,4096,4096,cublas,50\n");
  EXPECT_EQ(choose_kernel({4096, 4096, 4096}, KernelKind::kPingpong, kBoth, {"G", 132, &one}).kind,
            KernelKind::kPingpong);
  // ... unless the default is not available: then the measured one.
  EXPECT_EQ(choose_kernel({4096, 4096, 4096}, KernelKind::kPingpong, {KernelKind::kCublas}, {"G", 132, &one}).kind,
            KernelKind::kCublas);
  // A class with no rows: the default.
  EXPECT_EQ(choose_kernel({1, 4096, 4096}, KernelKind::kCublas, kBoth, {"G", 132, &one}).kind, KernelKind::kCublas);
  // The winner missing from the devices: the best of what they have.
  EXPECT_EQ(chosen({8192, 64, 8192}, KernelKind::kPingpong, {KernelKind::kPingpong}), KernelKind::kPingpong);
}

TEST(KernelSpeeds, ARateIsTheGeometricMeanOfItsRunsAndTheNearestShapeIsSoughtInTheClass) {
  const KernelSpeeds t = *KernelSpeeds::parse(std::string(KernelSpeeds::kHeader) +
                                              "\nG,132,c,large,4096,4096,4096,cublas,10\n"
                                              "G,132,d,large,4096,4096,4096,cublas,40\n"
                                              "G,132,c,large,8192,8192,1024,cublas,30\n"
                                              "G,132,c,other,64,64,64,cublas,1\n");
  EXPECT_NEAR(t.rate("G", {4096, 4096, 4096}, KernelKind::kCublas), 20.0, 1e-9);
  EXPECT_EQ(t.rate("G", {4096, 4096, 4096}, KernelKind::kPingpong), 0.0);
  EXPECT_EQ(t.rate("H", {4096, 4096, 4096}, KernelKind::kCublas), 0.0);
  // Distances in log2 over m, n and k: 6000x6000x3000 is 1.1 from 4096^3 and 2.0 from 8192x8192x1024.
  EXPECT_EQ(t.nearest("G", "large", {6000, 6000, 3000}), (GemmShape{4096, 4096, 4096}));
  EXPECT_EQ(t.nearest("G", "large", {8192, 8192, 2000}), (GemmShape{8192, 8192, 1024}));
  // Never a shape of another class, nor of another device.
  EXPECT_EQ(t.nearest("G", "other", {4096, 4096, 4096}), (GemmShape{64, 64, 64}));
  EXPECT_EQ(t.nearest("G", "narrow64", {8192, 64, 8192}), std::nullopt);
  EXPECT_EQ(t.nearest("H", "large", {4096, 4096, 4096}), std::nullopt);
}

TEST(KernelChoice, TheNearestMeasuredShapeOfTheClassDecides) {
  // In one class, cuBLAS measured faster on the wide shape and ping-pong on the short-K one.
  const KernelSpeeds t = *KernelSpeeds::parse(std::string(KernelSpeeds::kHeader) +
                                              "\nG,132,c,large,8192,8192,8192,cublas,50\n"
                                              "G,132,c,large,8192,8192,8192,pingpong,48\n"
                                              "G,132,c,large,8192,8192,1024,cublas,40\n"
                                              "G,132,c,large,8192,8192,1024,pingpong,44\n");
  const MeasuredOn on{"G", 132, &t};
  EXPECT_EQ(choose_kernel({6000, 7000, 9000}, KernelKind::kPingpong, kBoth, on).kind, KernelKind::kCublas);
  EXPECT_EQ(choose_kernel({6000, 7000, 1200}, KernelKind::kCublas, kBoth, on).kind, KernelKind::kPingpong);
  const KernelChoice c = choose_kernel({6000, 7000, 1200}, KernelKind::kCublas, kBoth, on);
  EXPECT_NE(c.reason.find("at the nearest measured shape 8192x8192x1024, 44.0 TFLOP/s against cublas's 40.0"),
            std::string::npos)
      << c.reason;
}

TEST(KernelSpeeds, ABadFileIsRefusedNamingTheLineAndTheField) {
  const std::string h = std::string(KernelSpeeds::kHeader) + "\n";
  const auto message = [](const std::string& csv) {
    StatusOr<KernelSpeeds> t = KernelSpeeds::parse(csv);
    EXPECT_FALSE(t.ok()) << csv;
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
    return t.ok() ? std::string() : t.status().message();
  };
  EXPECT_NE(message("device,m\n").find("line 1: the header must be"), std::string::npos);
  EXPECT_NE(message("# only a comment\n").find("no header line"), std::string::npos);
  EXPECT_NE(message(h + "G,132,c,large,4096,4096\n").find("line 2: 9 fields expected, got 6"), std::string::npos);
  EXPECT_NE(message(h + "G,0,c,large,1,1,1,cublas,1\n").find("sm_count '0'"), std::string::npos);
  EXPECT_NE(message(h + "G,132,c,large,1,-5,1,cublas,1\n").find("n '-5' is not a positive integer"), std::string::npos);
  EXPECT_NE(message(h + "G,132,c,large,1,1,1,magma,1\n").find("kernel 'magma'"), std::string::npos);
  EXPECT_NE(message(h + "G,132,c,large,1,1,1,cublas,fast\n").find("tflops 'fast'"), std::string::npos);
  EXPECT_NE(message(h + "\n# c\nG,132,c,,1,1,1,cublas,1\n").find("line 4: shape_class is empty"), std::string::npos);
  // Windows line ends and comments are fine; a written row reads back.
  KernelSpeed row{"NVIDIA H200", 132, "eee51dd", "large", {4096, 4096, 4096}, KernelKind::kCublas, 51.25};
  StatusOr<KernelSpeeds> back = KernelSpeeds::parse("# x\r\n" + h + KernelSpeeds::csv_row(row) + "\r\n");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  ASSERT_EQ(back->rows().size(), 1u);
  EXPECT_EQ(back->rows()[0].device, "NVIDIA H200");
  EXPECT_EQ(back->rows()[0].shape, (GemmShape{4096, 4096, 4096}));
  EXPECT_EQ(back->rows()[0].kernel, KernelKind::kCublas);
  EXPECT_DOUBLE_EQ(back->rows()[0].tflops, 51.25);
}

TEST(KernelSpeeds, TheBuiltInTableParsesAndMeasuresEveryProbeOnEachOfItsGpus) {
  StatusOr<KernelSpeeds> t = KernelSpeeds::parse(KernelSpeeds::built_in_csv());
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->rows().size(), KernelSpeeds::built_in().rows().size());
  std::set<std::string> devices;
  for (const KernelSpeed& r : t->rows()) {
    devices.insert(r.device);
    // Each row's class is the one its shape falls in, and the kernel one that may serve fp32.
    EXPECT_STREQ(kernel_shape_class(r.shape).id, r.shape_class.c_str()) << KernelSpeeds::csv_row(r);
    EXPECT_TRUE(kernel_arithmetic(r.kernel) == ArithmeticClass::kFfma ||
                kernel_arithmetic(r.kernel) == ArithmeticClass::kFp32x3)
        << KernelSpeeds::csv_row(r);
  }
  EXPECT_FALSE(devices.empty()) << "the built-in table has no rows";
  // Every probe of every class measured with every fp32 kernel on each GPU.
  for (const std::string& d : devices)
    for (const KernelShapeClass& c : kernel_shape_classes())
      for (const GemmShape& p : c.probes)
        for (KernelKind k : {KernelKind::kPingpong, KernelKind::kCublas, KernelKind::kFp32x3})
          EXPECT_GT(t->rate(d, p, k), 0.0) << d << " " << gemm_shape_text(p) << " " << kernel_kind_name(k);
}

TEST(KernelSpeeds, AnOperatorsFileIsAddedToTheBuiltInRows) {
  const std::string more =
      std::string(KernelSpeeds::kHeader) +
      "\nHost GPU,84,c,large,4096,4096,4096,cublas,30\nHost GPU,84,c,large,4096,4096,4096,pingpong,31\n";
  StatusOr<KernelSpeeds> t = KernelSpeeds::built_in_and(more);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->rows().size(), KernelSpeeds::built_in().rows().size() + 2);
  // The host's GPU decides from its own rows, by name.
  EXPECT_EQ(t->device_for("Host GPU", 132), "Host GPU");
  EXPECT_EQ(choose_kernel({4096, 4096, 4096}, KernelKind::kCublas, kBoth, {"Host GPU", 84, &*t}).kind,
            KernelKind::kPingpong);
  EXPECT_EQ(KernelSpeeds::built_in_and("bad\n").status().code(), StatusCode::kInvalidArgument);
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
  q.device = "Test GPU";
  q.speeds = &test_speeds();
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

// With fp32x3 measured, the measurement decides between it and the FFMA kernels
// wherever fp32x3 keeps the contract, and only there.
TEST(SelectKernel, Fp32RunsTheKernelMeasuredFastestAmongThoseThatKeepTheContract) {
  // Made up: fp32x3 measured slowest on the large class, fastest on "few_rows" (m <= 64,
  // where the tile rule would never run it) and on "other".
  std::string csv = std::string(KernelSpeeds::kHeader) + "\n";
  for (const KernelShapeClass& c : kernel_shape_classes())
    for (const GemmShape& p : c.probes) {
      const std::string id = c.id;
      const double fp32x3 = id == "large" ? 20.0 : id == "few_rows" || id == "other" ? 90.0 : 0.0;
      csv += KernelSpeeds::csv_row({"Test GPU", 132, "abc1234", id, p, KernelKind::kPingpong, 40.0}) + "\n";
      csv += KernelSpeeds::csv_row({"Test GPU", 132, "abc1234", id, p, KernelKind::kCublas, 45.0}) + "\n";
      if (fp32x3 > 0)
        csv += KernelSpeeds::csv_row({"Test GPU", 132, "abc1234", id, p, KernelKind::kFp32x3, fp32x3}) + "\n";
    }
  const StatusOr<KernelSpeeds> speeds = KernelSpeeds::parse(csv);
  ASSERT_TRUE(speeds.ok()) << speeds.status().to_string();
  const auto fp32 = [&](GemmShape s) {
    KernelQuery q = query(s, Precision::kFp32);
    q.speeds = &*speeds;
    return select_kernel(q);
  };
  // Large: the tile rule says fp32x3, the measurement cuBLAS.
  for (GemmShape s : {GemmShape{8192, 8192, 8192}, GemmShape{4096, 4096, 4096}}) {
    ASSERT_TRUE(fp32x3_outruns_ffma(s, 132));
    auto sel = fp32(s);
    ASSERT_TRUE(sel.ok());
    EXPECT_EQ(sel->kind, KernelKind::kCublas) << gemm_shape_text(s);
    EXPECT_NE(sel->reason.find("fp32 contract: FFMA for " + gemm_shape_text(s) + " (fp32x3 is not faster there)"),
              std::string::npos)
        << sel->reason;
  }
  // Few rows: measured fastest and keeping the contract, though the tile rule says no.
  const GemmShape few{32, 8192, 8192};
  ASSERT_FALSE(fp32x3_outruns_ffma(few, 132));
  ASSERT_TRUE(fp32x3_keeps_fp32_contract(few, 132));
  auto sel = fp32(few);
  ASSERT_TRUE(sel.ok());
  EXPECT_EQ(sel->kind, KernelKind::kFp32x3);
  EXPECT_NE(sel->reason.find("fp32 contract: fp32x3 for 32x8192x8192 (faster than FFMA there"), std::string::npos)
      << sel->reason;
  EXPECT_NE(sel->reason.find("90.0 TFLOP/s"), std::string::npos) << sel->reason;
  // Measured fastest but outside the contract: never.
  for (GemmShape s : {GemmShape{100, 200, 100}, GemmShape{512, 512, 2048}}) {
    ASSERT_FALSE(fp32x3_keeps_fp32_contract(s, 132)) << gemm_shape_text(s);
    auto o = fp32(s);
    ASSERT_TRUE(o.ok());
    EXPECT_NE(o->kind, KernelKind::kFp32x3) << gemm_shape_text(s);
    EXPECT_NE(o->reason.find("fp32x3's error not proven"), std::string::npos) << o->reason;
  }
  // A class with no fp32x3 rate: the tile rule stands in, and the reason says so.
  const GemmShape long_k{1024, 1024, 16384};
  ASSERT_STREQ(kernel_shape_class(long_k).id, "few_tiles_long_k");
  ASSERT_TRUE(fp32x3_outruns_ffma(long_k, 132) && fp32x3_keeps_fp32_contract(long_k, 132));
  auto by_rule = fp32(long_k);
  ASSERT_TRUE(by_rule.ok());
  EXPECT_EQ(by_rule->kind, KernelKind::kFp32x3);
  EXPECT_NE(by_rule->reason.find("no rate measured for it here"), std::string::npos) << by_rule->reason;
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
