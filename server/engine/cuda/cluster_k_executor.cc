// Cluster K split (docs/cluster.md): a K split whose ranks are the GPUs of
// several processes. Rank 0 (the coordinator's first GPU) holds the request's
// matrices; every process issues the same three NCCL groups, in this order:
//   1. rank 0 ncclSends each remote rank its columns of A (packed m x slice)
//      and its rows of B, which that rank ncclRecvs;
//   2. after the kernels (every rank a partial C over all m x n; rank 0 adds
//      beta * C), ncclReduceScatter (sum, in place) of the partials, padded
//      to nranks equal blocks of rows (cluster_k_block_rows): rank r ends
//      with block r of the sum;
//   3. every remote rank ncclSends its block to rank 0.
// Counts follow from the shards alone, so a sender's and its receiver's agree.
//
// The coordinator's GPUs take their slices over their own host links by K
// blocks, one kernel per block, while group 1 runs; a remote rank gets its
// slices whole in group 1 and runs its kernels by the same blocks. The
// coordinator copies its own blocks of C out after group 2, rank 0 the remote
// ones after group 3.
#include <algorithm>

#include "server/engine/cluster_plane.h"
#include "server/engine/cuda/executor_steps.h"
#include "server/engine/cuda/job_run.h"
#include "server/engine/cuda/split_executor.h"

