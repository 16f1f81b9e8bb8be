// sgemm-bench: verify first, warm up, then time each SGEMM backend with CUDA
// events (median of many runs), rotating several input buffer sets so that L2
// is not left warm by the previous run. Prints a table of median ms, TFLOP/s,
// % of cuBLAS and the error against cuBLAS (max |c - c_cublas| / max |c_cublas|)
// and against the fp64 reference on sampled rows (common/reference_gemm.h).
//
//   sgemm-bench [--shapes 1024,4096,8192x8192x1024] [--kernels pingpong,cublas,tf32,fp32x3]
//               [--runs 30] [--warmup 5] [--csv FILE] [--variants] [--variant I] [--ref-rows 8]
//               [--fp32x3-variants] [--accuracy uniform,wide-exponent,cancelling]
//               [--speed-table FILE --commit SHA] [--engine-layout] [--speeds FILE]
// --variants times every ping-pong tile configuration as well (for tuning);
// --variant I times configuration I in place of the one the kernel would pick;
// --fp32x3-variants times every fp32x3 schedule/tile variant (each checked against fp64).
// tf32 (cuBLAS on TF32 tensor cores) is checked against the tf32 tolerance; every other
// kernel against the fp32 one. fp32x3 times include its split pass (the whole call).
// Where cuBLAS and the ping-pong pick both ran on a shape, a line says which of the two the
// engine's kernel-choice table (server/planner/kernel_choice.h) runs there by default and how
// it compares with the faster of them; the worst such figure closes the table.
// Each shape closes with the fp32 default: the kernel select_kernel (the engine's one
// choice, server/planner/kernel_choice.h) runs for an fp32 request naming no kernel, its
// concrete name, and its time as % of cuBLAS SGEMM (needs pingpong, cublas and fp32x3).
// --accuracy times nothing: for each shape and distribution it prints every kernel's
// componentwise error cw = max |c - ref| / (|A||B|) against cuBLAS DGEMM of the same
// inputs (kernels/gemm_accuracy.h), and its ratio to cuBLAS SGEMM's cw: the fp32
// contract holds where the fp32 default, when it is not FFMA, has a ratio <= 1.
// --speed-table writes the rows the engine's kernel choice decides from
// (server/planner/kernel_speeds.h): for each shape, the rate of each fp32 kernel's own
// pick (ping-pong, cuBLAS, fp32x3) with A and B laid out as the engine stages them (rows
// padded to 16 bytes). `--shapes classes` measures every shape class's probes
// (server/planner/kernel_choice.h). --engine-layout lays A and B out that way without
// writing the table; --speeds FILE makes the "engine default" lines read FILE (a speed
// table) instead of the built-in one, to try a table on shapes it does not hold.
// Exit status 1 if any verification fails.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/fp32x3_slices.h"
#include "common/reference_gemm.h"
#include "kernels/fp32x3_sgemm.h"
#include "kernels/gemm_accuracy.h"
#include "kernels/gemm_backend.h"
#include "kernels/pingpong_sgemm.h"
#include "server/planner/kernel_choice.h"

namespace {

using namespace sgemm;

#define BENCH_CHECK(expr)                                                                                  \
  do {                                                                                                     \
    cudaError_t e_ = (expr);                                                                               \
    if (e_ != cudaSuccess) {                                                                               \
      std::fprintf(stderr, "%s failed: %s at %s:%d\n", #expr, cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(2);                                                                                        \
    }                                                                                                      \
  } while (0)

void check_status(const Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, s.to_string().c_str());
    std::exit(2);
  }
}

struct Options {
  std::vector<GemmShape> shapes;            // default: the list
  std::vector<KernelKind> kernels;          // default: all
  int runs = 30;                            // timed runs per kernel and shape (median reported)
  int warmup = 5;                           // untimed runs first
  std::string csv;                          // also write rows here
  bool variants = false;                    // time every ping-pong variant too
  int ref_rows = 8;                         // rows checked against the fp64 reference
  int only_variant = -1;                    // >= 0: time this ping-pong variant instead of the picked one
  bool fp32x3_variants = false;             // time every fp32x3 variant too
  std::vector<int64_t> fp32x3_slices;       // also fp32x3 with K cut into each of these slice counts
  std::vector<std::string> variant_match;   // time the ping-pong variants whose names contain one of these
  int64_t pad_ab = 0;                       // lda = k + pad_ab, ldb = n + pad_ab (odd: rows TMA cannot read)
  std::vector<InputDistribution> accuracy;  // non-empty: the accuracy table instead of timings
  std::string speed_table;                  // also write the FFMA kernels' rates here (kernel_speeds.h)
  std::string commit = "unknown";           // the commit the speed table's rows name
  bool engine_layout = false;               // lda = pad4(k), ldb = pad4(n), as the engine stages A and B
  std::string speeds;                       // the speed table the "engine default" lines read (default: built in)
};

// Tolerances of the checks, by kernel: tf32 rounds its inputs to 11 significant bits.
constexpr double kTf32Tolerance = 4e-3;          // against fp64, normalised measure
constexpr double kTf32VsCublasTolerance = 1e-2;  // max |c - c_cublas| / max |c_cublas|

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(sep, start);
    if (end == std::string::npos) end = s.size();
    if (end > start) out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

