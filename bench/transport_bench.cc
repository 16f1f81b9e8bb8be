// transport-bench: how fast matrices move through sgemm-server over gRPC, by
// chunk size. Uploads: a 4096x4096 A with n = 1 (64 MiB in, 16 KiB out, a
// negligible product). Downloads: a 4096x4096 C from k = 1 (32 KiB in, 64 MiB
// out); the server's --response-chunk-bytes sets that direction, so
// scripts/bench-transport.sh restarts the server per size.
//
//   transport-bench --server 127.0.0.1:50051 [--direction up|down] [google-benchmark flags]
//
// End-to-end mode: square products of each size through one
// transport, timed from the caller's side, to set beside engine-bench's
// device-side time (pinned host in, pinned host out) taken in the same run:
//
//   transport-bench --e2e-sizes 4096,8192 --transport shm --server unix:/tmp/s.sock [--iters 10] [--csv-out F]
//   transport-bench --e2e-sizes 4096,8192 --transport grpc --server 127.0.0.1:50051
//
// shm: A, B and C live in shared-memory regions registered once; each request
// names them and C is written in place, so one request is one header out and
// one summary back. grpc: the matrices travel as chunks (Client::multiply).
// The first result is verified against the fp64 reference (sampled rows),
// then one warm-up, then --iters timed requests; it prints median and min.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "client/sgemm_client.h"
#include "common/reference_gemm.h"

