#include "server/planner/kernel_choice.h"

#include <algorithm>

namespace sgemm {
namespace {

bool single_row_or_column(const GemmShape& s) { return s.m == 1 || s.n == 1; }
// C at most 64 columns wide while m and k are large: half of each 64x128 tile
// computes padding, and the split-K that fills the SMs costs a reduction.
bool narrow(const GemmShape& s) { return s.n <= 64 && s.m >= 1024 && s.k >= 1024; }

// A class goes to cuBLAS when ping-pong runs below 80% of it there; on the
// shapes no row covers ping-pong measured 88-106% of cuBLAS (docs/kernels.md),
// and the kernel issue is closing that gap. Measured with sgemm-bench on an
// H200, 2026-11-22 (bench/results/2026-11-22-h200x4-arch/sgemm-bench-thin.csv):
// 128x8192x8192 88.3% and 8192x128x8192 89.4% keep ping-pong.
constexpr KernelChoiceRow kTable[] = {
    {"m = 1 or n = 1", single_row_or_column, KernelKind::kCublas,
     "ping-pong 40.5% of cuBLAS at 1x4096x4096, 21.6% at 4096x1x4096 (H200, 2026-11-22)"},
    {"n <= 64 with m, k >= 1024", narrow, KernelKind::kCublas,
     "ping-pong 51.9% of cuBLAS at 8192x64x8192 (H200, 2026-11-22)"},
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
