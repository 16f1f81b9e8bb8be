// transport-bench: how fast matrices move through sgemm-server over gRPC, by
// chunk size. Uploads: a 4096x4096 A with n = 1 (64 MiB in, 16 KiB out, a
// negligible product). Downloads: a 4096x4096 C from k = 1 (32 KiB in, 64 MiB
// out); the server's --response-chunk-bytes sets that direction, so
// scripts/bench-transport.sh restarts the server per size.
//
//   transport-bench --server 127.0.0.1:50051 [--direction up|down] [google-benchmark flags]
#include <benchmark/benchmark.h>

#include <cstring>
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

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--server") == 0 && i + 1 < argc)
      g_server = argv[++i];
    else if (std::strcmp(argv[i], "--direction") == 0 && i + 1 < argc)
      g_direction = argv[++i];
    else
      rest.push_back(argv[i]);
  }
  int n = int(rest.size());
  benchmark::Initialize(&n, rest.data());
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
