#include "server/planner/kernel_choice.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <string>
#include <utility>

#include "common/fp32x3_slices.h"

namespace sgemm {
namespace {

// fp32x3's measured region of the fp32 contract (fp32x3_contract_rule).
constexpr int64_t kFp32x3ContractMinK = 256;
constexpr int64_t kFp32x3ContractMinCublasSumK = 400;

// Thresholds of the classes' edges: where ping-pong's tile families change (its
// GEMV rows, the 32- and 64-row tiles with split-K, the K-major thin tiles) and
// where the earlier H100 measurements saw the faster kernel change
// (docs/kernels.md, "Kernel choice").
bool gemv(const GemmShape& s) { return one_row_or_column(s); }
bool few_rows(const GemmShape& s) { return s.m <= 64 && s.n >= 1024 && s.k >= 2048; }
// The engine pads A's rows to 16 bytes (lda = pad4(k)), so an odd K takes the
// K-major thin tiles as well.
bool narrow32(const GemmShape& s) { return s.n <= 32 && s.m >= 1024 && s.k >= 2048; }
bool narrow64_mid(const GemmShape& s) {
  return s.n > 32 && s.n <= 64 && s.m >= 1024 && s.m <= 4096 && s.k >= 2048 && s.k <= 8192;
}
bool narrow64(const GemmShape& s) { return s.n <= 64 && s.m >= 512 && s.k >= 2048; }
// Wider than FFMA's 64-column tiles, one column of fp32x3's 128x128 tiles: where
// fp32x3 overtakes FFMA on tall products (about n = 72 to 96 on one H200).
bool narrow128(const GemmShape& s) { return s.n > 64 && s.n <= 128 && s.m >= 512 && s.k >= 2048; }
bool short_rows(const GemmShape& s) { return s.m > 64 && s.m <= 128 && s.n >= 1024 && s.k >= 2048; }
bool large(const GemmShape& s) { return s.m >= 512 && s.n >= 2048 && s.k >= 1000; }
bool few_tiles_long_k(const GemmShape& s) { return s.m * s.n <= int64_t{2048} * 1024 && s.k >= 8192; }
bool any(const GemmShape&) { return true; }

// The probes: round and odd shapes spread over each class's sizes, the engine's
// pipeline blocks of larger products among them (512 to 2048 rows).
constexpr GemmShape kGemvProbes[] = {{1, 4096, 4096}, {1, 8192, 8192}, {4096, 1, 4096}, {8192, 1, 8192},
                                     {1, 3001, 2999}, {1, 1024, 1024}, {2048, 1, 2048}, {1, 2048, 16384}};
constexpr GemmShape kFewRowsProbes[] = {{32, 8192, 8192},  {64, 8192, 8192}, {64, 4096, 4096}, {16, 2048, 4096},
                                        {48, 3001, 5003},  {8, 8192, 8192},  {64, 1024, 2048}, {32, 2048, 16384},
                                        {64, 16384, 2048}, {48, 1536, 3072}, {60, 1500, 2500}, {20, 5000, 6000}};
constexpr GemmShape kNarrow32Probes[] = {{8192, 32, 8192}, {4096, 32, 4096},  {1024, 32, 8192},  {1024, 32, 8191},
                                         {4096, 17, 4096}, {2048, 16, 16384}, {16384, 32, 2048}, {1536, 8, 3072},
                                         {4096, 24, 8192}, {2000, 24, 5000},  {6000, 8, 3000},   {8192, 8, 8192},
                                         {8192, 16, 8192}, {4096, 8, 16384}};
constexpr GemmShape kNarrow64MidProbes[] = {{4096, 64, 4096}, {1024, 64, 4096}, {1024, 64, 8192},
                                            {3001, 60, 2500}, {2048, 48, 2048}, {4096, 40, 8192},
                                            {1536, 64, 6144}, {2048, 36, 4096}, {2000, 50, 3000}};
constexpr GemmShape kNarrow64Probes[] = {{8192, 64, 8192},  {512, 64, 8192}, {512, 32, 4096},   {8192, 64, 4096},
                                         {8192, 48, 16384}, {512, 60, 2501}, {12288, 56, 4096}, {2000, 64, 16384}};
constexpr GemmShape kNarrow128Probes[] = {{8192, 128, 8192}, {1024, 128, 8192}, {768, 100, 6144},   {16384, 96, 4096},
                                          {2048, 128, 2048}, {600, 120, 12288}, {4096, 100, 16384}, {1024, 80, 3072},
                                          {600, 120, 9000},  {6000, 96, 5000},  {12288, 72, 4096},  {3000, 72, 8192},
                                          {2048, 80, 12288}};
constexpr GemmShape kShortRowsProbes[] = {{128, 8192, 8192}, {96, 4096, 4096},  {128, 2048, 2048},
                                          {100, 5000, 3001}, {72, 16384, 4096}, {128, 1024, 16384},
                                          {112, 2048, 6144}, {80, 6000, 3000},  {120, 3000, 7000}};
constexpr GemmShape kLargeProbes[] = {{2048, 2048, 2048},  {4096, 4096, 4096},   {8192, 8192, 8192}, {8192, 8192, 1024},
                                      {4095, 4095, 4095},  {512, 4096, 4096},    {1024, 8192, 8192}, {768, 3584, 3584},
                                      {512, 2048, 2048},   {3072, 3072, 3072},   {6144, 2560, 1536}, {1024, 3072, 5120},
                                      {2560, 6144, 12288}, {16384, 16384, 1024}, {640, 2048, 1024},  {3000, 3000, 3000},
                                      {6000, 2500, 1500},  {1000, 3000, 5000}};
constexpr GemmShape kFewTilesLongKProbes[] = {{1024, 1024, 16384}, {512, 512, 16384},  {2048, 1024, 8192},
                                              {256, 256, 65536},   {768, 1024, 32768}, {384, 384, 131072},
                                              {1536, 1280, 12288}, {128, 256, 16384},  {700, 900, 20000},
                                              {1500, 1300, 10000}, {256, 256, 16384},  {256, 512, 16384}};
constexpr GemmShape kOtherProbes[] = {
    {1024, 1024, 1024}, {512, 512, 512},   {256, 256, 256},   {64, 64, 64},       {200, 300, 100},   {8192, 64, 1024},
    {1024, 1024, 4096}, {2048, 2048, 512}, {300, 2000, 800},  {1024, 1024, 2048}, {3000, 200, 1500}, {1536, 1536, 1024},
    {2048, 1024, 1024}, {128, 2048, 1024}, {4096, 256, 512},  {768, 768, 2048},   {32, 32, 32},      {16, 512, 1024},
    {512, 16, 1024},    {1500, 1500, 900}, {700, 700, 700},   {128, 128, 128},    {4096, 128, 1024}, {2048, 96, 1500},
    {8192, 96, 512},    {3000, 72, 1200},  {192, 3072, 1024}, {160, 1024, 1800},  {32, 32, 4096},    {64, 64, 2048},
    {16, 128, 3000},    {100, 100, 1500},  {128, 128, 512},   {160, 160, 512},    {192, 192, 768},   {128, 192, 1024},
    {160, 128, 320}};

constexpr KernelShapeClass kClasses[] = {
    {"gemv", "m = 1 or n = 1", gemv, kGemvProbes},
    {"few_rows", "m <= 64 with n >= 1024, k >= 2048", few_rows, kFewRowsProbes},
    {"narrow32", "n <= 32 with m >= 1024, k >= 2048", narrow32, kNarrow32Probes},
    {"narrow64_mid", "32 < n <= 64 with 1024 <= m <= 4096, 2048 <= k <= 8192", narrow64_mid, kNarrow64MidProbes},
    {"narrow64", "n <= 64 with m >= 512, k >= 2048", narrow64, kNarrow64Probes},
    {"narrow128", "64 < n <= 128 with m >= 512, k >= 2048", narrow128, kNarrow128Probes},
    {"short_rows", "64 < m <= 128 with n >= 1024, k >= 2048", short_rows, kShortRowsProbes},
    {"large", "m >= 512, n >= 2048 with k >= 1000", large, kLargeProbes},
    {"few_tiles_long_k", "m * n <= 2048 * 1024 with k >= 8192", few_tiles_long_k, kFewTilesLongKProbes},
    {"other", "every other shape", any, kOtherProbes},
};

std::string rate_text(double tflops) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", tflops);
  return buf;
}

}  // namespace

