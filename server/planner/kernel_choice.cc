#include "server/planner/kernel_choice.h"

#include <algorithm>

namespace sgemm {
namespace {

bool single_row_or_column(const GemmShape& s) { return s.m == 1 || s.n == 1; }
// One side of C at most 128 while the product is large: our 64x128 tiles
// leave most SMs idle and split-K does not pay for its reduction there.
bool thin(const GemmShape& s) { return (s.m <= 128 || s.n <= 128) && s.k >= 1024 && std::max(s.m, s.n) >= 1024; }

constexpr KernelChoiceRow kTable[] = {
    {"m = 1 or n = 1", single_row_or_column, KernelKind::kCublas,
     "ping-pong 47% of cuBLAS at 1x4096x4096 (H100, 2026-11-22, issue 14's measurement)"},
    {"m <= 128 or n <= 128, k >= 1024, max(m, n) >= 1024", thin, KernelKind::kCublas,
     "ping-pong 52% of cuBLAS at n <= 128 with large m and k (H100, 2026-11-22, issue 14's measurement)"},
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
