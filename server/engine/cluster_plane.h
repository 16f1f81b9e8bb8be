// The data plane of a cluster (docs/cluster.md): what the gRPC control plane
// (server/cluster/) asks of this process's GPUs, in plain structs. No CUDA,
// no protobuf: the CUDA implementation is server/engine/cuda/cluster_plane.cc
// (NCCL across processes, the splits run as rows of the CUDA engine's
// executor table), and tests drive the control plane with a fake.
//
// Every process of a cluster owns its local GPUs, one NCCL rank each. The
// coordinator's first GPU is rank 0 and holds the request's matrices; the
// members' ranks follow in join order. The coordinator hands out a
// ClusterCommSpec (an epoch) whenever the membership changes, then sends each
// member the ClusterJobSpec of every request before its own NCCL calls, so
// every rank issues the same collectives in the same order.
//
// Threads: connect() and run_*() are called from one thread at a time per
// process (the control plane serialises jobs); `abort` tokens are cancelled
// from other threads (a member's stream closing), and the call waiting on the
// GPUs then aborts the communicator and returns the token's status.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/cancel_token.h"
#include "common/gemm_types.h"
#include "common/status.h"
#include "server/engine/engine.h"

namespace sgemm {

// One communicator over the whole cluster: made again for every membership.
struct ClusterCommSpec {
  uint64_t epoch = 0;
  std::string unique_id;  // the ncclUniqueId's bytes, opaque to the control plane
  int nranks = 0;
  int first_rank = 0;  // this process's GPUs are ranks first_rank, first_rank + 1, ...
};

enum class ClusterJobKind {
  kRows = 0,   // a row split of one product across every rank
  kProbe = 1,  // the link between hosts, measured at join: a timed broadcast from rank 0, then rank 0's
               // timed concurrent sends to every rank of another process (the fan-out)
  kK = 2,      // a K split: every rank a K slice, partial Cs summed by reduce-scatter
};

// kK: the sum of the partials is reduce-scattered in equal blocks of rows, one
// per rank in rank order (NCCL's reduce-scatter wants equal counts): rank r
// ends with rows [r * rows, min((r + 1) * rows, m)) of C, where rows =
// ceil(m / nranks); the partials are padded to nranks * rows rows of zeros.
inline int64_t cluster_k_block_rows(int64_t m, int nranks) { return nranks > 0 ? (m + nranks - 1) / nranks : m; }

// What every rank needs to issue its part of a job, sent ahead of the NCCL calls.
struct ClusterJobSpec {
  uint64_t job_id = 0;
  uint64_t epoch = 0;  // the communicator it runs on
  ClusterJobKind kind = ClusterJobKind::kRows;
  GemmShape shape;
  float alpha = 1.0f;
  float beta = 0.0f;
  bool has_c = false;
  KernelKind kernel = KernelKind::kPingpong;
  // kRows: rows [row_begin, row_end) of C per rank, in rank order.
  // kK: K slices [k_begin, k_end) per rank, in rank order (rows 0..m each;
  // every slice non-empty); beta * C is added once, by rank 0.
  std::vector<Shard> ranks;
  int64_t probe_bytes = 0;  // kProbe: bytes broadcast from rank 0, and sent from it to each remote rank
};

struct ClusterRunResult {
  std::vector<DeviceTiming> timings;  // this process's ranks
  double elapsed_ms = 0;              // from the first enqueue to the last stream done (kProbe: the broadcast)
  // kProbe, rank 0: its sends of probe_bytes to every rank of another process,
  // issued at once (one NCCL group), timed together (0: no remote rank).
  double fanout_ms = 0;
  // The job's kernel refused some of this process's blocks and cuBLAS ran them.
  bool fallback_used = false;
  // Every concrete kernel the job launched, in the order of first use, with its
  // launches (GemmReport::kernel_rows): this process's ranks from run_root and
  // run_member; the coordinator adds its members'.
  std::vector<KernelRowUse> kernel_rows;
};

class ClusterDataPlane {
 public:
  virtual ~ClusterDataPlane() = default;
  // This process's GPUs (one rank each).
  virtual std::vector<DeviceInfo> local_devices() const = 0;
  // A fresh communicator id (the coordinator's, once per epoch).
  virtual StatusOr<std::string> new_unique_id() = 0;
  // Joins this process's GPUs to `spec`'s communicator, dropping any older one
  // (ncclCommAbort). Waits until every rank has joined, `abort` is cancelled
  // or `timeout_ms` passes (UNAVAILABLE).
  virtual Status connect(const ClusterCommSpec& spec, const CancelToken* abort, int64_t timeout_ms) = 0;
  // Drops the communicator (nothing may be running).
  virtual void disconnect() = 0;
  // The coordinator's part: rank 0 holds `job`'s host matrices; C lands in job.c.
  virtual StatusOr<ClusterRunResult> run_root(const ClusterJobSpec& spec, const GemmJob& job,
                                              const CancelToken* abort) = 0;
  // A member's part of `spec` (its ranks).
  virtual StatusOr<ClusterRunResult> run_member(const ClusterJobSpec& spec, const CancelToken* abort) = 0;
};

}  // namespace sgemm
