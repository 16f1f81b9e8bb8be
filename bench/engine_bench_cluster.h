// engine-bench --cluster N (docs/cluster.md, "engine-bench --cluster"): the
// coordinator's Engine of cluster mode (server/cluster) over N processes with
// one GPU each, on one machine as if on several. This process is the
// coordinator (rank 0, the first GPU it is given); it starts N - 1 copies of
// itself as members (`--cluster-member ADDR`, CUDA_VISIBLE_DEVICES = one GPU
// each), which join over gRPC on 127.0.0.1 as sgemm-server --join does, and
// ends them through their stdin when done. Built only with gRPC.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/gemm_types.h"

namespace sgemm::bench {

struct ClusterBenchShape {
  GemmShape shape;
  SplitMode split = SplitMode::kRows;  // kRows or kK: the cluster split this shape runs
};

struct ClusterBenchArgs {
  int processes = 2;  // coordinator included; one GPU each
  std::vector<ClusterBenchShape> shapes;
  int iters = 3;
  int warmup = 1;
  int64_t sample = 8;                // rows verified against fp64
  std::optional<KernelKind> kernel;  // nullopt: the measured speeds' choice, as the server makes it
  bool csv = false;                  // CSV on stdout instead of the table
  std::string csv_out;               // also write the CSV here
};

// The coordinator's side: spawns the members, measures, prints. Returns the exit status.
int run_cluster_bench(const ClusterBenchArgs& args);
// A member (`engine-bench --cluster-member ADDR --cluster-name NAME`): joins
// ADDR with every visible GPU and serves jobs until stdin closes.
int run_cluster_member(const std::string& coordinator, const std::string& name);

}  // namespace sgemm::bench