std::span<const KernelShapeClass> kernel_shape_classes() { return kClasses; }

const KernelShapeClass& kernel_shape_class(const GemmShape& shape) {
  for (const KernelShapeClass& c : kClasses)
    if (c.matches(shape)) return c;
  return kClasses[std::size(kClasses) - 1];
}

KernelChoice choose_kernel(const GemmShape& shape, KernelKind fallback, const std::vector<KernelKind>& available,
                           const MeasuredOn& on) {
  KernelChoice out;
  out.kind = fallback;
  const KernelSpeeds& speeds = on.speeds ? *on.speeds : KernelSpeeds::built_in();
  const std::string device = speeds.device_for(on.device, on.sm_count);
  const KernelShapeClass& cls = kernel_shape_class(shape);
  const MeasuredShape* near = device.empty() ? nullptr : speeds.nearest_measured(device, cls.id, shape);
  for (KernelKind k : available)
    if (!near || near->rate(k) <= 0) out.unmeasured.push_back(k);
  if (!near) return out;
  const bool fallback_available = std::find(available.begin(), available.end(), fallback) != available.end();
  const double fallback_rate = near->rate(fallback);
  if (fallback_available && fallback_rate <= 0) return out;
  KernelKind best = fallback;
  double best_rate = fallback_available ? fallback_rate : 0.0;
  for (KernelKind k : available) {
    const double r = near->rate(k);
    if (r > best_rate) {
      best = k;
      best_rate = r;
    }
  }
  if (best_rate <= 0) return out;
  out.kind = best;
  if (best != fallback) {
    out.reason = "; kernel " + std::string(kernel_kind_name(best)) + " for " + gemm_shape_text(shape) + " (class " +
                 cls.id + ": " + cls.description + "; at the nearest measured shape " + gemm_shape_text(near->shape) +
                 ", " + rate_text(best_rate) + " TFLOP/s";
    if (fallback_rate > 0)
      out.reason += " against " + std::string(kernel_kind_name(fallback)) + "'s " + rate_text(fallback_rate);
    out.reason += ", on " + device + ", server/planner/kernel_speeds.csv)";
  }
  return out;
}

