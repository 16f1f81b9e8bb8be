// batch-bench: batched and grouped products on the CUDA engine
// (server/engine/batch.h, docs/transport.md "Batches and groups"), the device
// side of a request without the network (pinned host in -> pinned host out).
//
//   1. a strided batch (--batch 1000 products of --size 64 cubed): one launch;
//   2. a group of --group-count products (100) of shapes drawn log-uniformly in
//      [--group-min, --group-max] (32..2048) for each of m, n, k: one grouped
//      launch, against the same products each run as a single request, whose
//      kernel times are summed (the engine's own kernel choice per shape).
//
// Each first checks every product against the fp64 reference (sampled rows),
// then runs --warmup untimed and --iters timed and reports medians of the
// kernel phase (CUDA events: the slowest GPU's launch) and of Engine::run's wall
// time, and the group's ratio kernel(grouped) / sum of kernel(single) (the
// target: <= 1.3).
//
//   batch-bench [--gpus 1] [--iters 20] [--warmup 3] [--batch 1000] [--size 64] [--group-count 100]
//               [--group-min 32] [--group-max 2048] [--seed 1] [--precision fp32|fp32-ffma|tf32] [--pieces 4]
//               [--json]
// --pieces 1 runs each GPU's share as one launch after all its copies (CudaEngineOptions::batch_max_pieces).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "common/reference_gemm.h"
#include "server/engine/cuda/cuda_engine.h"

namespace {

using namespace sgemm;
using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The slowest device's kernel phase of a report (the batch's launch time on a split run).
double kernel_ms(const GemmReport& r) {
  double ms = 0;
  for (const DeviceTiming& d : r.devices) ms = std::max(ms, d.kernel_ms);
  return ms;
}

// One batch's request with its operands in the engine's pinned host memory.
struct BatchJob {
  GemmRequest request;
  HostBuffer a, b, c;
};

StatusOr<BatchJob> make_batch(Engine& e, BatchKind kind, const std::vector<GemmShape>& shapes, Precision precision,
                              uint64_t seed) {
  BatchJob j;
  auto spec = std::make_shared<BatchSpec>(make_batch_spec(kind, shapes, Op::kN, Op::kN));
  j.request.shape = shapes.front();
  j.request.options.precision = precision;
  j.request.batch = spec;
  SGEMM_ASSIGN_OR_RETURN(j.a, e.host_allocator().allocate(std::size_t(spec->a_elements) * 4));
  SGEMM_ASSIGN_OR_RETURN(j.b, e.host_allocator().allocate(std::size_t(spec->b_elements) * 4));
  SGEMM_ASSIGN_OR_RETURN(j.c, e.host_allocator().allocate(std::size_t(spec->c_elements) * 4));
  fill_random(j.a.floats(), spec->a_elements, seed);
  fill_random(j.b.floats(), spec->b_elements, seed + 1);
  SGEMM_RETURN_IF_ERROR(e.validate(j.request));
  return j;
}

GemmJob job_of(BatchJob& b) {
  GemmJob j;
  j.request = b.request;
  j.a = b.a.floats();
  j.b = b.b.floats();
  j.c = b.c.floats();
  return j;
}

// Every product of a finished batch against the fp64 reference (sampled rows). False on the first miss.
bool verify_batch(BatchJob& b, double tolerance, uint64_t seed) {
  const BatchSpec& spec = *b.request.batch;
  for (std::size_t i = 0; i < spec.products.size(); ++i) {
    const BatchProduct& p = spec.products[i];
    const GemmShape& s = p.shape;
    const VerifyResult v = verify_gemm(s.m, s.n, s.k, 1.0f, b.a.floats() + p.a_offset, b.b.floats() + p.b_offset, 0.0f,
                                       nullptr, b.c.floats() + p.c_offset, rows_to_verify(s.m, s.n, s.k, seed + i, 8));
    if (!v.passed(tolerance)) {
      std::fprintf(stderr, "batch-bench: product %zu (%s) is WRONG: max relative error %.3e\n", i,
                   gemm_shape_text(s).c_str(), v.max_rel_error);
      return false;
    }
  }
  return true;
}

