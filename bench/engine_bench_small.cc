// engine-bench --small: see engine_bench_small.h.
#include "engine_bench_small.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/reference_gemm.h"
#include "server/engine/cuda/cuda_engine.h"

namespace sgemm::bench {
namespace {

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// The q-quantile of `v` (sorted in place), nearest rank.
double quantile(std::vector<double>& v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto i = std::min(v.size() - 1, std::size_t(q * double(v.size())));
  return v[i];
}

// One submitter's matrices (pinned, from the engine's host allocator, as a
// server's request buffers are) and what its timed runs measured.
struct Submitter {
  HostBuffer a, b, c;
  std::vector<double> run_ms;                    // Engine::run wall time per timed run
  std::vector<double> kernel_ms, in_ms, out_ms;  // the report's device timings per timed run
  std::map<std::string, double> host_ms_sum;     // GemmReport::host_ms summed by step
  std::vector<std::string> host_step_order;      // steps in the order they first came
  std::string error;                             // the first failure, if any
  std::string plan;                              // the first timed run's kernel and plan
};

bool verify(const GemmShape& s, const Submitter& sub, std::string* why) {
  const VerifyResult v = verify_gemm(s.m, s.n, s.k, 1.0f, sub.a.floats(), sub.b.floats(), 0.0f, nullptr, sub.c.floats(),
                                     rows_to_verify(s.m, s.n, s.k, 7, 64));
  if (v.passed(kSgemmTolerance)) return true;
  char buf[160];
  std::snprintf(buf, sizeof buf, "WRONG RESULT (max rel error %.3g at %lld,%lld)", v.max_rel_error,
                (long long)v.worst_row, (long long)v.worst_col);
  *why = buf;
  return false;
}

// One submitter's loop: warm-up, then runs until `stop`; the first and the
// last result are verified (C is poisoned with NaN before each).
void submit_loop(Engine& engine, const SmallBenchArgs& args, const GemmShape& s, Submitter& sub,
                 std::atomic<int>& ready, const std::atomic<bool>& go, const std::atomic<bool>& stop) {
  GemmJob job;
  job.request.shape = s;
  job.request.options.kernel = args.kernel;
  job.a = sub.a.floats();
  job.b = sub.b.floats();
  job.c = sub.c.floats();
  const std::size_t c_bytes = std::size_t(s.m * s.n) * sizeof(float);
  std::memset(sub.c.floats(), 0xff, c_bytes);
  for (int i = 0; i < std::max(1, args.warmup) && sub.error.empty(); ++i) {
    auto r = engine.run(job);
    if (!r.ok()) sub.error = r.status().to_string();
    if (i == 0 && sub.error.empty()) (void)verify(s, sub, &sub.error);
  }
  ready.fetch_add(1, std::memory_order_release);
  if (!sub.error.empty()) return;
  while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
  std::memset(sub.c.floats(), 0xff, c_bytes);
  while (!stop.load(std::memory_order_relaxed)) {
    const auto t0 = Clock::now();
    auto r = engine.run(job);
    const auto t1 = Clock::now();
    if (!r.ok()) {
      sub.error = r.status().to_string();
      return;
    }
    if (stop.load(std::memory_order_relaxed)) break;  // counted: the runs that ended inside the window
    sub.run_ms.push_back(ms_between(t0, t1));
    double k = 0, in = 0, out = 0;
    for (const DeviceTiming& d : r->devices) {
      k = std::max(k, d.kernel_ms);
      in = std::max(in, d.copy_in_ms);
      out = std::max(out, d.copy_out_ms);
    }
    sub.kernel_ms.push_back(k);
    sub.in_ms.push_back(in);
    sub.out_ms.push_back(out);
    for (const auto& [step, ms] : r->host_ms) {
      auto [it, fresh] = sub.host_ms_sum.try_emplace(step, 0.0);
      if (fresh) sub.host_step_order.push_back(step);
      it->second += ms;
    }
    if (sub.plan.empty()) sub.plan = report_kernel_name(*r) + "; " + r->plan_reason;
  }
  if (!sub.run_ms.empty()) (void)verify(s, sub, &sub.error);
}

// One case: `n` submitters of shape `s` on `engine`. Prints its line.
bool run_case(Engine& engine, const SmallBenchArgs& args, const GemmShape& s, int n, int lanes) {
  std::vector<Submitter> subs(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    Submitter& sub = subs[std::size_t(i)];
    auto a = engine.host_allocator().allocate(std::size_t(s.m * s.k) * sizeof(float));
    auto b = engine.host_allocator().allocate(std::size_t(s.k * s.n) * sizeof(float));
    auto c = engine.host_allocator().allocate(std::size_t(s.m * s.n) * sizeof(float));
    if (!a.ok() || !b.ok() || !c.ok()) {
      std::fprintf(stderr, "engine-bench --small: pinned host memory: out of memory\n");
      return false;
    }
    sub.a = std::move(a).value();
    sub.b = std::move(b).value();
    sub.c = std::move(c).value();
    fill_random(sub.a.floats(), s.m * s.k, 2 * uint64_t(i) + 1);
    fill_random(sub.b.floats(), s.k * s.n, 2 * uint64_t(i) + 2);
    sub.run_ms.reserve(std::size_t(args.duration_s * 40000 / n) + 1024);
  }
  std::atomic<int> ready{0};
  std::atomic<bool> go{false}, stop{false};
  std::vector<std::thread> threads;
  threads.reserve(subs.size());
  for (int i = 0; i < n; ++i)
    threads.emplace_back([&, i] { submit_loop(engine, args, s, subs[std::size_t(i)], ready, go, stop); });
  // Timing starts once every submitter has warmed up (or failed).
  const auto warm_deadline = Clock::now() + std::chrono::seconds(120);
  while (ready.load(std::memory_order_acquire) < n && Clock::now() < warm_deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const auto t0 = Clock::now();
  go.store(true, std::memory_order_release);
  std::this_thread::sleep_for(std::chrono::duration<double>(args.duration_s));
  stop.store(true, std::memory_order_relaxed);
  const auto t1 = Clock::now();
  for (auto& t : threads) t.join();

  std::vector<double> run_ms, kernel_ms, in_ms, out_ms;
  std::map<std::string, double> host_sum;
  std::vector<std::string> order;
  bool ok = true;
  for (Submitter& sub : subs) {
    if (!sub.error.empty()) {
      std::fprintf(stderr, "engine-bench --small %lldx%lldx%lld x%d: %s\n", (long long)s.m, (long long)s.n,
                   (long long)s.k, n, sub.error.c_str());
      ok = false;
    }
    run_ms.insert(run_ms.end(), sub.run_ms.begin(), sub.run_ms.end());
    kernel_ms.insert(kernel_ms.end(), sub.kernel_ms.begin(), sub.kernel_ms.end());
    in_ms.insert(in_ms.end(), sub.in_ms.begin(), sub.in_ms.end());
    out_ms.insert(out_ms.end(), sub.out_ms.begin(), sub.out_ms.end());
    for (const std::string& step : sub.host_step_order)
      if (!host_sum.count(step)) order.push_back(step);
    for (const auto& [step, ms] : sub.host_ms_sum) host_sum[step] += ms;
  }
  const double seconds = ms_between(t0, t1) / 1000.0;
  const std::size_t runs = run_ms.size();
  std::string steps;
  for (const std::string& step : order) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "%s%s %.4f", steps.empty() ? "" : ", ", step.c_str(),
                  runs ? host_sum[step] / double(runs) : 0.0);
    steps += buf;
  }
  std::printf(
      "small %lldx%lldx%lld submitters %d lanes %d: %.0f products/s (%zu in %.2f s); run p50 %.4f ms p99 %.4f ms; "
      "device median kernel %.4f in %.4f out %.4f ms; engine host ms mean: %s; %s [%s]\n",
      (long long)s.m, (long long)s.n, (long long)s.k, n, lanes, seconds > 0 ? double(runs) / seconds : 0.0, runs,
      seconds, quantile(run_ms, 0.5), quantile(run_ms, 0.99), quantile(kernel_ms, 0.5), quantile(in_ms, 0.5),
      quantile(out_ms, 0.5), steps.c_str(), ok ? "verified" : "FAILED", subs.empty() ? "" : subs[0].plan.c_str());
  std::fflush(stdout);
  return ok && runs > 0;
}

}  // namespace

int run_small_bench(const SmallBenchArgs& args) {
  CudaEngineOptions o;
  o.devices = {0};
  o.default_kernel = args.kernel;
  o.kernel_autotune = args.kernel_autotune;
  if (args.lanes > 0) o.lanes_per_device = args.lanes;
  auto engine = make_cuda_engine(o);
  if (!engine.ok()) {
    std::fprintf(stderr, "engine-bench --small: %s\n", engine.status().to_string().c_str());
    return 1;
  }
  const EngineInfo info = (*engine)->info();
  std::fprintf(stderr, "engine-bench --small: %s, %d lanes, %.1f s per case after %d warm-up runs per submitter\n",
               info.devices.empty() ? "?" : info.devices[0].name.c_str(), o.lanes_per_device, args.duration_s,
               args.warmup);
  bool ok = true;
  for (const GemmShape& s : args.shapes)
    for (int n : args.submitters) ok = run_case(**engine, args, s, n, o.lanes_per_device) && ok;
  return ok ? 0 : 1;
}

}  // namespace sgemm::bench