KernelKind prefer_measured(KernelKind table_pick, double table_ms, KernelKind other, double other_ms, double margin) {
  if (other_ms > 0 && table_ms > 0 && other_ms < table_ms * (1.0 - margin)) return other;
  return table_pick;
}

namespace {

bool has(const std::vector<KernelKind>& v, KernelKind k) { return std::find(v.begin(), v.end(), k) != v.end(); }

std::string name_of(KernelKind k) { return std::string(kernel_kind_name(k)); }
std::string name_of(Precision p) { return std::string(precision_name(p)); }

}  // namespace

// Measured on one H100 (tests/kernels/fp32_contract_test.cc, sgemm-bench
// --accuracy; bench/results/2026-11-26_h100_fp32-contract/ and
// bench/results/2026-11-27_h100_fp32x3-splitk/).
Fp32x3ContractRule fp32x3_contract_rule() {
  return {kFp32x3ContractMinK, kFp32x3ContractSliceKBlocks, kFp32x3ContractMinCublasSumK};
}

bool fp32x3_keeps_fp32_contract(const GemmShape& s, int sm_count) {
  if (s.k < kFp32x3ContractMinK) return false;
  if (!sgemm_may_split_k(s)) return true;
  const int64_t tiles =
      ((s.m + kFp32x3TileEdge - 1) / kFp32x3TileEdge) * ((s.n + kFp32x3TileEdge - 1) / kFp32x3TileEdge);
  return s.k * tiles >= kFp32x3ContractMinCublasSumK * std::max(sm_count, 1);
}

bool fp32x3_outruns_ffma(const GemmShape& s, int sm_count) {
  if (s.m < 256 || s.n < 256 || s.k < 256) return false;
  const int64_t tiles =
      ((s.m + kFp32x3TileEdge - 1) / kFp32x3TileEdge) * ((s.n + kFp32x3TileEdge - 1) / kFp32x3TileEdge);
  return 4 * tiles * fp32x3_slices(s, sm_count).count >= std::max(sm_count, 1);
}

bool fp32_needs_cublas(const GemmShape& s) { return s.m >= 256 && s.n >= 256 && s.k >= 2048 && sgemm_may_split_k(s); }

