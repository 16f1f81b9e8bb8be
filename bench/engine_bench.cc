// engine-bench: scaling of the CUDA engine from one GPU to several.
//
// For each shape (4096^3, 8192^3, 16384^3, 1024x1024x65536 by default) and
// each strategy (single on GPU 0; then, for every count in --gpus above one,
// row split, K split with reduce-scatter, K split with reduce to root and the
// planner's own choice on GPUs 0..count-1) it first checks sampled rows
// against the fp64 reference, then runs `--warmup` untimed and `--iters`
// timed requests and reports medians:
//   kernel phase: the slowest device's summed kernel time (CUDA events)
//   end-to-end:   wall time of Engine::run, pinned host in -> pinned host out
// and the scaling of each against the single-GPU figures. Inputs live in
// pinned memory (the engine's host pool), so this is the device side of a
// request without the network.
//
//   engine-bench [--gpus 1,2,4] [--iters N] [--warmup N] [--csv] [--kernel NAME] [--shapes MxNxK,...]
//                [--sample ROWS] [--csv-out FILE] [--chunk-k K] [--chunk-rows R] [--no-kernel-autotune]
// --no-kernel-autotune: the measured speeds alone pick each request's kernel (docs/engine.md).
// --gpus defaults to 1, 2, 4, 8 up to the GPUs visible; a count over that is an error.
//
// Cluster mode (built with gRPC; docs/cluster.md, bench/engine_bench_cluster.h):
//   engine-bench --cluster N [--split rows|k] [--shapes MxNxK[:rows|:k],...] [--iters N] [--warmup N]
//                [--sample ROWS] [--kernel NAME] [--csv] [--csv-out FILE]
// runs the cluster engine over N processes with one GPU each (this one and
// N - 1 copies of it it starts), each shape with its split (--split, or the
// shape's own :rows / :k), against the coordinator's GPU alone in the same
// run, with the link measured when the cluster formed.
//
// Small requests (bench/engine_bench_small.h):
//   engine-bench --small 64,256 [--submitters 1,16] [--duration-s S] [--lanes N] [--warmup N] [--kernel NAME]
// many small products through GPU 0's engine from N threads at once: one line
// per shape and submitter count with products/s, Engine::run p50/p99 and the
// engine's host steps.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/reference_gemm.h"
#include "engine_bench_small.h"
#include "server/devices/pinned_host_pool.h"
#include "server/engine/cuda/cuda_engine.h"
#ifdef SGEMM_ENGINE_BENCH_CLUSTER
#include "engine_bench_cluster.h"
#include "engine_bench_runs.h"
#endif