GemmShape parse_shape(const std::string& s) {
  auto parts = split(s, 'x');
  if (parts.size() == 1) {
    const int64_t v = std::stoll(parts[0]);
    return {v, v, v};
  }
  if (parts.size() == 3) return {std::stoll(parts[0]), std::stoll(parts[1]), std::stoll(parts[2])};
  std::fprintf(stderr, "bad shape '%s' (use N or MxNxK)\n", s.c_str());
  std::exit(2);
}

constexpr const char* kUsage =
    "usage: sgemm-bench [--shapes 1024,MxNxK,...] [--kernels pingpong,cublas,tf32,fp32x3] [--runs N] [--warmup N]\n"
    "                   [--csv FILE] [--ref-rows N] [--pad-ab P] [--variants] [--variant I] [--variant-match S,...]\n"
    "                   [--fp32x3-variants] [--fp32x3-slices N,...] [--accuracy uniform,wide-exponent,cancelling]\n"
    "                   [--speed-table FILE --commit SHA] [--engine-layout] [--speeds FILE]\n"
    "\n"
    "Times each kernel on one GPU against cuBLAS: every result is checked first (against an fp64 reference on\n"
    "--ref-rows rows, and against cuBLAS), then timed with CUDA events (median of --runs after --warmup), with cold\n"
    "L2 between runs. Prints TFLOP/s and % of cuBLAS per shape and kernel.\n"
    "  --shapes LIST      N (square) or MxNxK, comma-separated (default: 21 square, long-K and thin shapes);\n"
    "                     'classes': the probes of every shape class of the engine's kernel choice\n"
    "  --kernels LIST     pingpong, cublas, tf32, fp32x3 (default: every GPU kernel this build has)\n"
    "  --runs N           timed runs per shape and kernel (default 30)\n"
    "  --warmup N         untimed runs first (default 5)\n"
    "  --csv FILE         also write the rows as CSV\n"
    "  --ref-rows N       rows checked against the fp64 reference (default 8; 0: against cuBLAS only)\n"
    "  --pad-ab P         lda = k + P, ldb = n + P (odd P: rows TMA cannot read)\n"
    "  --variants         also time every compiled ping-pong tile variant (SGEMM_KERNEL_TUNING builds have all)\n"
    "  --variant I        time ping-pong variant I instead of the picked one\n"
    "  --variant-match S  time the variants whose names contain one of S,...\n"
    "  --fp32x3-variants  also time every fp32x3 variant\n"
    "  --fp32x3-slices L  also fp32x3 with K cut into each of these slice counts (timings and --accuracy)\n"
    "  --accuracy LIST    time nothing: each kernel's error (cw against fp64) on these input distributions, and\n"
    "                     its ratio to cuBLAS SGEMM's (the fp32 contract)\n"
    "  --speed-table FILE write each fp32 kernel's rate per shape (FFMA, fp32x3) as\n"
    "                     server/planner/kernel_speeds.csv holds them (A and B laid out as the engine\n"
    "                     stages them: rows padded to 16 bytes)\n"
    "  --commit SHA       the commit the speed table's rows name (the tree this build is from)\n"
    "  --engine-layout    A and B laid out as the engine stages them (implied by --speed-table)\n"
    "  --speeds FILE      the speed table the engine-default lines read (default: the built-in one)\n"
    "  -h, --help         this text\n"
    "Exit codes: 0 every check passed; 1 a result failed its check; 2 bad arguments, a CUDA or engine error, or\n"
    "the CSV file cannot be written.\n";

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--shapes") {
      for (auto& s : split(next(), ','))
        if (s == "classes") {
          for (const KernelShapeClass& c : kernel_shape_classes())
            for (const GemmShape& p : c.probes)
              if (std::find(o.shapes.begin(), o.shapes.end(), p) == o.shapes.end()) o.shapes.push_back(p);
        } else {
          o.shapes.push_back(parse_shape(s));
        }
    } else if (a == "--kernels") {
      for (auto& s : split(next(), ',')) {
        const auto k = parse_kernel_kind(s);
        if (!k || *k == KernelKind::kOpenblas) {
          std::fprintf(stderr, "unknown GPU kernel '%s'\n", s.c_str());
          std::exit(2);
        }
        o.kernels.push_back(*k);
      }
    } else if (a == "--runs") {
      o.runs = std::max(1, std::stoi(next()));
    } else if (a == "--warmup") {
      o.warmup = std::max(0, std::stoi(next()));
    } else if (a == "--csv") {
      o.csv = next();
    } else if (a == "--variants") {
      o.variants = true;
    } else if (a == "--variant") {
      o.only_variant = std::stoi(next());
    } else if (a == "--variant-match") {
      o.variant_match = split(next(), ',');
    } else if (a == "--pad-ab") {
      o.pad_ab = std::max<int64_t>(0, std::stoll(next()));
    } else if (a == "--fp32x3-variants") {
      o.fp32x3_variants = true;
    } else if (a == "--fp32x3-slices") {
      for (const std::string& v : split(next(), ',')) o.fp32x3_slices.push_back(std::stoll(v));
    } else if (a == "--accuracy") {
      for (auto& d : split(next(), ',')) {
        bool found = false;
        for (InputDistribution x :
             {InputDistribution::kUniform, InputDistribution::kWideExponent, InputDistribution::kCancelling})
          if (d == input_distribution_name(x)) {
            o.accuracy.push_back(x);
            found = true;
          }
        if (!found) {
          std::fprintf(stderr, "unknown distribution '%s' (uniform, wide-exponent, cancelling)\n", d.c_str());
          std::exit(2);
        }
      }
    } else if (a == "--speed-table") {
      o.speed_table = next();
      o.engine_layout = true;
    } else if (a == "--engine-layout") {
      o.engine_layout = true;
    } else if (a == "--speeds") {
      o.speeds = next();
    } else if (a == "--commit") {
      o.commit = next();
    } else if (a == "--ref-rows") {
      o.ref_rows = std::max(0, std::stoi(next()));
    } else {
      const bool help = a == "--help" || a == "-h";
      if (!help) std::fprintf(stderr, "sgemm-bench: unknown argument '%s'\n", a.c_str());
      std::fputs(kUsage, help ? stdout : stderr);
      std::exit(help ? 0 : 2);
    }
  }
  if (o.shapes.empty())
    o.shapes = {{1024, 1024, 1024},
                {2048, 2048, 2048},
                {4096, 4096, 4096},
                {8192, 8192, 8192},
                {8192, 8192, 1024},
                {1024, 1024, 16384},
                {4095, 4095, 4095},
                {8191, 8193, 1000},
                // Thin classes (the engine's kernel-choice table, server/planner/kernel_choice.cc):
                {1, 4096, 4096},
                {4096, 1, 4096},
                {1, 8192, 8192},
                {8192, 1, 8192},
                {8192, 32, 8192},
                {8192, 64, 8192},
                {8192, 128, 8192},
                {32, 8192, 8192},
                {128, 8192, 8192},
                {8192, 64, 1024},
                // n <= 64 at half the size, and n = 32 with K % 4 != 0 (A rows not 16-byte aligned:
                // the transposed tile instead of the K-major one).
                {4096, 32, 4096},
                {4096, 64, 4096},
                {8192, 32, 8191}};
  if (o.kernels.empty()) o.kernels = gpu_kernel_kinds();
  if (o.pad_ab > 0 && o.ref_rows > 0) {
    std::fprintf(stderr,
                 "--pad-ab: the fp64 reference reads dense inputs; using --ref-rows 0 (checked against cuBLAS)\n");
    o.ref_rows = 0;
  }
  return o;
}

