// engine-bench's timed runs, shared by its one-host and cluster modes
// (engine_bench.cc, engine_bench_cluster.cc): warm-up runs, then timed runs of
// one job, reported as medians of Engine::run's wall time and of the slowest
// device's summed phases.
#pragma once

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "common/status.h"
#include "server/engine/engine.h"

namespace sgemm::bench {

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct RunMedians {
  double e2e_ms = 0, kernel_ms = 0, copy_in_ms = 0, reduce_ms = 0, copy_out_ms = 0;
  std::string plan;  // the last run's plan_reason
};

// `warmup` untimed runs, then `iters` timed ones; the first failing run's status.
inline StatusOr<RunMedians> time_engine_runs(Engine& engine, const GemmJob& job, int warmup, int iters) {
  for (int i = 0; i < warmup; ++i) (void)engine.run(job);
  std::vector<double> e2e, kern, cin, red, cout;
  RunMedians m;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    auto r = engine.run(job);
    const auto t1 = std::chrono::steady_clock::now();
    if (!r.ok()) return r.status();
    e2e.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    double k = 0, ci = 0, rd = 0, co = 0;
    for (const auto& d : r->devices) {
      k = std::max(k, d.kernel_ms);
      ci = std::max(ci, d.copy_in_ms);
      rd = std::max(rd, d.reduce_ms);
      co = std::max(co, d.copy_out_ms);
    }
    kern.push_back(k);
    cin.push_back(ci);
    red.push_back(rd);
    cout.push_back(co);
    m.plan = r->plan_reason;
  }
  m.e2e_ms = median(e2e);
  m.kernel_ms = median(kern);
  m.copy_in_ms = median(cin);
  m.reduce_ms = median(red);
  m.copy_out_ms = median(cout);
  return m;
}

}  // namespace sgemm::bench