namespace sgemm {
namespace {

Status issue(JobRun& run) {
  const GemmJob& job = run.job();
  const GemmShape& s = run.shape();
  auto& works = run.works();
  SGEMM_ASSIGN_OR_RETURN(const ClusterRanks ranks, cluster_ranks(run, "cluster K split"));
  const std::vector<Shard>& shards = *ranks.shards;
  const int nlocal = ranks.nlocal, nranks = ranks.nranks;
  const bool root = ranks.root;
  for (const Shard& sh : shards)
    if (sh.k_end <= sh.k_begin || sh.row_begin != 0 || sh.row_end != s.m)
      return Internal("cluster K split with an empty K slice or a partial row range");
  const int64_t ldb = pad4(s.n), ldc = ldb;
  const int64_t hlda = job.a_ld(), hldb = job.b_ld(), hldc = job.c_ld();
  const bool has_c = job.request.has_c;
  const int64_t block = cluster_k_block_rows(s.m, nranks);
  const int64_t padded_rows = block * int64_t(nranks);
  auto slice = [&](int r) { return shards[size_t(r)].k_end - shards[size_t(r)].k_begin; };
  auto block_rows = [&](int r) { return std::clamp<int64_t>(s.m - int64_t(r) * block, 0, block); };
  // Rank 0 packs the remote ranks' slices in rank order: A as m x pad4(slice), B as slice x ldb.
  std::vector<int64_t> a_off(size_t(nranks), 0), b_off(size_t(nranks), 0);
  int64_t a_total = 0, b_total = 0;
  if (root)
    for (int r = nlocal; r < nranks; ++r) {
      a_off[size_t(r)] = a_total;
      b_off[size_t(r)] = b_total;
      a_total += s.m * pad4(slice(r));
      b_total += slice(r) * ldb;
    }
  enum Extra { kARemote = 0, kBRemote = 1 };  // rank 0's ShardWork::extra
  for (auto& w : works) {
    const int dev = w.lane->device();
    const int64_t ks = slice(w.rank);
    SGEMM_ASSIGN_OR_RETURN(w.a, DeviceBuffer::allocate(dev, size_t(s.m * pad4(ks)) * kFloatBytes, w.lane->h2d()));
    SGEMM_ASSIGN_OR_RETURN(w.b, DeviceBuffer::allocate(dev, size_t(ks * ldb) * kFloatBytes, w.lane->h2d()));
    SGEMM_ASSIGN_OR_RETURN(w.c, DeviceBuffer::allocate(dev, size_t(padded_rows * ldc) * kFloatBytes, w.lane->h2d()));
    if (w.rank == 0 && a_total > 0) {
      SGEMM_ASSIGN_OR_RETURN(DeviceBuffer a, DeviceBuffer::allocate(dev, size_t(a_total) * kFloatBytes, w.lane->h2d()));
      SGEMM_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::allocate(dev, size_t(b_total) * kFloatBytes, w.lane->h2d()));
      w.extra.push_back(std::move(a));
      w.extra.push_back(std::move(b));
    }
  }
  // Zeroed partials (the padding rows reduce to zero; rank 0's hold C for
  // beta), then on rank 0 the remote ranks' slices, all that group 1 sends.
  for (auto& w : works) {
    const bool owns_c = w.rank == 0 && has_c;
    SGEMM_RETURN_IF_ERROR(partial_c_in(run, w, [&]() -> Status {
      SGEMM_CUDA_TRY(cudaMemsetAsync(w.c.floats(), 0, size_t(padded_rows * ldc) * kFloatBytes, w.lane->h2d()));
      if (owns_c) SGEMM_RETURN_IF_ERROR(run.h2d_2d(w, w.c.floats(), ldc, job.c, hldc, s.n, s.m));
      return Status::Ok();
    }));
    if (w.rank == 0 && a_total > 0)
      SGEMM_RETURN_IF_ERROR(run.timed(
          w, w.in, w.lane->h2d(),
          [&]() -> Status {
            for (int r = nlocal; r < nranks; ++r) {
              const Shard& sh = shards[size_t(r)];
              // Columns [k_begin, k_end) of A and rows [k_begin, k_end) of B.
              SGEMM_RETURN_IF_ERROR(run.h2d_2d(w, w.extra[kARemote].floats() + a_off[size_t(r)], pad4(slice(r)),
                                               job.a + sh.k_begin, hlda, slice(r), s.m));
              SGEMM_RETURN_IF_ERROR(run.h2d_2d(w, w.extra[kBRemote].floats() + b_off[size_t(r)], ldb,
                                               job.b + sh.k_begin * hldb, hldb, s.n, slice(r)));
            }
            return Status::Ok();
          },
          nullptr,
          Step{.bytes = (s.m + s.n) * (s.k - shards[size_t(nlocal)].k_begin) * int64_t(kFloatBytes),
               .row_begin = 0,
               .row_end = s.m,
               .k_begin = shards[size_t(nlocal)].k_begin,
               .k_end = s.k}));
  }
  // Group 1: the remote ranks' slices from rank 0. It starts after the
  // copies above; the local slices' copies issued below overlap it.
  for (auto& w : works) SGEMM_RETURN_IF_ERROR(run.order_after(w, w.lane->comm(), w.lane->h2d()));
  std::vector<int64_t> received;  // traces: what each local rank receives in each group
  received.reserve(works.size());
  for (auto& w : works) received.push_back(root ? 0 : slice(w.rank) * (s.m + s.n) * int64_t(kFloatBytes));
  std::vector<Span> spans;
  SGEMM_RETURN_IF_ERROR(
      cluster_group(run, &spans, received, [&](ShardWork& w, ncclComm_t c, cudaStream_t st) -> Status {
        if (w.rank == 0) {
          for (int r = nlocal; r < nranks; ++r) {
            SGEMM_NCCL_TRY(ncclSend(w.extra[kARemote].floats() + a_off[size_t(r)], size_t(s.m * pad4(slice(r))),
                                    ncclFloat, r, c, st));
            SGEMM_NCCL_TRY(
                ncclSend(w.extra[kBRemote].floats() + b_off[size_t(r)], size_t(slice(r) * ldb), ncclFloat, r, c, st));
          }
        } else if (!root) {
          SGEMM_NCCL_TRY(ncclRecv(w.a.floats(), size_t(s.m * pad4(slice(w.rank))), ncclFloat, 0, c, st));
          SGEMM_NCCL_TRY(ncclRecv(w.b.floats(), size_t(slice(w.rank) * ldb), ncclFloat, 0, c, st));
        }
        return Status::Ok();
      }));
  // A remote rank computes on what group 1 brought; the coordinator's ranks
  // on the blocks they copy in.
  if (!root)
    for (size_t j = 0; j < works.size(); ++j)
      SGEMM_RETURN_IF_ERROR(run.wait_on(works[j], works[j].lane->compute(), spans[j].end));
  // K blocks, block i on every rank before block i + 1 on any; beta * C once,
  // on rank 0. Then each rank's comm stream waits for its kernels and copies.
  SGEMM_RETURN_IF_ERROR(issue_k_blocks(run, root ? BlockInputs::kFromHost : BlockInputs::kOnDevice));
  // Group 2: the partials summed, rank r keeping block r (in place).
  received.assign(works.size(), block * s.n * int64_t(nranks - 1) * int64_t(kFloatBytes));
  std::vector<Span> summed;
  SGEMM_RETURN_IF_ERROR(
      cluster_group(run, &summed, received, [&](ShardWork& w, ncclComm_t c, cudaStream_t st) -> Status {
        const size_t count = size_t(block * ldc);
        SGEMM_NCCL_TRY(
            ncclReduceScatter(w.c.floats(), w.c.floats() + size_t(w.rank) * count, count, ncclFloat, ncclSum, c, st));
        return Status::Ok();
      }));
  // Group 3: the remote ranks' blocks to rank 0, into the same rows of its partial.
  received.assign(works.size(), 0);
  if (root) received[0] = (s.m - std::min(s.m, nlocal * block)) * s.n * int64_t(kFloatBytes);
  SGEMM_RETURN_IF_ERROR(
      cluster_group(run, &spans, received, [&](ShardWork& w, ncclComm_t c, cudaStream_t st) -> Status {
        if (w.rank == 0) {
          for (int r = nlocal; r < nranks; ++r)
            if (block_rows(r) > 0)
              SGEMM_NCCL_TRY(
                  ncclRecv(w.c.floats() + r * block * ldc, size_t(block_rows(r) * ldc), ncclFloat, r, c, st));
        } else if (!root && block_rows(w.rank) > 0) {
          SGEMM_NCCL_TRY(
              ncclSend(w.c.floats() + w.rank * block * ldc, size_t(block_rows(w.rank) * ldc), ncclFloat, 0, c, st));
        }
        return Status::Ok();
      }));
  if (!root) return Status::Ok();
  // To the host: every local rank its block once summed, rank 0 the remote blocks once they came.
  for (size_t j = 0; j < works.size(); ++j) {
    ShardWork& w = works[j];
    const int64_t b0 = w.rank * block, b1 = b0 + block_rows(w.rank);
    if (b1 > b0) SGEMM_RETURN_IF_ERROR(run.copy_out(w, w.c.floats(), 0, ldc, b0, b1, summed[j].end));
  }
  if (nlocal * block < s.m)
    SGEMM_RETURN_IF_ERROR(run.copy_out(works[0], works[0].c.floats(), 0, ldc, nlocal * block, s.m, spans[0].end));
  return Status::Ok();
}

}  // namespace

const SplitExecutor kClusterKExecutor{SplitMode::kK, /*spans_pool=*/true, issue, /*spans_processes=*/true};

}  // namespace sgemm
