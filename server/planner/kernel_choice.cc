#include "server/planner/kernel_choice.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "common/fp32x3_slices.h"

namespace sgemm {
namespace {

// fp32x3's measured region of the fp32 contract (fp32x3_contract_rule).
constexpr int64_t kFp32x3ContractMinK = 256;
constexpr int64_t kFp32x3ContractMinCublasSumK = 400;

// The registry's GEMV shapes (common/kernel_registry.h).
bool single_row_or_column(const GemmShape& s) { return one_row_or_column(s); }
// C at most 64 rows high, wide, with a long K: ping-pong's 32x128 and 64x128
// tiles with split-K.
bool few_rows(const GemmShape& s) { return s.m <= 64 && s.n >= 1024 && s.k >= 2048; }
// C at most 32 columns wide with a long K: ping-pong's K-major 128x32x32 tile
// (16-byte copies of A). The engine pads A's rows to 16 bytes (lda = pad4(k)),
// so an odd K runs it too (dense, as sgemm-bench lays it out, 8192x32x8191 falls
// back to the transposed tile: 79%).
bool narrow32(const GemmShape& s) { return s.n <= 32 && s.m >= 1024 && s.k >= 2048; }
// 33 to 64 columns, 1024 to 4096 rows and K of 2048 to 8192 (A's rows padded as
// above): ping-pong's K-major 64x64x32 tile with split-K beats cuBLAS there (the
// engine's 1024-row blocks of 8192-row thin products among them).
bool narrow64_mid(const GemmShape& s) {
  return s.n > 32 && s.n <= 64 && s.m >= 1024 && s.m <= 4096 && s.k >= 2048 && s.k <= 8192;
}
// C at most 128 columns wide, or 65 to 128 rows high, with the other side and K
// long: ping-pong's thin tiles with split-K reach 82-96% of cuBLAS there, and
// 26-73% on 512-row blocks (the engine's blocks of 4096-row thin products).
bool narrow(const GemmShape& s) { return s.n <= 128 && s.m >= 512 && s.k >= 2048; }
bool short_rows(const GemmShape& s) { return s.m > 64 && s.m <= 128 && s.n >= 1024 && s.k >= 2048; }
// Large C: ping-pong's 64x128 tile reaches 90-96% of cuBLAS from 2048 up; the
// engine's pipeline blocks of such products (512 to 2048 rows) likewise, with
// exceptions either way (512x4096x4096 103%, 768x3584x3584 108%, 1024x8192x8192
// 91%, 512x2048x2048 84%): those are what the engine's timing on the GPU settles.
bool large(const GemmShape& s) { return s.m >= 512 && s.n >= 2048 && s.k >= 1000; }
// Few output tiles and a long K: ping-pong splits K, 88-90% of cuBLAS.
bool few_tiles_long_k(const GemmShape& s) { return s.m * s.n <= int64_t{2048} * 1024 && s.k >= 8192; }

// A class goes to the kernel measured faster there (sgemm-bench, one H100, the
// same run as cuBLAS; bench/results/2026-11-22_h100_thin-gemv-tiles/call3 and
// bench/results/2026-11-22_h100_thin-kmajor-a/), so that
// the default is at least 98% of the better of the two on every measured class.
// Shapes no row covers run the engine's configured default
// (ping-pong: 103-109% of cuBLAS at 1024, 100.9% at 8192x64x1024).
constexpr KernelChoiceRow kTable[] = {
    {"m = 1 or n = 1", single_row_or_column, KernelKind::kPingpong,
     "ping-pong's GEMV 103.4% of cuBLAS at 1x4096x4096, 104.9% at 1x8192x8192, 122.2% at 4096x1x4096, 121.4% at "
     "8192x1x8192 (H100, 2026-11-22)"},
    {"m <= 64 with n >= 1024, k >= 2048", few_rows, KernelKind::kPingpong,
     "ping-pong 157.1% of cuBLAS at 32x8192x8192, 101.0% at 64x8192x8192 (H100, 2026-11-22)"},
    {"n <= 32 with m >= 1024, k >= 2048", narrow32, KernelKind::kPingpong,
     "ping-pong (K-major 128x32x32) 109.6-110.7% of cuBLAS at 8192x32x8192, 107.0-108.9% at 4096x32x4096 (H100, "
     "2026-11-22); 142.2% at 1024x32x8192, 113% at 1024x32x8191 with A's rows padded as the engine pads them "
     "(H100, 2026-11-23, bench/results/2026-11-23_h100_kernel-choice-timed/)"},
    {"32 < n <= 64 with 1024 <= m <= 4096, 2048 <= k <= 8192", narrow64_mid, KernelKind::kPingpong,
     "ping-pong (K-major 64x64x32) 98.5-109.5% of cuBLAS at 4096x64x4096 (H100, 2026-11-22, "
     "bench/results/2026-11-22_h100_thin-kmajor-a/), 121.8% at 1024x64x4096, 113.1% at 1024x64x8192 (H100, 2026-11-23, "
     "bench/results/2026-11-23_h100_engine-blocks/)"},
    {"n <= 128 with m >= 512, k >= 2048", narrow, KernelKind::kCublas,
     "ping-pong 93.1-96.5% of cuBLAS at 8192x64x8192, 89.2-90.6% at 8192x128x8192 (H100, 2026-11-22); 26.1-73.1% on "
     "512-row blocks (512x32x2048 to 512x64x16384), 96.1% at 1024x128x8192 (H100, 2026-11-23); the rows above take "
     "n <= 32 and 4096x64x4096"},
    {"64 < m <= 128 with n >= 1024, k >= 2048", short_rows, KernelKind::kCublas,
     "ping-pong 89.7% of cuBLAS at 128x8192x8192 (H100, 2026-11-22)"},
    {"m >= 512, n >= 2048 with k >= 1000", large, KernelKind::kCublas,
     "ping-pong 93.4% of cuBLAS at 2048, 93.1% at 4096, 94.7% at 8192, 94.9% at 8192x8192x1024, 89.4% at 4095, "
     "90.7% at 8191x8193x1000; below the better on 26 of 37 pipeline-block shapes 512-1536 rows high, 83.7-108.2% "
     "(H100, 2026-11-23, bench/results/2026-11-23_h100_engine-blocks/)"},
    {"m * n <= 2048 * 1024 with k >= 8192", few_tiles_long_k, KernelKind::kCublas,
     "ping-pong 90.1% of cuBLAS at 1024x1024x16384 (H100, 2026-11-22)"},
};

}  // namespace

std::span<const KernelChoiceRow> kernel_choice_table() { return kTable; }

const KernelChoiceRow* find_kernel_choice(const GemmShape& shape) {
  for (const KernelChoiceRow& row : kTable)
    if (row.matches(shape)) return &row;
  return nullptr;
}

KernelKind choose_kernel(const GemmShape& shape, KernelKind fallback, const std::vector<KernelKind>& available) {
  const KernelChoiceRow* row = find_kernel_choice(shape);
  if (row && std::find(available.begin(), available.end(), row->kernel) != available.end()) return row->kernel;
  return fallback;
}

KernelKind prefer_measured(KernelKind table_pick, double table_ms, KernelKind other, double other_ms, double margin) {
  if (other_ms > 0 && table_ms > 0 && other_ms < table_ms * (1.0 - margin)) return other;
  return table_pick;
}

std::string kernel_choice_reason(const GemmShape& shape, KernelKind chosen, KernelKind fallback) {
  if (chosen == fallback) return "";
  const KernelChoiceRow* row = find_kernel_choice(shape);
  if (!row) return "";
  return "; kernel " + std::string(kernel_kind_name(chosen)) + " for " + row->shape_class +
         " (measured table, server/planner/kernel_choice.cc)";
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
  const GemmShape product = q.product.m > 0 ? q.product : q.shape;
  if (q.precision == Precision::kFp32) {
    const bool keeps = fp32x3_keeps_fp32_contract(product, q.sm_count);
    if (has(av, KernelKind::kFp32x3)) {
      const bool faster = fp32x3_outruns_ffma(q.shape, q.sm_count);
      if (faster && keeps) {
        sel.kind = KernelKind::kFp32x3;
        sel.reason = "; fp32 contract: fp32x3 for " + gemm_shape_text(q.shape) +
                     " (faster than FFMA there; its error no larger than cuBLAS SGEMM's on " +
                     gemm_shape_text(product) + ")";
        return sel;
      }
      sel.reason = std::string("; fp32 contract: FFMA for ") + gemm_shape_text(q.shape) + " (" +
                   (keeps ? "fp32x3 is not faster there" : "fp32x3's error not proven within cuBLAS SGEMM's") + ")";
    }
    if (fp32_needs_cublas(product) && has(av, KernelKind::kCublas)) {
      sel.kind = KernelKind::kCublas;
      sel.reason += "; fp32 contract: cuBLAS SGEMM for " + gemm_shape_text(product) +
                    " (cuBLAS splits K there; no other kernel is measured within its error)";
      return sel;
    }
  }
  std::vector<KernelKind> ffma;
  for (KernelKind k : av)
    if (kernel_arithmetic(k) == ArithmeticClass::kFfma) ffma.push_back(k);
  if (ffma.empty())
    return FailedPrecondition("precision " + name_of(q.precision) +
                              " needs an FFMA kernel; available: " + kernel_kind_list(av));
  const KernelKind fallback = has(ffma, q.ffma_default) ? q.ffma_default : ffma.front();
  sel.kind = choose_kernel(q.shape, fallback, ffma);
  sel.reason += kernel_choice_reason(q.shape, sel.kind, fallback);
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
