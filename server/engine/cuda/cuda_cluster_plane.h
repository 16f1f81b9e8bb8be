// The CUDA data plane of cluster mode (docs/cluster.md): this process's GPUs
// as ranks of a communicator that spans the cluster's processes, and the
// cluster's splits issued on them through the executor table
// (server/engine/cuda/cluster_plane.cc).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "common/gemm_types.h"
#include "common/status.h"
#include "server/engine/cluster_plane.h"

namespace sgemm {

struct CudaClusterPlaneOptions {
  std::vector<int> devices;  // CUDA ordinals, one rank each; empty = every visible GPU
  // A job's NCCL transfers and kernels must finish within this long, or the
  // communicator is aborted and the job fails UNAVAILABLE (10 minutes).
  int64_t job_timeout_ms = 600000;
  // Rows per kernel launch of a rank's shard in the row split (0 = the local
  // engine's row pipeline: an eighth of the shard, at least 512 rows).
  int64_t chunk_rows = 0;
  std::function<void(std::string_view)> log;  // null = silent
};

// UNAVAILABLE when no GPU is usable.
StatusOr<std::unique_ptr<ClusterDataPlane>> make_cuda_cluster_plane(const CudaClusterPlaneOptions& options);

}  // namespace sgemm
