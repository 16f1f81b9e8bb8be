// engine-bench --small SHAPES: many small requests through one GPU's engine,
// as a server's request threads send them. For each shape and each count of
// submitters (threads, each with its own pinned A, B and C, as each request
// has its own), every submitter calls Engine::run back to back for a fixed
// time; the first and last result of each is checked against the fp64
// reference. One line per case: products/s over all submitters, the p50 and
// p99 of Engine::run's wall time (submit to result, the latency a request's
// compute phase sees), the median device-side kernel and copy times (CUDA
// events, from the report) and the mean of each engine host step
// (GemmReport::host_ms), so a change shows where it moved the time.
#pragma once

#include <optional>
#include <vector>

#include "common/gemm_types.h"

namespace sgemm::bench {

struct SmallBenchArgs {
  std::vector<GemmShape> shapes;     // e.g. 64^3, 256^3
  std::vector<int> submitters;       // threads calling Engine::run at once, e.g. 1, 16
  double duration_s = 2.0;           // timed seconds per case (after the warm-up)
  int warmup = 50;                   // untimed runs per submitter first
  int lanes = 0;                     // CudaEngineOptions::lanes_per_device; 0 = the engine's default
  std::optional<KernelKind> kernel;  // nullopt: the engine's choice per shape, as a server makes it
  bool kernel_autotune = true;       // CudaEngineOptions::kernel_autotune
};

// Runs every case on GPU 0 and prints one line each to stdout. Returns the
// exit status: 0 done, 1 a run failed or a result was wrong.
int run_small_bench(const SmallBenchArgs& args);

}  // namespace sgemm::bench
