// sgemm-load --resident: latency and throughput of products against a
// resident B (docs/resident.md), next to the same products sending B with
// every request; and a kept result against the upload of A alone.
#pragma once

#include <cstdint>
#include <string>

#include "client/sgemm_client.h"

namespace sgemm::bench {

struct ResidentLoadOptions {
  std::string server = "localhost:50051";
  std::string b_sizes = "4096,8192";  // square resident B, comma-separated
  std::string a_rows = "1,64,1024";   // rows of each stream of A
  int clients = 1;                    // concurrent clients per stream
  int requests = 200;                 // products per client against the resident B
  int sent_requests = 5;              // products per client sending B every time
  int warmup = 10;                    // untimed products first (per client)
  int keep_requests = 10;             // the kept-result comparison's repetitions (0: skip it)
  int64_t keep_dim = 4096;            // its A, B and C are keep_dim square
  int64_t chunk_bytes = 1 << 20;
  MultiplyRpc rpc = MultiplyRpc::kAuto;  // ClientOptions::rpc of the clients that multiply (--rpc)
  bool reactor_calls = false;            // ClientOptions::caller_thread_calls off: gRPC's threads drive each call
  bool json = false;
};

// Runs the benchmark; 0 when every checked result was right and every request succeeded.
int run_resident_load(const ResidentLoadOptions& options);

}  // namespace sgemm::bench