namespace {

using namespace sgemm;

int64_t g_chunk_k = 0, g_chunk_rows = 0;  // pipeline block sizes for every engine made
bool g_kernel_autotune = true;            // CudaEngineOptions::kernel_autotune for every engine made

struct Args {
  int iters = 10;
  int warmup = 2;
  bool csv = false;
  std::string csv_out;               // also write the CSV here (the table still goes to stdout)
  std::optional<KernelKind> kernel;  // nullopt: the engine's choice per shape
  std::vector<int> gpus;             // GPU counts to compare; empty = 1, 2, 4, 8 up to those visible
  int64_t sample = 8;
  int64_t chunk_k = 0;     // CudaEngineOptions::chunk_k (0 = the engine's default)
  int64_t chunk_rows = 0;  // CudaEngineOptions::chunk_rows (0 = the engine's default)
  std::vector<GemmShape> shapes = {{4096, 4096, 4096}, {8192, 8192, 8192}, {16384, 16384, 16384}, {1024, 1024, 65536}};
  bool shapes_given = false;
  // Cluster mode: processes (0 = not a cluster run), the split of every shape
  // without its own (:rows / :k), and the split each shape names (kAuto: none).
  int cluster = 0;
  SplitMode cluster_split = SplitMode::kRows;
  std::vector<SplitMode> shape_splits;
  std::string member_of, member_name;  // --cluster-member ADDR --cluster-name NAME: a member (started by the above)
  // Small-request mode (--small): its shapes, submitter counts, seconds per case and lanes.
  std::vector<GemmShape> small;
  std::vector<int> submitters = {1, 16};
  double duration_s = 2.0;
  int lanes = 0;
  bool warmup_given = false;
};

// "64,256x128x32": a number alone is a cube.
std::vector<GemmShape> parse_small_shapes(const std::string& list) {
  std::vector<GemmShape> out;
  for (size_t pos = 0; pos <= list.size();) {
    const size_t end = std::min(list.find(',', pos), list.size());
    const std::string one = list.substr(pos, end - pos);
    long long m = 0, n = 0, k = 0;
    if (std::sscanf(one.c_str(), "%lldx%lldx%lld", &m, &n, &k) != 3) m = n = k = std::atoll(one.c_str());
    if (m < 1 || n < 1 || k < 1) return {};
    out.push_back({m, n, k});
    pos = end + 1;
  }
  return out;
}

std::vector<int> parse_counts(const std::string& list) {
  std::vector<int> out;
  for (size_t pos = 0; pos <= list.size();) {
    const size_t end = std::min(list.find(',', pos), list.size());
    const int v = std::atoi(list.substr(pos, end - pos).c_str());
    if (v < 1) return {};
    out.push_back(v);
    pos = end + 1;
  }
  return out;
}

std::optional<SplitMode> parse_cluster_split(const std::string& s) {
  if (s == "rows" || s == "row") return SplitMode::kRows;
  if (s == "k") return SplitMode::kK;
  return std::nullopt;
}

constexpr const char* kUsage =
    "usage: engine-bench [--iters N] [--warmup N] [--csv] [--csv-out FILE] [--kernel NAME] [--gpus 1,2,...]\n"
    "                    [--shapes MxNxK,...] [--sample ROWS] [--chunk-k K] [--chunk-rows R] [--no-kernel-autotune]\n"
    "       engine-bench --cluster N [--split rows|k] [--shapes MxNxK[:rows|:k],...] [options above]\n"
    "       engine-bench --small 64,256 [--submitters 1,16] [--duration-s S] [--lanes N] [--warmup N] [--kernel NAME]\n"
    "\n"
    "Times the engine (no gRPC) on each shape over 1, 2, 4, 8 GPUs (up to those visible): checks C against an fp64\n"
    "reference first (--sample rows), then reports the median of --iters runs after --warmup untimed ones.\n"
    "  --iters N            timed runs per shape and GPU count (default 10)\n"
    "  --warmup N           untimed runs first (default 2)\n"
    "  --csv, --csv-out F   print CSV instead of the table / also write CSV to F\n"
    "  --kernel NAME        pingpong or cublas (default: the engine's choice per shape)\n"
    "  --gpus LIST          GPU counts to compare, e.g. 1,2\n"
    "  --shapes LIST        MxNxK,... (default 4096^3, 8192^3, 16384^3, 1024x1024x65536)\n"
    "  --sample ROWS        rows of C checked against the fp64 reference (default 8)\n"
    "  --chunk-k K, --chunk-rows R   the engine's pipelining chunks (0: its defaults)\n"
    "  --no-kernel-autotune the measured speeds alone pick the fp32 kernel\n"
    "  --cluster N          N processes, one per GPU, as a cluster over NCCL (docs/cluster.md); --split rows|k\n"
    "  --small LIST         small products (N or MxNxK, e.g. 64,256) from --submitters threads at once on GPU 0,\n"
    "                       each for --duration-s seconds (default 2) after --warmup runs per thread (default 50):\n"
    "                       one line each with products/s, Engine::run p50/p99 and the engine's host steps;\n"
    "                       --lanes N sets the engine's lanes per GPU (default: the engine's)\n"
    "  -h, --help           this text\n"
    "Exit codes: 0 done; 1 a result was wrong or a run failed; 2 bad arguments.\n";

[[noreturn]] void usage(const char* msg) {
  std::fprintf(stderr, "engine-bench: %s\n%s", msg, kUsage);
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) usage(("missing value for " + s).c_str());
      return argv[++i];
    };
    if (s == "--help" || s == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (s == "--iters")
      a.iters = std::max(1, std::atoi(next().c_str()));
    else if (s == "--warmup") {
      a.warmup = std::max(0, std::atoi(next().c_str()));
      a.warmup_given = true;
    } else if (s == "--small") {
      a.small = parse_small_shapes(next());
      if (a.small.empty()) usage("--small takes sizes N or MxNxK, comma-separated");
    } else if (s == "--submitters") {
      a.submitters = parse_counts(next());
      if (a.submitters.empty()) usage("--submitters takes counts >= 1, comma-separated");
    } else if (s == "--duration-s") {
      a.duration_s = std::atof(next().c_str());
      if (!(a.duration_s > 0)) usage("--duration-s takes seconds > 0");
    } else if (s == "--lanes") {
      a.lanes = std::atoi(next().c_str());
      if (a.lanes < 1) usage("--lanes takes a count >= 1");
    } else if (s == "--csv")
      a.csv = true;
    else if (s == "--csv-out")
      a.csv_out = next();
    else if (s == "--kernel") {
      a.kernel = parse_kernel_kind(next());
      if (!a.kernel) usage("--kernel takes pingpong or cublas");
    } else if (s == "--gpus") {
      std::string list = next();
      for (size_t pos = 0; pos <= list.size();) {
        const size_t end = std::min(list.find(',', pos), list.size());
        const int g = std::atoi(list.substr(pos, end - pos).c_str());
        if (g < 1) usage(("bad GPU count in --gpus " + list).c_str());
        a.gpus.push_back(g);
        pos = end + 1;
      }
    } else if (s == "--sample")
      a.sample = std::max(1, std::atoi(next().c_str()));
    else if (s == "--chunk-k")
      g_chunk_k = a.chunk_k = std::max(0LL, std::atoll(next().c_str()));
    else if (s == "--chunk-rows")
      g_chunk_rows = a.chunk_rows = std::max(0LL, std::atoll(next().c_str()));
    else if (s == "--no-kernel-autotune")
      g_kernel_autotune = false;
    else if (s == "--shapes") {
      a.shapes.clear();
      a.shape_splits.clear();
      a.shapes_given = true;
      std::string list = next();
      size_t pos = 0;
      while (pos < list.size()) {
        size_t end = list.find(',', pos);
        std::string one = list.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
        long long m, n, k;
        if (std::sscanf(one.c_str(), "%lldx%lldx%lld", &m, &n, &k) != 3) usage(("bad shape " + one).c_str());
        SplitMode split = SplitMode::kAuto;
        if (const size_t colon = one.find(':'); colon != std::string::npos) {
          const auto named = parse_cluster_split(one.substr(colon + 1));
          if (!named) usage(("bad split in " + one + " (:rows or :k)").c_str());
          split = *named;
        }
        a.shapes.push_back({m, n, k});
        a.shape_splits.push_back(split);
        if (end == std::string::npos) break;
        pos = end + 1;
      }
    } else if (s == "--cluster") {
      a.cluster = std::atoi(next().c_str());
      if (a.cluster < 2) usage("--cluster takes a process count of at least 2");
    } else if (s == "--split") {
      const auto named = parse_cluster_split(next());
      if (!named) usage("--split takes rows or k");
      a.cluster_split = *named;
    } else if (s == "--cluster-member")
      a.member_of = next();
    else if (s == "--cluster-name")
      a.member_name = next();
    else
      usage(("unknown argument " + s).c_str());
  }
  return a;
}