struct BufferSet {
  float *a = nullptr, *b = nullptr, *c = nullptr;
};

struct Row {
  std::string shape, kernel, variant;
  int64_t m, n, k;
  double median_ms, min_ms, tflops, pct_cublas, err_vs_cublas, err_vs_fp64;
  bool ok;
  bool own_pick;  // the backend's own choice of variant and slices, as the engine runs it
};

std::string shape_name(const GemmShape& s) {
  if (s.m == s.n && s.n == s.k) return std::to_string(s.m);
  return std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k);
}

// The kernel an fp32 request naming no kernel runs on `s` (the engine's select_kernel,
// ping-pong its configured FFMA default).
KernelKind fp32_default(const GemmShape& s, const cudaDeviceProp& prop, const std::vector<KernelKind>& available,
                        const KernelSpeeds* speeds = nullptr) {
  KernelQuery q;
  q.speeds = speeds;
  q.shape = s;
  q.available = available;
  q.sm_count = prop.multiProcessorCount;
  q.device = prop.name;
  auto sel = select_kernel(q);
  return sel.ok() ? sel->kind : KernelKind::kCublas;
}

// --accuracy: cw of every kernel on each shape and distribution, and its ratio to cuBLAS SGEMM's.
int run_accuracy(const Options& opt, const cudaDeviceProp& prop,
                 std::map<KernelKind, std::unique_ptr<GemmBackend>>& backends, GemmBackend* cublas,
                 cudaStream_t stream) {
  std::vector<KernelKind> available = {KernelKind::kCublas};
  for (auto& [k, be] : backends) available.push_back(k);
  std::printf("%-18s %-14s %-10s %-52s %12s %10s\n", "shape", "inputs", "kernel", "concrete kernel", "cw", "cw/cuBLAS");
  bool ok = true;
  for (const GemmShape& s0 : opt.shapes)
    for (InputDistribution d : opt.accuracy) {
      GemmShape s = s0;
      if (d == InputDistribution::kCancelling && s.k % 2) ++s.k;
      std::vector<float> ha, hb;
      fill_inputs(d, s.m, s.n, s.k, 2026 + uint64_t(s.k), ha, hb);
      auto probe = GemmAccuracyProbe::create(s, ha.data(), hb.data());
      check_status(probe.status(), "accuracy probe");
      float *a = nullptr, *b = nullptr, *c = nullptr;
      const size_t na = size_t(s.m * s.k), nb = size_t(s.k * s.n), nc = size_t(s.m * s.n);
      BENCH_CHECK(cudaMalloc(reinterpret_cast<void**>(&a), na * 4));
      BENCH_CHECK(cudaMalloc(reinterpret_cast<void**>(&b), nb * 4));
      BENCH_CHECK(cudaMalloc(reinterpret_cast<void**>(&c), nc * 4));
      BENCH_CHECK(cudaMemcpy(a, ha.data(), na * 4, cudaMemcpyHostToDevice));
      BENCH_CHECK(cudaMemcpy(b, hb.data(), nb * 4, cudaMemcpyHostToDevice));
      const GemmArgs g = dense_gemm_args(s, 1.0f, a, b, 0.0f, c);
      std::vector<float> hc(nc);
      std::map<KernelKind, double> cw;
      std::map<KernelKind, std::string> concrete;
      for (KernelKind k : available) {
        GemmBackend* be = k == KernelKind::kCublas ? cublas : backends.at(k).get();
        if (!be->can_implement(g).ok()) continue;
        const size_t ws_bytes = be->workspace_bytes(g);
        void* ws = nullptr;
        if (ws_bytes) BENCH_CHECK(cudaMalloc(&ws, ws_bytes));
        BENCH_CHECK(cudaMemsetAsync(c, 0xff, nc * 4, stream));
        check_status(be->run(g, ws, ws_bytes, stream), "accuracy run");
        BENCH_CHECK(cudaStreamSynchronize(stream));
        BENCH_CHECK(cudaMemcpy(hc.data(), c, nc * 4, cudaMemcpyDeviceToHost));
        if (ws) BENCH_CHECK(cudaFree(ws));
        cw[k] = (*probe)->componentwise_error(hc.data());
        concrete[k] = be->kernel_name(g);
      }
      const double base = cw.at(KernelKind::kCublas);
      auto line = [&](const char* label, KernelKind k) {
        std::printf("%-18s %-14s %-10s %-52s %12.3e %10.3f\n", shape_name(s).c_str(), input_distribution_name(d), label,
                    concrete[k].c_str(), cw[k], base > 0 ? cw[k] / base : NAN);
      };
      for (auto& [k, e] : cw) line(std::string(kernel_kind_name(k)).c_str(), k);
      for (int64_t slices : backends.count(KernelKind::kFp32x3) ? opt.fp32x3_slices : std::vector<int64_t>{}) {
        const size_t ws_bytes = fp32x3_workspace_bytes(s, slices);
        void* ws = nullptr;
        BENCH_CHECK(cudaMalloc(&ws, ws_bytes));
        BENCH_CHECK(cudaMemsetAsync(c, 0xff, nc * 4, stream));
        check_status(fp32x3_sgemm_sliced(g, slices, ws, ws_bytes, stream), "accuracy run");
        BENCH_CHECK(cudaStreamSynchronize(stream));
        BENCH_CHECK(cudaMemcpy(hc.data(), c, nc * 4, cudaMemcpyDeviceToHost));
        BENCH_CHECK(cudaFree(ws));
        const double e = (*probe)->componentwise_error(hc.data());
        const std::string label = "slices=" + std::to_string(fp32x3_slices_of_count(s, slices).count);
        std::printf("%-18s %-14s %-10s %-52s %12.3e %10.3f\n", shape_name(s).c_str(), input_distribution_name(d),
                    "fp32x3", label.c_str(), e, base > 0 ? e / base : NAN);
      }
      const KernelKind def = fp32_default(s, prop, available);
      line("fp32", def);
      // FFMA is SGEMM's own arithmetic (its summation order may differ from cuBLAS's); the
      // contract is a question only where a tensor-core scheme serves fp32.
      if (kernel_arithmetic(def) != ArithmeticClass::kFfma && cw[def] > base) {
        std::printf("%-18s %-14s fp32 contract BROKEN: the default's cw exceeds cuBLAS SGEMM's\n",
                    shape_name(s).c_str(), input_distribution_name(d));
        ok = false;
      }
      std::fflush(stdout);
      cudaFree(a);
      cudaFree(b);
      cudaFree(c);
    }
  std::printf(ok ? "fp32 contract kept on every case\n" : "SOME CASES BREAK THE fp32 CONTRACT\n");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  int device = 0;
  BENCH_CHECK(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  BENCH_CHECK(cudaGetDeviceProperties(&prop, device));
  std::printf("device: %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
  // The speed table the engine-default lines read.
  KernelSpeeds speeds = KernelSpeeds::built_in();
  std::string speeds_name = "built-in speeds";
  if (!opt.speeds.empty()) {
    std::ifstream in(opt.speeds);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    StatusOr<KernelSpeeds> read = KernelSpeeds::parse(text);
    if (!in || !read.ok()) {
      std::fprintf(stderr, "--speeds %s: %s\n", opt.speeds.c_str(),
                   in ? read.status().message().c_str() : "cannot read the file");
      return 2;
    }
    speeds = std::move(*read);
    speeds_name = "speeds of " + opt.speeds;
  }

  auto cublas_or = make_gemm_backend(KernelKind::kCublas);
  if (!cublas_or.ok()) check_status(cublas_or.status(), "cublas backend");
  std::unique_ptr<GemmBackend> cublas = std::move(cublas_or).value();
  std::map<KernelKind, std::unique_ptr<GemmBackend>> backends;
  for (KernelKind k : opt.kernels) {
    if (k == KernelKind::kCublas || backends.count(k)) continue;
    auto b = make_gemm_backend(k);
    if (!b.ok()) check_status(b.status(), std::string(kernel_kind_name(k)).c_str());
    backends[k] = std::move(b).value();
  }
  if ((opt.variants || !opt.variant_match.empty()) && !backends.count(KernelKind::kPingpong)) {
    auto b = make_gemm_backend(KernelKind::kPingpong);
    if (!b.ok()) check_status(b.status(), "pingpong backend");
    backends[KernelKind::kPingpong] = std::move(b).value();
  }
  // Workspace of every fp32x3 run, the auto pick's and the variants' (the caller owns it).
  void* fp32x3_ws = nullptr;
  size_t fp32x3_ws_bytes = 0;
  if (opt.fp32x3_variants || backends.count(KernelKind::kFp32x3)) {
    for (const GemmShape& s : opt.shapes) {
      fp32x3_ws_bytes = std::max(fp32x3_ws_bytes, fp32x3_workspace_bytes(s));
      for (int64_t slices : opt.fp32x3_slices)
        fp32x3_ws_bytes = std::max(fp32x3_ws_bytes, fp32x3_workspace_bytes(s, slices));
    }
    BENCH_CHECK(cudaMalloc(&fp32x3_ws, fp32x3_ws_bytes));
  }

  cudaStream_t stream;
  BENCH_CHECK(cudaStreamCreate(&stream));
  if (!opt.accuracy.empty()) return run_accuracy(opt, prop, backends, cublas.get(), stream);
  cudaEvent_t ev0, ev1;
  BENCH_CHECK(cudaEventCreate(&ev0));
  BENCH_CHECK(cudaEventCreate(&ev1));

  std::vector<Row> rows;
  bool all_ok = true;
  // The engine's default against the better of cuBLAS and the ping-pong pick: the worst shape.
  double worst_default_pct = INFINITY, worst_fp32_pct = INFINITY;
  std::string worst_default_shape, worst_fp32_shape;
  std::printf("%-16s %-9s %-30s %10s %9s %9s %12s %12s %s\n", "shape", "kernel", "variant", "median_ms", "TFLOP/s",
              "%cuBLAS", "err_vs_cublas", "err_vs_fp64", "check");

  for (const GemmShape& s : opt.shapes) {
    // With --pad-ab, A and B have leading dimensions k + pad and n + pad (C stays dense).
    // With --speed-table, as the engine stages them: rows padded to 4 floats.
    const int64_t lda = opt.engine_layout ? (s.k + 3) / 4 * 4 : s.k + opt.pad_ab;
    const int64_t ldb = opt.engine_layout ? (s.n + 3) / 4 * 4 : s.n + opt.pad_ab;
    const size_t na = size_t(s.m * lda), nb = size_t(s.k * ldb), nc = size_t(s.m * s.n);
    const size_t set_bytes = (na + nb + nc) * sizeof(float);
    // Enough sets that their total is well past the L2 size; at least two.
    int sets = int(std::clamp<size_t>((size_t(4) * prop.l2CacheSize + set_bytes - 1) / set_bytes, 2, 16));
    while (sets > 2 && size_t(sets) * set_bytes > (size_t(8) << 30)) --sets;
    std::vector<BufferSet> bufs(sets);
    std::vector<float> ha(na), hb(nb);
    for (int i = 0; i < sets; ++i) {
      BENCH_CHECK(cudaMalloc(reinterpret_cast<void**>(&bufs[i].a), na * 4));
      BENCH_CHECK(cudaMalloc(reinterpret_cast<void**>(&bufs[i].b), nb * 4));
      BENCH_CHECK(cudaMalloc(reinterpret_cast<void**>(&bufs[i].c), nc * 4));
      if (i < 2) {  // two distinct random sets; the rest are copies (their addresses differ, which is what matters)
        fill_random(ha, 1000 + 2 * i);
        fill_random(hb, 1001 + 2 * i);
      }
      BENCH_CHECK(cudaMemcpy(bufs[i].a, ha.data(), na * 4, cudaMemcpyHostToDevice));
      BENCH_CHECK(cudaMemcpy(bufs[i].b, hb.data(), nb * 4, cudaMemcpyHostToDevice));
    }
    // Host copies of set 0's inputs for the fp64 reference.
    fill_random(ha, 1000);
    fill_random(hb, 1001);
    // The fp64 reference reads dense inputs: padded ones are checked against cuBLAS only.
    const std::vector<int64_t> ref_rows = opt.ref_rows > 0 && lda == s.k && ldb == s.n
                                              ? rows_to_verify(s.m, s.n, s.k, 7, std::min<int64_t>(opt.ref_rows, s.m))
                                              : std::vector<int64_t>{};

    auto args_for = [&](int set) {
      GemmArgs g = dense_gemm_args(s, 1.0f, bufs[set].a, bufs[set].b, 0.0f, bufs[set].c);
      g.lda = lda;
      g.ldb = ldb;
      return g;
    };

    // cuBLAS result on set 0: the yardstick for every kernel's error.
    std::vector<float> c_ref(nc), c_got(nc);
    check_status(cublas->run(args_for(0), nullptr, 0, stream), "cublas run");
    BENCH_CHECK(cudaStreamSynchronize(stream));
    BENCH_CHECK(cudaMemcpy(c_ref.data(), bufs[0].c, nc * 4, cudaMemcpyDeviceToHost));
    double ref_max = 0;
    for (float v : c_ref) ref_max = std::max(ref_max, double(std::fabs(v)));

    struct Job {
      KernelKind kind;
      int variant;         // -1: the backend's own choice
      int64_t slices = 0;  // fp32x3: > 0 cuts K into this many slices
    };
    std::vector<Job> jobs;
    // cuBLAS first so that "% of cuBLAS" is known for the rest.
    for (KernelKind k : opt.kernels)
      if (k == KernelKind::kCublas) jobs.push_back({k, -1});
    for (KernelKind k : opt.kernels)
      if (k != KernelKind::kCublas) jobs.push_back({k, k == KernelKind::kPingpong ? opt.only_variant : -1});
    if (opt.variants)
      for (int v = 0; v < pingpong_variant_count(); ++v) jobs.push_back({KernelKind::kPingpong, v});
    for (int v = 0; !opt.variants && v < pingpong_variant_count(); ++v)
      for (const std::string& m : opt.variant_match)
        if (pingpong_variant_name(v).find(m) != std::string_view::npos) {
          jobs.push_back({KernelKind::kPingpong, v});
          break;
        }
    if (opt.fp32x3_variants)
      for (int v = 0; v < fp32x3_variant_count(); ++v) jobs.push_back({KernelKind::kFp32x3, v});
    if (backends.count(KernelKind::kFp32x3))
      for (int64_t slices : opt.fp32x3_slices) jobs.push_back({KernelKind::kFp32x3, -1, slices});
    if (opt.fp32x3_variants) {
      // The split pass alone (its share of every fp32x3 time): median of the timed runs.
      for (int i = 0; i < opt.warmup; ++i)
        check_status(fp32x3_split_operands(args_for(0), fp32x3_ws, fp32x3_ws_bytes, stream), "split");
      std::vector<float> t(opt.runs);
      for (int i = 0; i < opt.runs; ++i) {
        BENCH_CHECK(cudaEventRecord(ev0, stream));
        check_status(fp32x3_split_operands(args_for((i + 1) % sets), fp32x3_ws, fp32x3_ws_bytes, stream), "split");
        BENCH_CHECK(cudaEventRecord(ev1, stream));
        BENCH_CHECK(cudaEventSynchronize(ev1));
        BENCH_CHECK(cudaEventElapsedTime(&t[i], ev0, ev1));
      }
      std::sort(t.begin(), t.end());
      const double bytes = 12.0 * double(s.k) * double(s.m + s.n);  // read 4, write 8 per element of A and B
      std::printf("%-16s %-9s %-30s %10.4f   (split pass alone: %.0f GB/s of reads + writes)\n", shape_name(s).c_str(),
                  "fp32x3", "split-only", t[opt.runs / 2], bytes / (t[opt.runs / 2] * 1e-3) / 1e9);
    }

    double cublas_ms = 0, pingpong_auto_ms = 0, fp32x3_auto_ms = 0;
    for (const Job& job : jobs) {
      const bool is_fp32x3 = job.kind == KernelKind::kFp32x3, is_pingpong = job.kind == KernelKind::kPingpong;
      GemmBackend* be = job.kind == KernelKind::kCublas ? cublas.get() : backends.at(job.kind).get();
      // The caller owns every kernel's scratch (split-K slices, split operands),
      // as the engine's lanes do.
      size_t ws_bytes = be->workspace_bytes(args_for(0));
      if (job.variant >= 0 && is_pingpong) ws_bytes = pingpong_variant_workspace_bytes(s, job.variant);
      void* ws = nullptr;
      if (ws_bytes && !is_fp32x3) BENCH_CHECK(cudaMalloc(&ws, ws_bytes));
      if (is_fp32x3) {
        ws = fp32x3_ws;
        ws_bytes = fp32x3_ws_bytes;
      }
      auto launch = [&](int set) {
        const GemmArgs g = args_for(set);
        if (job.variant >= 0 && is_pingpong) return pingpong_sgemm_variant(g, job.variant, ws, ws_bytes, stream);
        if (job.variant >= 0 && is_fp32x3) return fp32x3_sgemm_variant(g, job.variant, ws, ws_bytes, stream);
        if (job.slices > 0) return fp32x3_sgemm_sliced(g, job.slices, ws, ws_bytes, stream);
        return be->run(g, ws, ws_bytes, stream);
      };
      std::string variant_name = "-";
      if (is_pingpong)
        variant_name = std::string(
            pingpong_variant_name(job.variant >= 0 ? job.variant : pingpong_pick_variant(s, prop.multiProcessorCount)));
      if (is_fp32x3)
        variant_name =
            std::string(fp32x3_variant_name(job.variant >= 0 ? job.variant : fp32x3_pick_variant(args_for(0))));
      if (job.variant < 0 && (is_pingpong || is_fp32x3)) variant_name = "auto:" + variant_name;
      if (is_fp32x3 && job.variant < 0)
        variant_name += "_slices" + std::to_string(job.slices > 0 ? fp32x3_slices_of_count(s, job.slices).count
                                                                  : fp32x3_k_slices(s));
      const bool is_tf32 = job.kind == KernelKind::kTf32;

      // Verify first: poison C, run once on set 0. A variant that cannot run this layout is skipped.
      BENCH_CHECK(cudaMemsetAsync(bufs[0].c, 0xff, nc * 4, stream));  // NaN pattern
      const Status first = launch(0);
      if (!first.ok() && first.code() == StatusCode::kInvalidArgument && job.variant >= 0) {
        std::printf("%-16s %-9s %-30s n/a: %s\n", shape_name(s).c_str(),
                    std::string(kernel_kind_name(job.kind)).c_str(), variant_name.c_str(), first.message().c_str());
        continue;
      }
      check_status(first, "run");
      BENCH_CHECK(cudaStreamSynchronize(stream));
      BENCH_CHECK(cudaMemcpy(c_got.data(), bufs[0].c, nc * 4, cudaMemcpyDeviceToHost));
      double max_diff = 0;
      bool finite = true;
      for (size_t i = 0; i < nc; ++i) {
        const double d = std::fabs(double(c_got[i]) - double(c_ref[i]));
        if (!std::isfinite(c_got[i])) finite = false;
        max_diff = std::max(max_diff, d);
      }
      const double err_cublas = finite ? max_diff / std::max(ref_max, 1e-30) : INFINITY;
      double err_fp64 = NAN;
      bool ok = finite && err_cublas < (is_tf32 ? kTf32VsCublasTolerance : 1e-4);
      if (!ref_rows.empty() && (job.variant < 0 || is_fp32x3)) {
        const VerifyResult vr =
            verify_gemm(s.m, s.n, s.k, 1.0f, ha.data(), hb.data(), 0.0f, nullptr, c_got.data(), ref_rows);
        err_fp64 = vr.max_rel_error;
        ok = ok && vr.passed(is_tf32 ? kTf32Tolerance : kSgemmTolerance);
      }
      all_ok = all_ok && ok;

      for (int i = 0; i < opt.warmup; ++i) check_status(launch(i % sets), "warm-up run");
      std::vector<float> times(opt.runs);
      for (int i = 0; i < opt.runs; ++i) {
        const int set = (i + 1) % sets;
        BENCH_CHECK(cudaEventRecord(ev0, stream));
        check_status(launch(set), "timed run");
        BENCH_CHECK(cudaEventRecord(ev1, stream));
        BENCH_CHECK(cudaEventSynchronize(ev1));
        BENCH_CHECK(cudaEventElapsedTime(&times[i], ev0, ev1));
      }
      std::vector<float> sorted = times;
      std::sort(sorted.begin(), sorted.end());
      const double median =
          opt.runs % 2 ? sorted[opt.runs / 2] : 0.5 * (sorted[opt.runs / 2 - 1] + sorted[opt.runs / 2]);
      if (job.kind == KernelKind::kCublas) cublas_ms = median;
      if (is_pingpong && job.variant < 0) pingpong_auto_ms = median;
      if (is_fp32x3 && job.variant < 0 && job.slices == 0) fp32x3_auto_ms = median;
      const double tflops = s.flops() / (median * 1e-3) / 1e12;
      const double pct = cublas_ms > 0 ? 100.0 * cublas_ms / median : NAN;
      Row r{shape_name(s),
            std::string(kernel_kind_name(job.kind)),
            variant_name,
            s.m,
            s.n,
            s.k,
            median,
            sorted[0],
            tflops,
            pct,
            err_cublas,
            err_fp64,
            ok,
            job.variant < 0 && job.slices == 0};
      rows.push_back(r);
      std::printf("%-16s %-9s %-30s %10.4f %9.2f %8.1f%% %12.3e %12.3e %s\n", r.shape.c_str(), r.kernel.c_str(),
                  r.variant.c_str(), r.median_ms, r.tflops, r.pct_cublas, r.err_vs_cublas, r.err_vs_fp64,
                  ok ? "ok" : "FAIL");
      std::fflush(stdout);
      if (ws && !is_fp32x3) BENCH_CHECK(cudaFree(ws));
    }
    if (cublas_ms > 0 && pingpong_auto_ms > 0 && fp32x3_auto_ms > 0) {
      // An fp32 request naming no kernel: the engine's select_kernel.
      const KernelKind def =
          fp32_default(s, prop, {KernelKind::kPingpong, KernelKind::kCublas, KernelKind::kFp32x3}, &speeds);
      const double def_ms = def == KernelKind::kFp32x3   ? fp32x3_auto_ms
                            : def == KernelKind::kCublas ? cublas_ms
                                                         : pingpong_auto_ms;
      // The fastest kernel that keeps the fp32 contract on this product (select_kernel's candidates).
      double best_ms = fp32_needs_cublas(s) ? cublas_ms : std::min(cublas_ms, pingpong_auto_ms);
      if (fp32x3_keeps_fp32_contract(s, prop.multiProcessorCount)) best_ms = std::min(best_ms, fp32x3_auto_ms);
      GemmBackend* def_be = def == KernelKind::kCublas ? cublas.get() : backends.at(def).get();
      const double pct = 100.0 * best_ms / def_ms;
      std::printf(
          "%-16s fp32 default: %s (%s) %.2f TFLOP/s, %.2fx cuBLAS SGEMM, %.1f%% of the fastest kernel that keeps "
          "the contract\n",
          shape_name(s).c_str(), std::string(kernel_kind_name(def)).c_str(), def_be->kernel_name(args_for(0)).c_str(),
          s.flops() / (def_ms * 1e-3) / 1e12, cublas_ms / def_ms, pct);
      if (pct < worst_fp32_pct) {
        worst_fp32_pct = pct;
        worst_fp32_shape = shape_name(s);
      }
    }
    if (cublas_ms > 0 && pingpong_auto_ms > 0) {
      // What the engine runs on this shape when the request names no kernel (ping-pong is
      // its configured default; the table may send the shape to cuBLAS).
      const KernelKind chosen = choose_kernel(s, KernelKind::kPingpong, {KernelKind::kPingpong, KernelKind::kCublas},
                                              {prop.name, prop.multiProcessorCount, &speeds})
                                    .kind;
      const double chosen_ms = chosen == KernelKind::kCublas ? cublas_ms : pingpong_auto_ms;
      const double pct = 100.0 * std::min(cublas_ms, pingpong_auto_ms) / chosen_ms;
      std::printf("%-16s engine default: %s (class %s, %s), %.1f%% of the better\n", shape_name(s).c_str(),
                  std::string(kernel_kind_name(chosen)).c_str(), kernel_shape_class(s).id, speeds_name.c_str(), pct);
      if (pct < worst_default_pct) {
        worst_default_pct = pct;
        worst_default_shape = shape_name(s);
      }
    }
    for (auto& b : bufs) {
      cudaFree(b.a);
      cudaFree(b.b);
      cudaFree(b.c);
    }
  }

  if (!opt.csv.empty()) {
    FILE* f = std::fopen(opt.csv.c_str(), "w");
    if (!f) {
      std::fprintf(stderr, "cannot write %s\n", opt.csv.c_str());
      return 2;
    }
    std::fprintf(
        f, "device,shape,m,n,k,kernel,variant,median_ms,min_ms,tflops,pct_cublas,err_vs_cublas,err_vs_fp64,runs,ok\n");
    for (const Row& r : rows)
      std::fprintf(f, "%s,%s,%lld,%lld,%lld,%s,%s,%.5f,%.5f,%.3f,%.2f,%.3e,%.3e,%d,%d\n", prop.name, r.shape.c_str(),
                   (long long)r.m, (long long)r.n, (long long)r.k, r.kernel.c_str(), r.variant.c_str(), r.median_ms,
                   r.min_ms, r.tflops, r.pct_cublas, r.err_vs_cublas, r.err_vs_fp64, opt.runs, r.ok ? 1 : 0);
    std::fclose(f);
  }
  if (!opt.speed_table.empty()) {
    // The fp32 kernels' own picks, verified: the rows the engine's choice reads.
    FILE* f = std::fopen(opt.speed_table.c_str(), "w");
    if (!f) {
      std::fprintf(stderr, "cannot write %s\n", opt.speed_table.c_str());
      return 2;
    }
    std::fprintf(f, "%s\n", std::string(KernelSpeeds::kHeader).c_str());
    for (const Row& r : rows) {
      const std::optional<KernelKind> kind = parse_kernel_kind(r.kernel);
      if (!r.ok || !kind || !r.own_pick) continue;
      if (kernel_arithmetic(*kind) != ArithmeticClass::kFfma && kernel_arithmetic(*kind) != ArithmeticClass::kFp32x3)
        continue;
      KernelSpeed row;
      row.device = prop.name;
      row.sm_count = prop.multiProcessorCount;
      row.commit = opt.commit;
      row.shape = {r.m, r.n, r.k};
      row.shape_class = kernel_shape_class(row.shape).id;
      row.kernel = *kind;
      row.tflops = r.tflops;
      std::fprintf(f, "%s\n", KernelSpeeds::csv_row(row).c_str());
    }
    std::fclose(f);
  }
  if (fp32x3_ws != nullptr) cudaFree(fp32x3_ws);
  cudaEventDestroy(ev0);
  cudaEventDestroy(ev1);
  cudaStreamDestroy(stream);
  if (!worst_fp32_shape.empty())
    std::printf("fp32 default: worst %.1f%% of the fastest kernel that keeps the contract, at %s\n", worst_fp32_pct,
                worst_fp32_shape.c_str());
  if (!worst_default_shape.empty())
    std::printf("engine default: worst %.1f%% of the better of cuBLAS and ping-pong, at %s\n", worst_default_pct,
                worst_default_shape.c_str());
  std::printf(all_ok ? "all verifications passed\n" : "SOME VERIFICATIONS FAILED\n");
  return all_ok ? 0 : 1;
}
