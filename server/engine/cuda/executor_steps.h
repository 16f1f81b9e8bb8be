// The loops the split executors share, over JobRun's steps: the row blocks
// (rows and single, and the cluster's row split), the K blocks (the K split,
// local and cluster) and a cluster job's NCCL groups. Each executor states
// only what differs: which ranks it holds, where their inputs come from and
// how the results are collected. Private to the CUDA engine.
//
// Threads: called from the executor's issue function, on the thread that runs
// the JobRun.
#pragma once

#include <nccl.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "common/status.h"
#include "server/engine/cuda/job_run.h"

namespace sgemm {

// Where a block's inputs come from.
enum class BlockInputs {
  // The job's host matrices (or their resident copies): each block waits for
  // its streamed input, is copied in on the h2d stream and, for row blocks,
  // its rows of C are copied out to the host as its kernel finishes.
  kFromHost,
  // Already on the device, whole (a cluster rank whose inputs came through
  // the communicator, which its compute stream waits for): kernels only;
  // the caller collects C.
  kOnDevice,
};

// The rows of every work's shard after its first `skip[j]` rows, by row
// blocks (JobRun::row_block of the shard; pipeline_row_bounds splits a large
// last block when C is copied out), block i on every device before
// block i+1 on any: per block, its rows of A (and of C with a C) in, then one
// kernel per piece of B (K in `b_pieces` pieces of b_piece_k, C = alpha A B + beta C
// over the first, + alpha A B over the others), its rows of C out, and
// JobRun::throttle. With B in one piece, a kernel that transforms B first
// does so once per device before the first block. Device buffers: w.a and w.c
// hold the shard's rows (leading dimensions pad4(k) and pad4(n)), B is
// ShardWork::b_rows (all of it, leading dimension pad4(n)), and the compute
// streams already wait for B.
Status issue_row_blocks(JobRun& run, BlockInputs inputs, const std::vector<int64_t>& skip, int64_t b_pieces);

// The K length of each of `pieces` pieces of B (the last may be shorter): a
// multiple of 128 where there are several, so every piece's first column of
// A and first row of B start on a 16-byte boundary and on a whole K tile.
inline int64_t b_piece_k(int64_t k, int64_t pieces) { return pieces <= 1 ? k : round_up(ceil_div(k, pieces), 128); }

// The K slice of every work's shard by K blocks (pipeline_k_block), block i
// on every device before block i+1 on any, each device accumulating its
// partial C in w.c (all m rows, leading dimension pad4(n)): per block,
// columns of A and rows of B in, a kernel, JobRun::throttle. The first block
// of rank 0 with a C adds beta * C (partial_c_in put C in its w.c); every
// other first block runs with beta 0. Then each device's comm stream waits
// for its h2d and compute streams, so a collective issued next sums finished
// partials. Device buffers: w.a holds A's columns of the slice
// (m x pad4(kc)), w.b its rows of B (kc x pad4(n)) unless B is resident.
Status issue_k_blocks(JobRun& run, BlockInputs inputs);

// Starts w's partial C of a K split on its h2d stream (so the kernels' waits
// cover it), timed as a copy in that moves all of C on rank 0 with a C and
// nothing elsewhere: `enqueue` issues the copy of C and the zeroing.
Status partial_c_in(JobRun& run, ShardWork& w, const std::function<Status()>& enqueue);

// A cluster job's ranks as this process sees them (docs/cluster.md).
struct ClusterRanks {
  const std::vector<Shard>* shards = nullptr;  // every rank's shard, in rank order
  int nlocal = 0;                              // this process's ranks (JobRun::works())
  int nranks = 0;                              // over every process
  bool root = false;                           // this process holds rank 0 and the request's matrices
};
// The ranks of a job whose ranks reach other processes, or INTERNAL where the
// job has not a shard for every rank (`split` names the split) or this
// process holds rank 0 without the request's matrices.
StatusOr<ClusterRanks> cluster_ranks(JobRun& run, const char* split);

// What one local rank issues inside a cluster group: `comm` and `stream` are
// its NCCL communicator and its lane's comm stream.
using RankCalls = std::function<Status(ShardWork& w, ncclComm_t comm, cudaStream_t stream)>;

// One NCCL group of a job whose ranks reach other processes: every local
// rank's calls (in rank order) between one ncclGroupStart and its end, which
// JobRun::end_group waits for as the job watches its peers; each device's
// comm stream brackets the group with a collective span (`spans`, for the
// caller to wait on) whose traces say it received `received[j]` bytes.
Status cluster_group(JobRun& run, std::vector<Span>* spans, const std::vector<int64_t>& received,
                     const RankCalls& calls);

}  // namespace sgemm