struct Config {
  std::string name;
  Engine* engine;
  SplitMode split;
  int gpus;
};

struct Result {
  std::string shape, config;
  int gpus = 1;
  std::string plan;
  double e2e_ms = 0, kernel_ms = 0, copy_in_ms = 0, reduce_ms = 0, copy_out_ms = 0;
  double tflops_e2e = 0, tflops_kernel = 0;
  double scale_e2e = 0, scale_kernel = 0;
  double max_err = 0;
};

std::unique_ptr<Engine> engine_or_die(int gpus, KReduce reduce, std::optional<KernelKind> kernel) {
  std::vector<int> devices;
  devices.reserve(std::size_t(gpus));
  for (int i = 0; i < gpus; ++i) devices.push_back(i);
  CudaEngineOptions o;
  o.chunk_k = g_chunk_k;
  o.chunk_rows = g_chunk_rows;
  o.kernel_autotune = g_kernel_autotune;
  o.devices = std::move(devices);
  o.k_reduce = reduce;
  o.default_kernel = kernel;
  o.lanes_per_device = 1;
  auto e = make_cuda_engine(o);
  if (!e.ok()) {
    std::fprintf(stderr, "engine-bench: %s\n", e.status().to_string().c_str());
    std::exit(1);
  }
  return std::move(e).value();
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  if (args.cluster > 0 || !args.member_of.empty()) {
#ifdef SGEMM_ENGINE_BENCH_CLUSTER
    if (!args.member_of.empty())
      return bench::run_cluster_member(args.member_of, args.member_name.empty() ? "member" : args.member_name);
    bench::ClusterBenchArgs c;
    c.processes = args.cluster;
    c.iters = args.iters;
    c.warmup = args.warmup;
    c.sample = args.sample;
    c.kernel = args.kernel;
    c.csv = args.csv;
    c.csv_out = args.csv_out;
    // Without --shapes: the row split and a long-K product for the K split.
    if (!args.shapes_given)
      c.shapes = {{{32768, 32768, 32768}, SplitMode::kRows}, {{4096, 4096, 131072}, SplitMode::kK}};
    for (size_t i = 0; args.shapes_given && i < args.shapes.size(); ++i)
      c.shapes.push_back(
          {args.shapes[i], args.shape_splits[i] == SplitMode::kAuto ? args.cluster_split : args.shape_splits[i]});
    return bench::run_cluster_bench(c);
#else
    std::fprintf(stderr, "engine-bench: --cluster needs a build with gRPC (SGEMM_BUILD_GRPC=ON)\n");
    return 2;
#endif
  }
  if (!args.small.empty()) {
    bench::SmallBenchArgs sb;
    sb.shapes = args.small;
    sb.submitters = args.submitters;
    sb.duration_s = args.duration_s;
    if (args.warmup_given) sb.warmup = args.warmup;
    sb.lanes = args.lanes;
    sb.kernel = args.kernel;
    sb.kernel_autotune = g_kernel_autotune;
    return bench::run_small_bench(sb);
  }
  for (SplitMode m : args.shape_splits)
    if (m != SplitMode::kAuto) usage("a shape's :rows / :k is for --cluster");
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus < 1) {
    std::fprintf(stderr, "engine-bench: no CUDA device\n");
    return 1;
  }
  std::vector<int> counts = args.gpus;
  if (counts.empty())
    for (int g = 1; g <= gpus; g *= 2) counts.push_back(g);
  for (int g : counts)
    if (g > gpus) {
      std::fprintf(stderr, "engine-bench: --gpus asks for %d GPUs, %d visible\n", g, gpus);
      return 1;
    }
  auto one = engine_or_die(1, KReduce::kReduceScatter, args.kernel);
  std::vector<std::unique_ptr<Engine>> engines;  // owns the split engines
  std::vector<Config> configs = {{"single", one.get(), SplitMode::kSingle, 1}};
  for (int g : counts) {
    if (g < 2) continue;
    engines.push_back(engine_or_die(g, KReduce::kReduceScatter, args.kernel));
    Engine* rs = engines.back().get();
    engines.push_back(engine_or_die(g, KReduce::kReduceToRoot, args.kernel));
    Engine* root = engines.back().get();
    configs.push_back({"rows", rs, SplitMode::kRows, g});
    configs.push_back({"k/reduce-scatter", rs, SplitMode::kK, g});
    configs.push_back({"k/reduce-to-root", root, SplitMode::kK, g});
    configs.push_back({"auto", rs, SplitMode::kAuto, g});
  }
  if (configs.size() == 1) std::fprintf(stderr, "engine-bench: one GPU: single-GPU figures only\n");
  const EngineInfo info = one->info();
  std::fprintf(stderr, "engine-bench: %s, kernel %s, %d GPU(s) visible\n", info.devices[0].name.c_str(),
               args.kernel ? std::string(kernel_kind_name(*args.kernel)).c_str() : "chosen per shape", gpus);

  PinnedHostPool host(0);
  std::vector<Result> results;
  bool all_ok = true;
  for (const GemmShape& s : args.shapes) {
    char shape[64];
    std::snprintf(shape, sizeof shape, "%lldx%lldx%lld", (long long)s.m, (long long)s.n, (long long)s.k);
    auto a = host.allocate(size_t(s.m * s.k) * 4), b = host.allocate(size_t(s.k * s.n) * 4),
         c = host.allocate(size_t(s.m * s.n) * 4);
    if (!a.ok() || !b.ok() || !c.ok()) {
      std::fprintf(stderr, "engine-bench: pinned host memory for %s: out of memory\n", shape);
      return 1;
    }
    fill_random(a->floats(), s.m * s.k, 1);
    fill_random(b->floats(), s.k * s.n, 2);
    const auto rows = rows_to_verify(s.m, s.n, s.k, 3, args.sample);
    double single_e2e = 0, single_kernel = 0;
    for (const Config& cfg : configs) {
      GemmJob job;
      job.request.shape = s;
      job.request.options.split = cfg.split;
      job.request.options.kernel = args.kernel;
      job.a = a->floats();
      job.b = b->floats();
      job.c = c->floats();
      std::memset(c->floats(), 0xff, size_t(s.m * s.n) * 4);  // NaN: unwritten rows fail verification
      auto first = cfg.engine->run(job);
      if (!first.ok()) {
        std::fprintf(stderr, "engine-bench: %s %s: %s\n", shape, cfg.name.c_str(), first.status().to_string().c_str());
        all_ok = false;
        continue;
      }
      const VerifyResult v =
          verify_gemm(s.m, s.n, s.k, 1.0f, a->floats(), b->floats(), 0.0f, nullptr, c->floats(), rows);
      if (!v.passed(kSgemmTolerance)) {
        std::fprintf(stderr, "engine-bench: %s %s: WRONG RESULT (max rel error %.3g at %lld,%lld); not timed\n", shape,
                     cfg.name.c_str(), v.max_rel_error, (long long)v.worst_row, (long long)v.worst_col);
        all_ok = false;
        continue;
      }
      auto runs = bench::time_engine_runs(*cfg.engine, job, args.warmup, args.iters);
      if (!runs.ok()) {
        std::fprintf(stderr, "engine-bench: %s\n", runs.status().to_string().c_str());
        return 1;
      }
      const std::string& plan = runs->plan.empty() ? first->plan_reason : runs->plan;
      Result res;
      res.shape = shape;
      res.config = cfg.name;
      res.gpus = cfg.gpus;
      res.plan = plan;
      res.e2e_ms = runs->e2e_ms;
      res.kernel_ms = runs->kernel_ms;
      res.copy_in_ms = runs->copy_in_ms;
      res.reduce_ms = runs->reduce_ms;
      res.copy_out_ms = runs->copy_out_ms;
      res.tflops_e2e = s.flops() / (res.e2e_ms * 1e-3) / 1e12;
      res.tflops_kernel = s.flops() / (res.kernel_ms * 1e-3) / 1e12;
      res.max_err = v.max_rel_error;
      if (cfg.name == "single") {
        single_e2e = res.e2e_ms;
        single_kernel = res.kernel_ms;
      }
      res.scale_e2e = single_e2e > 0 ? single_e2e / res.e2e_ms : 0;
      res.scale_kernel = single_kernel > 0 ? single_kernel / res.kernel_ms : 0;
      results.push_back(res);
      if (!args.csv)
        std::fprintf(stderr, "  %s %-18s e2e %8.2f ms  kernel %8.2f ms  [%s]\n", shape, cfg.name.c_str(), res.e2e_ms,
                     res.kernel_ms, plan.c_str());
    }
  }
  auto write_csv = [&](FILE* f) {
    std::fprintf(f,
                 "shape,config,gpus,e2e_ms,e2e_tflops,e2e_scaling,kernel_ms,kernel_tflops,kernel_scaling,copy_in_ms,"
                 "reduce_ms,copy_out_ms,max_rel_err,plan\n");
    for (const auto& r : results)
      std::fprintf(f, "%s,%s,%d,%.3f,%.2f,%.3f,%.3f,%.2f,%.3f,%.3f,%.3f,%.3f,%.3g,\"%s\"\n", r.shape.c_str(),
                   r.config.c_str(), r.gpus, r.e2e_ms, r.tflops_e2e, r.scale_e2e, r.kernel_ms, r.tflops_kernel,
                   r.scale_kernel, r.copy_in_ms, r.reduce_ms, r.copy_out_ms, r.max_err, r.plan.c_str());
  };
  if (!args.csv_out.empty()) {
    if (FILE* f = std::fopen(args.csv_out.c_str(), "w")) {
      write_csv(f);
      std::fclose(f);
    } else {
      std::fprintf(stderr, "engine-bench: cannot write %s\n", args.csv_out.c_str());
      all_ok = false;
    }
  }
  if (args.csv) {
    write_csv(stdout);
  } else {
    std::printf("%-20s %-18s %4s %10s %8s %7s %10s %8s %7s %9s %9s %9s\n", "shape", "strategy", "gpus", "e2e ms",
                "TFLOP/s", "scale", "kernel ms", "TFLOP/s", "scale", "in ms", "nccl ms", "out ms");
    for (const auto& r : results)
      std::printf("%-20s %-18s %4d %10.2f %8.2f %6.2fx %10.2f %8.2f %6.2fx %9.2f %9.2f %9.2f\n", r.shape.c_str(),
                  r.config.c_str(), r.gpus, r.e2e_ms, r.tflops_e2e, r.scale_e2e, r.kernel_ms, r.tflops_kernel,
                  r.scale_kernel, r.copy_in_ms, r.reduce_ms, r.copy_out_ms);
    std::printf(
        "(medians of %d runs after %d warm-up; e2e = Engine::run wall time, pinned host in -> pinned host out;"
        " kernel = slowest GPU's summed kernel time; in/nccl/out = slowest GPU's summed copy-in, NCCL, copy-out"
        " time, which overlap)\n",
        args.iters, args.warmup);
  }
  return all_ok ? 0 : 1;
}