StatusOr<KernelSelection> select_kernel(const KernelQuery& q) {
  const std::vector<KernelKind>& av = q.available;
  KernelSelection sel;
  if (q.precision == Precision::kTf32 || q.precision == Precision::kFp32x3) {
    const KernelKind own = q.precision == Precision::kTf32 ? KernelKind::kTf32 : KernelKind::kFp32x3;
    if (q.named && *q.named != own)
      return InvalidArgument("kernel: '" + name_of(*q.named) + "' computes fp32 FFMA; precision " +
                             name_of(q.precision) + " runs its own kernel (leave kernel unset)");
    if (!has(av, own))
      return FailedPrecondition(
          "precision " + name_of(q.precision) +
          " is not available on these GPUs (it needs an sm_90 GPU; available kernels: " + kernel_kind_list(av) + ")");
    sel.kind = own;
    return sel;
  }
  // fp32 and fp32-ffma: a named kernel must be an FFMA one this engine has.
  if (q.named) {
    if (kernel_arithmetic(*q.named) != ArithmeticClass::kFfma)
      return InvalidArgument("kernel: '" + name_of(*q.named) + "' is chosen by precision " + name_of(*q.named) +
                             ", not by name");
    if (!has(av, *q.named))
      return FailedPrecondition("kernel '" + name_of(*q.named) +
                                "' is not available on the cuda backend (available: " + kernel_kind_list(av) + ")");
    sel.kind = *q.named;
    return sel;
  }
  std::vector<KernelKind> ffma;
  for (KernelKind k : av)
    if (kernel_arithmetic(k) == ArithmeticClass::kFfma) ffma.push_back(k);
  if (ffma.empty())
    return FailedPrecondition("precision " + name_of(q.precision) +
                              " needs an FFMA kernel; available: " + kernel_kind_list(av));
  KernelKind fallback = has(ffma, q.ffma_default) ? q.ffma_default : ffma.front();
  const MeasuredOn on{q.device, q.sm_count, q.speeds};
  if (q.precision == Precision::kFp32Ffma) {
    KernelChoice choice = choose_kernel(q.shape, fallback, ffma, on);
    sel.kind = choice.kind;
    sel.reason = std::move(choice.reason);
    return sel;
  }
  // fp32: the kernels that keep the contract on the whole product, then the
  // fastest of them as measured.
  const GemmShape product = q.product.m > 0 ? q.product : q.shape;
  std::vector<KernelKind> keeping = ffma;
  const bool cublas_only = fp32_needs_cublas(product) && has(av, KernelKind::kCublas);
  if (cublas_only) keeping = {fallback = KernelKind::kCublas};
  const bool fp32x3_offered = has(av, KernelKind::kFp32x3);
  const bool fp32x3_keeps = fp32x3_offered && fp32x3_keeps_fp32_contract(product, q.sm_count);
  if (fp32x3_keeps) keeping.push_back(KernelKind::kFp32x3);
  const KernelChoice choice = choose_kernel(q.shape, fallback, keeping, on);
  sel.kind = choice.kind;
  // Where no rate of fp32x3 was measured near this launch, the tile rule stands in.
  const bool by_rule = fp32x3_keeps && sel.kind != KernelKind::kFp32x3 && has(choice.unmeasured, KernelKind::kFp32x3);
  if (by_rule && fp32x3_outruns_ffma(q.shape, q.sm_count)) sel.kind = KernelKind::kFp32x3;
  if (sel.kind == KernelKind::kFp32x3) {
    sel.reason = "; fp32 contract: fp32x3 for " + gemm_shape_text(q.shape) + " (" +
                 (by_rule ? "no rate measured for it here; its tiles fill the GPU, where it outruns FFMA"
                          : "faster than FFMA there") +
                 "; its error no larger than cuBLAS SGEMM's on " + gemm_shape_text(product) + ")";
  } else if (fp32x3_offered) {
    sel.reason = std::string("; fp32 contract: FFMA for ") + gemm_shape_text(q.shape) + " (" +
                 (fp32x3_keeps ? "fp32x3 is not faster there" : "fp32x3's error not proven within cuBLAS SGEMM's") +
                 ")";
  }
  if (sel.kind == KernelKind::kCublas && cublas_only)
    sel.reason += "; fp32 contract: cuBLAS SGEMM for " + gemm_shape_text(product) +
                  " (cuBLAS splits K there; no other FFMA kernel is measured within its error)";
  if (sel.kind != KernelKind::kFp32x3 || !by_rule) sel.reason += choice.reason;
  return sel;
}

StatusOr<KernelRowSelection> select_kernel_row(const KernelQuery& q) {
  SGEMM_ASSIGN_OR_RETURN(KernelSelection sel, select_kernel(q));
  KernelRowSelection out;
  out.pick = select_kernel_row_of(sel.kind, q.shape, q.layout, q.sm_count);
  out.reason = std::move(sel.reason);
  return out;
}

std::vector<KernelKind> kernels_serving(Precision p, const std::vector<KernelKind>& av) {
  std::vector<KernelKind> out;
  auto add_if = [&](ArithmeticClass c) {
    for (KernelKind k : av)
      if (kernel_arithmetic(k) == c && k != KernelKind::kOpenblas) out.push_back(k);
  };
  switch (p) {
    case Precision::kTf32:
      add_if(ArithmeticClass::kTf32);
      break;
    case Precision::kFp32x3:
      add_if(ArithmeticClass::kFp32x3);
      break;
    case Precision::kFp32:
      add_if(ArithmeticClass::kFp32x3);
      add_if(ArithmeticClass::kFfma);
      break;
    case Precision::kFp32Ffma:
      add_if(ArithmeticClass::kFfma);
      break;
  }
  return out;
}

}  // namespace sgemm