struct Timed {
  double kernel_ms = 0, wall_ms = 0;
  std::string kernel, plan;
};

// --warmup untimed runs, then --iters timed: medians.
StatusOr<Timed> time_runs(Engine& e, const GemmJob& job, int warmup, int iters) {
  std::vector<double> kernel, wall;
  Timed t;
  for (int i = 0; i < warmup + iters; ++i) {
    const auto t0 = Clock::now();
    SGEMM_ASSIGN_OR_RETURN(GemmReport r, e.run(job));
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (i < warmup) continue;
    kernel.push_back(kernel_ms(r));
    wall.push_back(ms);
    t.kernel = report_kernel_name(r);
    t.plan = r.plan_reason;
  }
  t.kernel_ms = median(kernel);
  t.wall_ms = median(wall);
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  int gpus = 1, iters = 20, warmup = 3, group_count = 100;
  int64_t batch = 1000, size = 64, group_min = 32, group_max = 2048;
  uint64_t seed = 1;
  std::string precision_text = "fp32";
  bool json = false;
  int pieces = CudaEngineOptions{}.batch_max_pieces;
  CLI::App app{"batch-bench: batched and grouped products on the CUDA engine"};
  app.add_option("--gpus", gpus, "GPUs 0..N-1 the engine owns (a batch is split by product over them)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--iters", iters, "timed runs")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--warmup", warmup, "untimed runs first")->capture_default_str();
  app.add_option("--batch", batch, "products of the strided batch")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--size", size, "their m = n = k")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--group-count", group_count, "products of the group (0: no group)")->capture_default_str();
  app.add_option("--group-min", group_min, "smallest m, n, k of a group product")->capture_default_str();
  app.add_option("--group-max", group_max, "largest m, n, k of a group product")->capture_default_str();
  app.add_option("--seed", seed, "the group's shapes and every operand")->capture_default_str();
  app.add_option("--precision", precision_text, "fp32, fp32-ffma or tf32")->capture_default_str();
  app.add_option("--pieces", pieces, "pieces per GPU a batch is pipelined in (1: one launch after every copy)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_flag("--json", json, "print one JSON object");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  const auto precision = parse_precision(precision_text);
  if (!precision) {
    std::fprintf(stderr, "batch-bench: unknown --precision %s\n", precision_text.c_str());
    return 2;
  }
  const double tolerance = *precision == Precision::kTf32 ? 1e-2 : kSgemmTolerance;
  CudaEngineOptions o;
  for (int i = 0; i < gpus; ++i) o.devices.push_back(i);
  o.batch_max_pieces = pieces;
  auto made = make_cuda_engine(o);
  if (!made.ok()) {
    std::fprintf(stderr, "batch-bench: %s\n", made.status().to_string().c_str());
    return 3;
  }
  Engine& e = **made;
  nlohmann::json out = {{"gpus", gpus}, {"precision", precision_text}, {"iters", iters}, {"pieces", pieces}};

  // 1. The strided batch.
  {
    auto b = make_batch(e, BatchKind::kStrided, std::vector<GemmShape>(std::size_t(batch), {size, size, size}),
                        *precision, seed);
    if (!b.ok()) {
      std::fprintf(stderr, "batch-bench: %s\n", b.status().to_string().c_str());
      return 3;
    }
    const GemmJob job = job_of(*b);
    auto first = e.run(job);
    if (!first.ok()) {
      std::fprintf(stderr, "batch-bench: %s\n", first.status().to_string().c_str());
      return 3;
    }
    if (!verify_batch(*b, tolerance, seed)) return 1;
    auto t = time_runs(e, job, warmup, iters);
    if (!t.ok()) {
      std::fprintf(stderr, "batch-bench: %s\n", t.status().to_string().c_str());
      return 3;
    }
    out["strided"] = {{"products", batch},    {"size", size},    {"kernel", t->kernel}, {"kernel_ms", t->kernel_ms},
                      {"run_ms", t->wall_ms}, {"plan", t->plan}, {"verified", true}};
    if (!json)
      std::printf(
          "strided batch of %ld products of %ld^3: %s, kernel %.3f ms, Engine::run %.3f ms (median of %d; "
          "every product verified)\n",
          long(batch), long(size), t->kernel.c_str(), t->kernel_ms, t->wall_ms, iters);
  }

  // 2. The group, against its products run singly.
  if (group_count > 0) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> u(std::log(double(group_min)), std::log(double(group_max)));
    std::vector<GemmShape> shapes;
    for (int i = 0; i < group_count; ++i)
      shapes.push_back({int64_t(std::exp(u(rng))), int64_t(std::exp(u(rng))), int64_t(std::exp(u(rng)))});
    auto g = make_batch(e, BatchKind::kGroup, shapes, *precision, seed + 10);
    if (!g.ok()) {
      std::fprintf(stderr, "batch-bench: %s\n", g.status().to_string().c_str());
      return 3;
    }
    const GemmJob job = job_of(*g);
    auto first = e.run(job);
    if (!first.ok()) {
      std::fprintf(stderr, "batch-bench: %s\n", first.status().to_string().c_str());
      return 3;
    }
    if (!verify_batch(*g, tolerance, seed)) return 1;
    auto grouped = time_runs(e, job, warmup, iters);
    if (!grouped.ok()) {
      std::fprintf(stderr, "batch-bench: %s\n", grouped.status().to_string().c_str());
      return 3;
    }
    // Each product alone, split single, in the same host buffers (its slice of the concatenations).
    double single_kernel = 0, single_run = 0;
    const BatchSpec& spec = *g->request.batch;
    for (const BatchProduct& p : spec.products) {
      GemmJob one;
      one.request.shape = p.shape;
      one.request.options.precision = *precision;
      one.request.options.split = SplitMode::kSingle;
      one.a = g->a.floats() + p.a_offset;
      one.b = g->b.floats() + p.b_offset;
      one.c = g->c.floats() + p.c_offset;
      if (Status v = e.validate(one.request); !v.ok()) {
        std::fprintf(stderr, "batch-bench: product %s alone: %s\n", gemm_shape_text(p.shape).c_str(),
                     v.to_string().c_str());
        return 3;
      }
      auto t = time_runs(e, one, warmup, iters);
      if (!t.ok()) {
        std::fprintf(stderr, "batch-bench: %s\n", t.status().to_string().c_str());
        return 3;
      }
      single_kernel += t->kernel_ms;
      single_run += t->wall_ms;
    }
    if (!verify_batch(*g, tolerance, seed + 1)) return 1;  // the single runs rewrote every C: still right
    const double ratio = single_kernel > 0 ? grouped->kernel_ms / single_kernel : 0;
    out["group"] = {{"products", group_count},
                    {"min", group_min},
                    {"max", group_max},
                    {"kernel", grouped->kernel},
                    {"kernel_ms", grouped->kernel_ms},
                    {"run_ms", grouped->wall_ms},
                    {"single_kernel_ms_sum", single_kernel},
                    {"single_run_ms_sum", single_run},
                    {"kernel_ratio", ratio},
                    {"plan", grouped->plan},
                    {"verified", true}};
    if (!json)
      std::printf(
          "group of %d products, m, n, k in [%ld, %ld]: %s, kernel %.3f ms, Engine::run %.3f ms; the same "
          "products singly: kernels %.3f ms in all, Engine::run %.3f ms in all; grouped / single kernels "
          "%.2fx (every product verified)\n",
          group_count, long(group_min), long(group_max), grouped->kernel.c_str(), grouped->kernel_ms, grouped->wall_ms,
          single_kernel, single_run, ratio);
  }
  if (json) std::printf("%s\n", out.dump().c_str());
  return 0;
}
