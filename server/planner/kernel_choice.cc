#include "server/planner/kernel_choice.h"

#include <algorithm>

namespace sgemm {
namespace {

bool single_column(const GemmShape& s) { return s.n == 1; }
bool single_row(const GemmShape& s) { return s.m == 1; }
// C at most 128 columns wide, or 65 to 128 rows high, with the other side and K
// long: ping-pong's thin tiles with split-K reach 82-93% of cuBLAS there.
bool narrow(const GemmShape& s) { return s.n <= 128 && s.m >= 1024 && s.k >= 2048; }
bool short_rows(const GemmShape& s) { return s.m > 64 && s.m <= 128 && s.n >= 1024 && s.k >= 2048; }

// A class goes to the kernel measured faster there (sgemm-bench, one H100, the
// same run as cuBLAS; bench/results/2026-11-22-h100-kernel-thin/). Shapes no row
// covers run ping-pong: 90-109% of cuBLAS on squares and large rectangles, 97-105%
// at 8192x64x1024, 101% at 64x8192x8192 and 152% at 32x8192x8192 (docs/kernels.md).
constexpr KernelChoiceRow kTable[] = {
    {"n = 1", single_column, KernelKind::kPingpong,
     "ping-pong's GEMV 122.4% of cuBLAS at 4096x1x4096, 122.5% at 8192x1x8192 (H100, 2026-11-22)"},
    {"m = 1", single_row, KernelKind::kCublas,
     "ping-pong's GEMV 87.3% of cuBLAS at 1x4096x4096, 87.5% at 1x8192x8192 (H100, 2026-11-22)"},
    {"n <= 128 with m >= 1024, k >= 2048", narrow, KernelKind::kCublas,
     "ping-pong 81.7% of cuBLAS at 8192x32x8192, 92.1% at 8192x64x8192, 91.5% at 8192x128x8192 (H100, 2026-11-22)"},
    {"64 < m <= 128 with n >= 1024, k >= 2048", short_rows, KernelKind::kCublas,
     "ping-pong 88.6-90.0% of cuBLAS at 128x8192x8192 (H100, 2026-11-22)"},
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

}  // namespace sgemm
