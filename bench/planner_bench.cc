// planner-bench: the host cost of the planner's per-request decisions, which the
// engine pays before every launch (docs/performance.md, "Small requests"). One
// query per shape class, with the built-in measured speeds; runs on any host.
//
//   planner-bench [google-benchmark flags]
#include <benchmark/benchmark.h>

#include <vector>

#include "server/planner/kernel_choice.h"

namespace {

using sgemm::GemmShape;
using sgemm::KernelKind;
using sgemm::KernelQuery;

// A query as the cuda engine builds it on an H200 with every kernel available.
KernelQuery query(const GemmShape& shape, sgemm::Precision precision) {
  KernelQuery q;
  q.shape = shape;
  q.product = shape;
  q.precision = precision;
  q.available = {KernelKind::kPingpong, KernelKind::kCublas, KernelKind::kTf32, KernelKind::kFp32x3};
  q.sm_count = 132;
  q.device = "NVIDIA H200";
  return q;
}

// One probe shape of each class: the classes' cost differs with their number of measured shapes.
std::vector<GemmShape> class_shapes() {
  std::vector<GemmShape> out;
  for (const sgemm::KernelShapeClass& c : sgemm::kernel_shape_classes())
    if (!c.probes.empty()) out.push_back(c.probes[c.probes.size() / 2]);
  return out;
}

// Times `choose` over one query per class, in turn.
template <typename Choose>
void over_classes(benchmark::State& state, sgemm::Precision precision, Choose choose) {
  std::vector<KernelQuery> queries;
  for (const GemmShape& s : class_shapes()) queries.push_back(query(s, precision));
  size_t i = 0;
  for (auto _ : state) {
    auto sel = choose(queries[i]);
    benchmark::DoNotOptimize(sel);
    i = (i + 1) % queries.size();
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_SelectKernelFp32(benchmark::State& state) {
  over_classes(state, sgemm::Precision::kFp32, sgemm::select_kernel);
}
void BM_SelectKernelFp32Ffma(benchmark::State& state) {
  over_classes(state, sgemm::Precision::kFp32Ffma, sgemm::select_kernel);
}
void BM_SelectKernelRow(benchmark::State& state) {
  over_classes(state, sgemm::Precision::kFp32, sgemm::select_kernel_row);
}

}  // namespace

BENCHMARK(BM_SelectKernelFp32);
BENCHMARK(BM_SelectKernelFp32Ffma);
BENCHMARK(BM_SelectKernelRow);
BENCHMARK_MAIN();
