// Cluster row split (docs/cluster.md): a row split whose ranks are the GPUs of
// several processes. Rank 0 (the coordinator's first GPU) holds the request's
// matrices; every process issues the same two NCCL groups, in this order:
//   1. ncclBroadcast of B from rank 0; rank 0 ncclSends each remote rank its
//      rows of A (and of C when given), which that rank ncclRecvs;
//   2. after the kernels, every remote rank ncclSends its rows of C to rank 0.
// Counts follow from the shards alone, so a sender's and its receiver's agree.
//
// Between the groups the coordinator's GPUs run the local row pipeline: each
// takes its rows of A (and C) over its own host link by row blocks, one
// kernel per block, each block's rows of C copied out as it finishes. Rank 0
// has B from the host before the broadcast starts, so its kernels run while
// group 1 sends; its other GPUs wait for the broadcast's B. A remote rank
// gets its rows whole in group 1 and runs its kernels by the same blocks.
#include <algorithm>

#include "server/engine/cuda/executor_steps.h"
#include "server/engine/cuda/job_run.h"
#include "server/engine/cuda/split_executor.h"

namespace sgemm {
namespace {

Status issue(JobRun& run) {
  const GemmJob& job = run.job();
  const GemmShape& s = run.shape();
  auto& works = run.works();
  SGEMM_ASSIGN_OR_RETURN(const ClusterRanks ranks, cluster_ranks(run, "cluster row split"));
  const std::vector<Shard>& shards = *ranks.shards;
  const int nlocal = ranks.nlocal, nranks = ranks.nranks;
  const bool root = ranks.root;
  const int64_t lda = pad4(s.k), ldb = pad4(s.n), ldc = ldb;
  const int64_t hlda = job.a_ld(), hldb = job.b_ld(), hldc = job.c_ld();
  const bool has_c = job.request.has_c;
  // The rows of the ranks on other processes (on rank 0's process: ranks >= nlocal).
  const int64_t remote0 = root && nranks > nlocal ? shards[size_t(nlocal)].row_begin : s.m;
  const int64_t remote_rows = root ? s.m - remote0 : 0;
  enum Extra { kARemote = 0, kCRemote = 1 };  // rank 0's ShardWork::extra
  for (auto& w : works) {
    const int dev = w.lane->device();
    const int64_t rows = w.shard.row_end - w.shard.row_begin;
    SGEMM_ASSIGN_OR_RETURN(w.b, DeviceBuffer::allocate(dev, size_t(s.k * ldb) * kFloatBytes, w.lane->h2d()));
    if (rows > 0) {
      SGEMM_ASSIGN_OR_RETURN(w.a, DeviceBuffer::allocate(dev, size_t(rows * lda) * kFloatBytes, w.lane->h2d()));
      SGEMM_ASSIGN_OR_RETURN(w.c, DeviceBuffer::allocate(dev, size_t(rows * ldc) * kFloatBytes, w.lane->h2d()));
    }
    if (w.rank == 0 && remote_rows > 0) {
      SGEMM_ASSIGN_OR_RETURN(DeviceBuffer a,
                             DeviceBuffer::allocate(dev, size_t(remote_rows * lda) * kFloatBytes, w.lane->h2d()));
      SGEMM_ASSIGN_OR_RETURN(DeviceBuffer c,
                             DeviceBuffer::allocate(dev, size_t(remote_rows * ldc) * kFloatBytes, w.lane->h2d()));
      w.extra.push_back(std::move(a));
      w.extra.push_back(std::move(c));
    }
  }
  // Host -> rank 0: B, then the remote ranks' rows of A (and C), all that group 1 sends.
  cudaEvent_t b_in = nullptr;  // rank 0's B is in
  if (root) {
    ShardWork& w = works[0];
    SGEMM_RETURN_IF_ERROR(run.timed(
        w, w.in, w.lane->h2d(), [&] { return run.h2d_2d(w, w.b.floats(), ldb, job.b, hldb, s.n, s.k); }, &b_in,
        Step{.bytes = s.k * s.n * int64_t(kFloatBytes), .k_begin = 0, .k_end = s.k}));
    if (remote_rows > 0)
      SGEMM_RETURN_IF_ERROR(run.timed(
          w, w.in, w.lane->h2d(),
          [&]() -> Status {
            SGEMM_RETURN_IF_ERROR(
                run.h2d_2d(w, w.extra[kARemote].floats(), lda, job.a + remote0 * hlda, hlda, s.k, remote_rows));
            if (has_c)
              SGEMM_RETURN_IF_ERROR(
                  run.h2d_2d(w, w.extra[kCRemote].floats(), ldc, job.c + remote0 * hldc, hldc, s.n, remote_rows));
            return Status::Ok();
          },
          nullptr,
          Step{.bytes = remote_rows * (s.k + (has_c ? s.n : 0)) * int64_t(kFloatBytes),
               .row_begin = remote0,
               .row_end = s.m,
               .k_begin = 0,
               .k_end = s.k}));
  }
  // Group 1 starts after the allocations and rank 0's copies above; the local
  // rows' copies issued below overlap it.
  for (auto& w : works) SGEMM_RETURN_IF_ERROR(run.order_after(w, w.lane->comm(), w.lane->h2d()));
  std::vector<int64_t> received;  // traces: what each local rank receives in group 1
  received.reserve(works.size());
  for (auto& w : works) {
    const int64_t rows = root ? 0 : w.shard.row_end - w.shard.row_begin;
    received.push_back(w.rank == 0 ? 0 : (s.k * s.n + rows * (s.k + (has_c ? s.n : 0))) * int64_t(kFloatBytes));
  }
  std::vector<Span> spans;
  SGEMM_RETURN_IF_ERROR(
      cluster_group(run, &spans, received, [&](ShardWork& w, ncclComm_t c, cudaStream_t st) -> Status {
        const size_t rows = size_t(w.shard.row_end - w.shard.row_begin);
        SGEMM_NCCL_TRY(ncclBroadcast(w.b.floats(), w.b.floats(), size_t(s.k * ldb), ncclFloat, 0, c, st));
        if (w.rank == 0) {
          for (int r = nlocal; r < nranks; ++r) {
            const Shard& sh = shards[size_t(r)];
            const size_t n_rows = size_t(sh.row_end - sh.row_begin);
            if (n_rows == 0) continue;
            const int64_t off = sh.row_begin - remote0;
            SGEMM_NCCL_TRY(ncclSend(w.extra[kARemote].floats() + off * lda, n_rows * size_t(lda), ncclFloat, r, c, st));
            if (has_c)
              SGEMM_NCCL_TRY(
                  ncclSend(w.extra[kCRemote].floats() + off * ldc, n_rows * size_t(ldc), ncclFloat, r, c, st));
          }
        } else if (!root && rows > 0) {
          SGEMM_NCCL_TRY(ncclRecv(w.a.floats(), rows * size_t(lda), ncclFloat, 0, c, st));
          if (has_c) SGEMM_NCCL_TRY(ncclRecv(w.c.floats(), rows * size_t(ldc), ncclFloat, 0, c, st));
        }
        return Status::Ok();
      }));
  // Every rank but 0 computes with the broadcast's B (a remote rank also with
  // its rows of A and C); rank 0 with the B it copied in.
  for (size_t j = 0; j < works.size(); ++j) {
    ShardWork& w = works[j];
    SGEMM_RETURN_IF_ERROR(run.wait_on(w, w.lane->compute(), w.rank == 0 ? b_in : spans[j].end));
  }
  // The rows by blocks: the coordinator's copied in from the host and out as
  // they finish, a remote rank's from what group 1 brought.
  SGEMM_RETURN_IF_ERROR(issue_row_blocks(run, root ? BlockInputs::kFromHost : BlockInputs::kOnDevice,
                                         std::vector<int64_t>(works.size(), 0), /*b_pieces=*/1));
  // Group 2: the remote ranks' rows of C to rank 0, after every kernel.
  for (auto& w : works) SGEMM_RETURN_IF_ERROR(run.order_after(w, w.lane->comm(), w.lane->compute()));
  received.assign(works.size(), 0);
  if (root) received[0] = remote_rows * s.n * int64_t(kFloatBytes);
  SGEMM_RETURN_IF_ERROR(
      cluster_group(run, &spans, received, [&](ShardWork& w, ncclComm_t c, cudaStream_t st) -> Status {
        const size_t rows = size_t(w.shard.row_end - w.shard.row_begin);
        if (w.rank == 0) {
          for (int r = nlocal; r < nranks; ++r) {
            const Shard& sh = shards[size_t(r)];
            const size_t n_rows = size_t(sh.row_end - sh.row_begin);
            if (n_rows == 0) continue;
            SGEMM_NCCL_TRY(ncclRecv(w.extra[kCRemote].floats() + (sh.row_begin - remote0) * ldc, n_rows * size_t(ldc),
                                    ncclFloat, r, c, st));
          }
        } else if (!root && rows > 0) {
          SGEMM_NCCL_TRY(ncclSend(w.c.floats(), rows * size_t(ldc), ncclFloat, 0, c, st));
        }
        return Status::Ok();
      }));
  if (!root || remote_rows == 0) return Status::Ok();
  // The remote rows of C, from rank 0 to the host.
  ShardWork& w0 = works[0];
  for (int r = nlocal; r < nranks; ++r) {
    const Shard& sh = shards[size_t(r)];
    if (sh.row_end > sh.row_begin)
      SGEMM_RETURN_IF_ERROR(
          run.copy_out(w0, w0.extra[kCRemote].floats(), remote0, ldc, sh.row_begin, sh.row_end, spans[0].end));
  }
  return Status::Ok();
}

}  // namespace

const SplitExecutor kClusterRowsExecutor{SplitMode::kRows, /*spans_pool=*/true, issue, /*spans_processes=*/true};

}  // namespace sgemm