namespace {

std::string g_server = "127.0.0.1:50051";
std::string g_direction = "up";

// Times requests of `shape` with random inputs; counts the payload bytes one
// direction moves (sent when `upload`, else received).
void run_requests(benchmark::State& state, sgemm::Client& client, const sgemm::GemmShape& s, bool upload) {
  std::vector<float> a(s.m * s.k), b(s.k * s.n);
  sgemm::fill_random(a, 1);
  sgemm::fill_random(b, 2);
  int64_t bytes = 0;
  for (auto _ : state) {
    auto r = client.multiply(s, a.data(), b.data(), nullptr, {});
    if (!r.ok()) {
      state.SkipWithError(r.status().to_string().c_str());
      return;
    }
    bytes += upload ? r->bytes_sent : r->bytes_received;
  }
  state.SetBytesProcessed(bytes);
}

void BM_Upload(benchmark::State& state) {
  sgemm::ClientOptions opt;
  opt.chunk_bytes = state.range(0);
  auto client = sgemm::Client::connect(g_server, opt);
  run_requests(state, *client, {4096, 1, 4096}, /*upload=*/true);
  state.counters["chunk_KiB"] = double(opt.chunk_bytes) / 1024;
}

void BM_Download(benchmark::State& state) {
  auto client = sgemm::Client::connect(g_server);
  run_requests(state, *client, {4096, 4096, 1}, /*upload=*/false);
}

struct E2eRow {
  int64_t size = 0;
  double median_ms = 0, min_ms = 0, server_ms = 0, compute_ms = 0, copy_in_ms = 0, kernel_ms = 0, copy_out_ms = 0;
  double max_rel_err = 0;
  double register_ms = 0;  // shm: creating, mapping and registering the region (once, not in e2e)
};

int run_e2e(const std::string& transport, const std::vector<int64_t>& sizes, int iters, const std::string& csv_out) {
  sgemm::ClientOptions opt;
  opt.transport = sgemm::parse_transport(transport).value_or(sgemm::Transport::kGrpc);
  auto client = sgemm::Client::connect(g_server, opt);
  auto t = client->transport();
  if (!t.ok()) {
    std::fprintf(stderr, "transport-bench: %s\n", t.status().to_string().c_str());
    return 1;
  }
  std::vector<E2eRow> rows;
  for (int64_t n : sizes) {
    const sgemm::GemmShape s{n, n, n};
    const std::size_t elems = std::size_t(n * n);
    std::vector<float> a(elems), b(elems);
    sgemm::fill_random(a, uint64_t(n));
    sgemm::fill_random(b, uint64_t(n) + 1);
    std::unique_ptr<sgemm::Region> region;
    std::function<sgemm::StatusOr<sgemm::MultiplyResult>()> once;
    const float* c_out = nullptr;
    double register_ms = 0;
    if (*t == sgemm::Transport::kShm) {
      const auto r0 = std::chrono::steady_clock::now();
      auto r = client->create_region(int64_t(3 * elems * sizeof(float)));
      register_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - r0).count();
      if (!r.ok()) {
        std::fprintf(stderr, "transport-bench: %s\n", r.status().to_string().c_str());
        return 1;
      }
      region = std::move(r).value();
      std::memcpy(region->floats(), a.data(), elems * 4);
      std::memcpy(region->floats() + elems, b.data(), elems * 4);
      const sgemm::Region* reg = region.get();
      c_out = reg->floats() + 2 * elems;
      once = [&client, s, reg, elems] {
        const sgemm::RegionMatrix c{reg, int64_t(2 * elems * 4), 0};
        return client->multiply_regions(s, {reg, 0, 0}, {reg, int64_t(elems * 4), 0}, std::nullopt, c, {});
      };
    } else {
      once = [&client, s, &a, &b] { return client->multiply(s, a.data(), b.data(), nullptr, {}); };
    }
    E2eRow row;
    row.size = n;
    row.register_ms = register_ms;
    auto first = once();
    if (!first.ok()) {
      std::fprintf(stderr, "transport-bench: %lld: %s\n", (long long)n, first.status().to_string().c_str());
      return 1;
    }
    const float* c = c_out ? c_out : first->c.data();
    const auto check = sgemm::rows_to_verify(n, n, n, 7, 16);
    const auto v = sgemm::verify_gemm(n, n, n, 1.0f, a.data(), b.data(), 0.0f, nullptr, c, check);
    row.max_rel_err = v.max_rel_error;
    if (!v.passed(sgemm::kSgemmTolerance)) {
      std::fprintf(stderr, "transport-bench: %lld: WRONG RESULT (max rel error %.3g); not timed\n", (long long)n,
                   v.max_rel_error);
      return 1;
    }
    (void)once();  // warm-up
    std::vector<double> walls;
    for (int i = 0; i < iters; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      auto r = once();
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (!r.ok()) {
        std::fprintf(stderr, "transport-bench: %s\n", r.status().to_string().c_str());
        return 1;
      }
      walls.push_back(ms);
      row.server_ms += r->summary.total_ms / iters;
      row.compute_ms += r->summary.compute_ms / iters;
      for (const auto& d : r->summary.devices) {
        row.copy_in_ms += d.copy_in_ms / iters;
        row.kernel_ms += d.kernel_ms / iters;
        row.copy_out_ms += d.copy_out_ms / iters;
      }
    }
    std::sort(walls.begin(), walls.end());
    row.median_ms = walls[walls.size() / 2];
    row.min_ms = walls.front();
    rows.push_back(row);
  }
  const char* header =
      "transport,size,e2e_median_ms,e2e_min_ms,server_total_ms,server_compute_ms,copy_in_ms,kernel_ms,copy_out_ms,"
      "max_rel_err,register_ms\n";
  auto write = [&](FILE* f) {
    std::fputs(header, f);
    for (const auto& r : rows)
      std::fprintf(f, "%s,%lld,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3g,%.1f\n", sgemm::transport_name(*t),
                   (long long)r.size, r.median_ms, r.min_ms, r.server_ms, r.compute_ms, r.copy_in_ms, r.kernel_ms,
                   r.copy_out_ms, r.max_rel_err, r.register_ms);
  };
  write(stdout);
  if (!csv_out.empty()) {
    if (FILE* f = std::fopen(csv_out.c_str(), "w")) {
      write(f);
      std::fclose(f);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> rest;
  std::string transport = "grpc", csv_out;
  std::vector<int64_t> e2e_sizes;
  int iters = 10;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--server") == 0 && i + 1 < argc) {
      g_server = argv[++i];
    } else if (std::strcmp(argv[i], "--direction") == 0 && i + 1 < argc) {
      g_direction = argv[++i];
    } else if (std::strcmp(argv[i], "--transport") == 0 && i + 1 < argc) {
      transport = argv[++i];
    } else if (std::strcmp(argv[i], "--iters") == 0 && i + 1 < argc) {
      iters = std::max(1, std::atoi(argv[++i]));
    } else if (std::strcmp(argv[i], "--csv-out") == 0 && i + 1 < argc) {
      csv_out = argv[++i];
    } else if (std::strcmp(argv[i], "--e2e-sizes") == 0 && i + 1 < argc) {
      std::stringstream ss(argv[++i]);
      std::string item;
      while (std::getline(ss, item, ',')) e2e_sizes.push_back(std::atoll(item.c_str()));
    } else {
      if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0)
        std::printf(
            "usage: transport-bench --server HOST:PORT [--direction up|down] [google-benchmark flags]\n"
            "       transport-bench --e2e-sizes N,... [--transport grpc|shm] --server ADDR [--iters N] "
            "[--csv-out FILE]\n"
            "Exit codes: 0 done; 1 a result was wrong or a request failed; 2 bad arguments.\n"
            "google-benchmark's own flags:\n");  // its --help follows and exits 0
      rest.push_back(argv[i]);
    }
  }
  if (!e2e_sizes.empty()) return run_e2e(transport, e2e_sizes, iters, csv_out);
  int n = int(rest.size());
  benchmark::Initialize(&n, rest.data());
  if (benchmark::ReportUnrecognizedArguments(n, rest.data())) return 2;
  if (g_direction == "up") {
    benchmark::RegisterBenchmark("upload_64MiB", BM_Upload)
        ->ArgName("chunk_bytes")
        ->Arg(64 << 10)
        ->Arg(256 << 10)
        ->Arg(1 << 20)
        ->Arg(2 << 20)
        ->Arg((4 << 20) - 1024)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime()
        ->MinTime(2.0);
  } else {
    benchmark::RegisterBenchmark("download_64MiB", BM_Download)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime()
        ->MinTime(2.0);
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
