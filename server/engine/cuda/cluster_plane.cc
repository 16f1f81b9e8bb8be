// The cluster row split and K split on this process's ranks (docs/cluster.md).
//
// Rank 0 (the coordinator's first GPU) holds the request's matrices. One job,
// on every process, is the same two NCCL groups:
//   1. ncclBroadcast of B from rank 0; rank 0 ncclSends each remote rank its
//      rows of A (and of C when given), which that rank ncclRecvs;
//   2. after the kernels, every remote rank ncclSends its rows of C to rank 0.
// The coordinator's other GPUs take their rows of A and C over their own host
// links and get B from the broadcast. Rank 0 copies the remote rows of C to
// the host.
//
// The K split is three NCCL groups on every process:
//   1. rank 0 ncclSends each remote rank its columns of A (packed m x slice by
//      the host copy) and its rows of B, which that rank ncclRecvs;
//   2. after the kernels (every rank a partial C over all m x n; rank 0 adds
//      beta * C), ncclReduceScatter (sum, in place) of the partials, padded to
//      nranks equal blocks of rows: rank r ends with block r of the sum;
//   3. every remote rank ncclSends its block to rank 0.
// The coordinator's other GPUs take their slices over their own host links
// and copy their own blocks out; rank 0 copies its block and the remote ones.
//
// The probe (at every new communicator): a timed broadcast from rank 0, then
// rank 0's timed sends to every rank of another process in one group (the
// fan-out rate the K split's scatter runs at). Every wait polls the job's abort token
// and NCCL's async error and has a deadline; giving up aborts the communicator (ncclCommAbort), which ends the
// collectives still running, so the streams drain and buffers are freed.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <thread>

#include "kernels/cuda_status.h"
#include "kernels/gemm_args.h"
#include "kernels/gemm_backend.h"
#include "server/comm/nccl_cluster_comm.h"
#include "server/comm/nccl_status.h"
#include "server/devices/device_pool.h"
#include "server/engine/cuda/cuda_cluster_plane.h"

namespace sgemm {
namespace {

constexpr std::size_t kF = sizeof(float);
int64_t pad4(int64_t x) { return (std::max<int64_t>(x, 1) + 3) / 4 * 4; }

struct Span {
  cudaEvent_t begin = nullptr, end = nullptr;
};

// One local rank's part of a job.
struct RankWork {
  Lane* lane = nullptr;
  int rank = 0;
  Shard shard;
  DeviceBuffer a, b, c;             // rows of A and C, all of B (K split: slices of A and B, the padded partial C)
  DeviceBuffer a_remote, c_remote;  // rank 0 only: the remote ranks' rows
  DeviceBuffer b_remote;            // rank 0 only, K split: the remote ranks' rows of B
  std::vector<Span> in, kernel, comm, out;
  std::vector<Span> fanout;  // kProbe, rank 0: the timed fan-out
  DeviceTiming timing;
};

class CudaClusterPlane final : public ClusterDataPlane {
 public:
  CudaClusterPlane(CudaClusterPlaneOptions o, std::unique_ptr<DevicePool> pool)
      : options_(std::move(o)), pool_(std::move(pool)) {}
  ~CudaClusterPlane() override {
    comm_.reset();
    pool_.reset();
  }

  std::vector<DeviceInfo> local_devices() const override {
    std::vector<DeviceInfo> v;
    v.reserve(std::size_t(pool_->size()));
    for (int i = 0; i < pool_->size(); ++i) v.push_back(pool_->info(i));
    return v;
  }

  StatusOr<std::string> new_unique_id() override { return NcclClusterComm::new_unique_id(); }

  Status connect(const ClusterCommSpec& spec, const CancelToken* abort, int64_t timeout_ms) override {
    comm_.reset();  // the old communicator is aborted first: its peers may be gone
    SGEMM_ASSIGN_OR_RETURN(comm_, NcclClusterComm::create(spec.unique_id, spec.nranks, spec.first_rank,
                                                          pool_->ordinals(), abort, timeout_ms));
    epoch_ = spec.epoch;
    return Status::Ok();
  }

  void disconnect() override {
    comm_.reset();
    epoch_ = 0;
  }

  StatusOr<ClusterRunResult> run_root(const ClusterJobSpec& spec, const GemmJob& job,
                                      const CancelToken* abort) override {
    return run(spec, &job, abort);
  }
  StatusOr<ClusterRunResult> run_member(const ClusterJobSpec& spec, const CancelToken* abort) override {
    return run(spec, nullptr, abort);
  }

 private:
  StatusOr<ClusterRunResult> run(const ClusterJobSpec& spec, const GemmJob* job, const CancelToken* abort) {
    if (!comm_ || comm_->aborted()) return Unavailable("no cluster communicator (it is rebuilt before the next job)");
    if (spec.epoch != epoch_)
      return Unavailable("job for communicator epoch " + std::to_string(spec.epoch) + ", this process is on " +
                         std::to_string(epoch_));
    if (spec.kind != ClusterJobKind::kProbe && int(spec.ranks.size()) != comm_->nranks())
      return Internal("cluster job with " + std::to_string(spec.ranks.size()) + " shards for " +
                      std::to_string(comm_->nranks()) + " ranks");
    if (spec.kind == ClusterJobKind::kK)
      for (const Shard& sh : spec.ranks)
        if (sh.k_end <= sh.k_begin || sh.row_begin != 0 || sh.row_end != spec.shape.m)
          return Internal("cluster K-split job with an empty K slice or a partial row range");
    std::vector<LaneLease> leases;
    std::vector<RankWork> works(size_t(comm_->local_size()));
    for (int i = 0; i < comm_->local_size(); ++i) {
      SGEMM_ASSIGN_OR_RETURN(LaneLease l, pool_->acquire(i, abort));
      leases.push_back(std::move(l));
      RankWork& w = works[size_t(i)];
      w.lane = &*leases.back();
      w.lane->reset_events();
      w.rank = comm_->first_rank() + i;
      if (spec.kind != ClusterJobKind::kProbe) w.shard = spec.ranks[size_t(w.rank)];
      w.timing.device = pool_->info(i).index;
      w.timing.name = pool_->info(i).name;
      w.timing.shard = w.shard;
    }
    const auto t0 = std::chrono::steady_clock::now();
    issuing_abort_ = abort;  // end_group() gives up when the job is aborted (a member left)
    Status issued = spec.kind == ClusterJobKind::kProbe ? issue_probe(spec, works)
                    : spec.kind == ClusterJobKind::kK   ? issue_k(spec, job, works)
                                                        : issue_rows(spec, job, works);
    issuing_abort_ = nullptr;
    // An enqueue that failed half-way leaves peers waiting on calls we never
    // made: abort at once (the collectives issued end), then drain.
    if (!issued.ok()) comm_->abort();
    // Wait for every stream, or give up (abort the communicator) and drain.
    Status waited = wait_all(works, abort, job ? job->cancel : nullptr);
    Status s = issued.ok() ? waited : issued;
    if (!issued.ok() && !waited.ok() && waited.code() == StatusCode::kUnavailable) s = waited;
    ClusterRunResult out;
    out.elapsed_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (s.ok()) s = collect(works, spec, &out);
    for (auto& w : works) {  // every stream is idle now
      w.a.reset();
      w.b.reset();
      w.c.reset();
      w.a_remote.reset();
      w.c_remote.reset();
      w.b_remote.reset();
    }
    if (!s.ok()) {
      if (!comm_->aborted()) comm_->abort();  // a failed job leaves NCCL in an unknown state
      return s;
    }
    return out;
  }

  Status timed(RankWork& w, std::vector<Span>& into, cudaStream_t st, const std::function<Status()>& f) {
    SGEMM_CUDA_TRY(cudaSetDevice(w.lane->device()));
    Span sp;
    SGEMM_ASSIGN_OR_RETURN(sp.begin, w.lane->next_event());
    SGEMM_ASSIGN_OR_RETURN(sp.end, w.lane->next_event());
    SGEMM_CUDA_TRY(cudaEventRecord(sp.begin, st));
    SGEMM_RETURN_IF_ERROR(f());
    SGEMM_CUDA_TRY(cudaEventRecord(sp.end, st));
    into.push_back(sp);
    return Status::Ok();
  }
  Status after(RankWork& w, cudaStream_t waiter, cudaStream_t producer) {
    SGEMM_CUDA_TRY(cudaSetDevice(w.lane->device()));
    SGEMM_ASSIGN_OR_RETURN(cudaEvent_t e, w.lane->next_event());
    SGEMM_CUDA_TRY(cudaEventRecord(e, producer));
    SGEMM_CUDA_TRY(cudaStreamWaitEvent(waiter, e, 0));
    return Status::Ok();
  }
  // ncclGroupStart; the group is ended (and waited for) by end_group(), or by
  // the destructor when an enqueue failed half-way, so no group stays open.
  struct Group {
    bool open = false;
    Status start() {
      SGEMM_NCCL_TRY(ncclGroupStart());
      open = true;
      return Status::Ok();
    }
    ~Group() {
      if (open) (void)ncclGroupEnd();
    }
  };
  // ncclGroupEnd on a non-blocking communicator, then until every rank issued.
  Status end_group(Group& g) {
    g.open = false;
    const ncclResult_t r = ncclGroupEnd();
    if (r != ncclSuccess && r != ncclInProgress) return SGEMM_NCCL_STATUS(r);
    // A peer that died leaves the group in progress for good: the job's abort
    // token (cancelled when the coordinator sees a member leave) ends the wait,
    // not only --cluster-job-timeout. On 2 H200s a member killed mid-request
    // left the coordinator here past the e2e test's 55 s (2026-11-22).
    return comm_->wait_issued(issuing_abort_, options_.job_timeout_ms);
  }

  // The link between hosts, measured when a communicator is built. First two
  // broadcasts of probe_bytes from rank 0, the second timed on rank 0; then,
  // twice, rank 0's sends of probe_bytes to every rank of another process in
  // one group (the second timed): the fan-out, which is how the K split
  // scatters its slices (several connections at once run faster than one
  // broadcast ring over sockets).
  Status issue_probe(const ClusterJobSpec& spec, std::vector<RankWork>& works) {
    const size_t count = size_t(std::max<int64_t>(spec.probe_bytes, 4)) / kF;
    const int nlocal = comm_->local_size();
    const int nranks = comm_->nranks();
    const bool root = comm_->first_rank() == 0;
    for (auto& w : works) {
      SGEMM_ASSIGN_OR_RETURN(w.b, DeviceBuffer::allocate(w.lane->device(), count * kF, w.lane->comm()));
    }
    enum Phase { kBroadcast, kFanOut };
    for (Phase phase : {kBroadcast, kFanOut}) {
      if (phase == kFanOut && root && nranks == nlocal) break;  // no rank on another process
      for (int round = 0; round < 2; ++round) {
        Group group;
        SGEMM_RETURN_IF_ERROR(group.start());
        for (size_t i = 0; i < works.size(); ++i) {
          RankWork& w = works[i];
          ncclComm_t c = comm_->comm(int(i));
          cudaStream_t st = w.lane->comm();
          SGEMM_CUDA_TRY(cudaSetDevice(w.lane->device()));
          if (round == 1 && w.rank == 0) {
            Span sp;
            SGEMM_ASSIGN_OR_RETURN(sp.begin, w.lane->next_event());
            SGEMM_ASSIGN_OR_RETURN(sp.end, w.lane->next_event());
            SGEMM_CUDA_TRY(cudaEventRecord(sp.begin, st));
            (phase == kBroadcast ? w.comm : w.fanout).push_back(sp);
          }
          if (phase == kBroadcast) {
            SGEMM_NCCL_TRY(ncclBroadcast(w.b.floats(), w.b.floats(), count, ncclFloat, 0, c, st));
          } else if (w.rank == 0) {
            for (int r = nlocal; r < nranks; ++r) SGEMM_NCCL_TRY(ncclSend(w.b.floats(), count, ncclFloat, r, c, st));
          } else if (!root) {
            SGEMM_NCCL_TRY(ncclRecv(w.b.floats(), count, ncclFloat, 0, c, st));
          }
        }
        SGEMM_RETURN_IF_ERROR(end_group(group));
      }
      for (auto& w : works)
        if (w.rank == 0) {
          SGEMM_CUDA_TRY(cudaSetDevice(w.lane->device()));
          SGEMM_CUDA_TRY(cudaEventRecord((phase == kBroadcast ? w.comm : w.fanout).back().end, w.lane->comm()));
        }
    }
    return Status::Ok();
  }

  // C[rows x n] = alpha * A[rows x k] * B[k x n] + beta * C on the rank's
  // buffers (lda = pad4(k), ldb = ldc = pad4(n)), chunk_rows rows per launch.
  Status gemm(RankWork& w, const ClusterJobSpec& spec, int64_t rows, int64_t k, float beta) {
    const auto& s = spec.shape;
    const int64_t lda = pad4(k), ldb = pad4(s.n), ldc = ldb;
    const int64_t step = options_.chunk_rows > 0 ? options_.chunk_rows : rows;
    for (int64_t r0 = 0; r0 < rows; r0 += step) {
      const int64_t r1 = std::min(rows, r0 + step);
      GemmArgs args{GemmShape{r1 - r0, s.n, k}, spec.alpha, beta, w.a.floats() + r0 * lda, lda, w.b.floats(), ldb,
                    w.c.floats() + r0 * ldc,    ldc};
      GemmBackend* be = w.lane->backend(spec.kernel);
      if (!be || !be->can_implement(args).ok()) be = w.lane->backend(KernelKind::kCublas);
      if (!be) return Internal("no backend for the cluster job's kernel");
      SGEMM_RETURN_IF_ERROR(be->can_implement(args));
      const std::size_t need = be->workspace_bytes(args);
      SGEMM_ASSIGN_OR_RETURN(void* ws, w.lane->workspace(need));
      SGEMM_RETURN_IF_ERROR(be->run(args, ws, need, w.lane->compute()));
    }
    return Status::Ok();
  }

  Status issue_rows(const ClusterJobSpec& spec, const GemmJob* job, std::vector<RankWork>& works) {
    const auto& s = spec.shape;
    const int64_t lda = pad4(s.k), ldb = pad4(s.n), ldc = ldb;
    const bool root = comm_->first_rank() == 0;
    if (root && !job) return Internal("rank 0 without the request's matrices");
    const int nlocal = comm_->local_size();
    const int nranks = comm_->nranks();
    // Rows of the ranks on other processes (rank 0's process: ranks >= nlocal).
    const int64_t remote0 = root && nranks > nlocal ? spec.ranks[size_t(nlocal)].row_begin : s.m;
    const int64_t remote_rows = root ? s.m - remote0 : 0;
    for (auto& w : works) {
      const int dev = w.lane->device();
      const int64_t rows = w.shard.row_end - w.shard.row_begin;
      SGEMM_ASSIGN_OR_RETURN(w.b, DeviceBuffer::allocate(dev, size_t(s.k * ldb) * kF, w.lane->h2d()));
      if (rows > 0) {
        SGEMM_ASSIGN_OR_RETURN(w.a, DeviceBuffer::allocate(dev, size_t(rows * lda) * kF, w.lane->h2d()));
        SGEMM_ASSIGN_OR_RETURN(w.c, DeviceBuffer::allocate(dev, size_t(rows * ldc) * kF, w.lane->h2d()));
      }
      if (w.rank == 0 && remote_rows > 0) {
        SGEMM_ASSIGN_OR_RETURN(w.a_remote, DeviceBuffer::allocate(dev, size_t(remote_rows * lda) * kF, w.lane->h2d()));
        SGEMM_ASSIGN_OR_RETURN(w.c_remote, DeviceBuffer::allocate(dev, size_t(remote_rows * ldc) * kF, w.lane->h2d()));
      }
    }
    auto h2d = [&](RankWork& w, float* dst, int64_t ld, const float* src, int64_t width, int64_t rows) {
      if (rows <= 0) return Status::Ok();
      return SGEMM_CUDA_STATUS(cudaMemcpy2DAsync(dst, size_t(ld) * kF, src, size_t(width) * kF, size_t(width) * kF,
                                                 size_t(rows), cudaMemcpyHostToDevice, w.lane->h2d()));
    };
    // Host -> rank 0: B and the remote rows; host -> each local rank: its rows.
    if (root) {
      for (auto& w : works) {
        const int64_t r0 = w.shard.row_begin, rows = w.shard.row_end - w.shard.row_begin;
        SGEMM_RETURN_IF_ERROR(timed(w, w.in, w.lane->h2d(), [&]() -> Status {
          if (w.rank == 0) {
            SGEMM_RETURN_IF_ERROR(h2d(w, w.b.floats(), ldb, job->b, s.n, s.k));
            SGEMM_RETURN_IF_ERROR(h2d(w, w.a_remote.floats(), lda, job->a + remote0 * s.k, s.k, remote_rows));
            if (spec.has_c)
              SGEMM_RETURN_IF_ERROR(h2d(w, w.c_remote.floats(), ldc, job->c + remote0 * s.n, s.n, remote_rows));
          }
          SGEMM_RETURN_IF_ERROR(h2d(w, w.a.floats(), lda, job->a + r0 * s.k, s.k, rows));
          if (spec.has_c) SGEMM_RETURN_IF_ERROR(h2d(w, w.c.floats(), ldc, job->c + r0 * s.n, s.n, rows));
          return Status::Ok();
        }));
      }
    }
    for (auto& w : works) SGEMM_RETURN_IF_ERROR(after(w, w.lane->comm(), w.lane->h2d()));
    // Group 1: B from rank 0 to everyone; rows of A (and C) from rank 0 to the remote ranks.
    SGEMM_ASSIGN_OR_RETURN(std::vector<Span> spans, begin_spans(works));
    Group group1;
    SGEMM_RETURN_IF_ERROR(group1.start());
    for (size_t i = 0; i < works.size(); ++i) {
      RankWork& w = works[i];
      ncclComm_t c = comm_->comm(int(i));
      cudaStream_t st = w.lane->comm();
      const size_t rows = size_t(w.shard.row_end - w.shard.row_begin);
      SGEMM_NCCL_TRY(ncclBroadcast(w.b.floats(), w.b.floats(), size_t(s.k * ldb), ncclFloat, 0, c, st));
      if (w.rank == 0) {
        for (int r = nlocal; r < nranks; ++r) {
          const Shard& sh = spec.ranks[size_t(r)];
          const size_t n_rows = size_t(sh.row_end - sh.row_begin);
          if (n_rows == 0) continue;
          const int64_t off = sh.row_begin - remote0;
          SGEMM_NCCL_TRY(ncclSend(w.a_remote.floats() + off * lda, n_rows * size_t(lda), ncclFloat, r, c, st));
          if (spec.has_c)
            SGEMM_NCCL_TRY(ncclSend(w.c_remote.floats() + off * ldc, n_rows * size_t(ldc), ncclFloat, r, c, st));
        }
      } else if (!root && rows > 0) {
        SGEMM_NCCL_TRY(ncclRecv(w.a.floats(), rows * size_t(lda), ncclFloat, 0, c, st));
        if (spec.has_c) SGEMM_NCCL_TRY(ncclRecv(w.c.floats(), rows * size_t(ldc), ncclFloat, 0, c, st));
      }
    }
    SGEMM_RETURN_IF_ERROR(end_group(group1));
    SGEMM_RETURN_IF_ERROR(end_spans(works, spans));
    // Kernels: each rank its rows.
    for (auto& w : works) {
      if (w.shard.row_end <= w.shard.row_begin) continue;
      SGEMM_RETURN_IF_ERROR(after(w, w.lane->compute(), w.lane->comm()));
      SGEMM_RETURN_IF_ERROR(timed(w, w.kernel, w.lane->compute(), [&] {
        return gemm(w, spec, w.shard.row_end - w.shard.row_begin, s.k, spec.has_c ? spec.beta : 0.0f);
      }));
    }
    // Group 2: rows of C from the remote ranks back to rank 0.
    for (auto& w : works) SGEMM_RETURN_IF_ERROR(after(w, w.lane->comm(), w.lane->compute()));
    SGEMM_ASSIGN_OR_RETURN(spans, begin_spans(works));
    Group group2;
    SGEMM_RETURN_IF_ERROR(group2.start());
    for (size_t i = 0; i < works.size(); ++i) {
      RankWork& w = works[i];
      ncclComm_t c = comm_->comm(int(i));
      cudaStream_t st = w.lane->comm();
      const size_t rows = size_t(w.shard.row_end - w.shard.row_begin);
      if (w.rank == 0) {
        for (int r = nlocal; r < nranks; ++r) {
          const Shard& sh = spec.ranks[size_t(r)];
          const size_t n_rows = size_t(sh.row_end - sh.row_begin);
          if (n_rows == 0) continue;
          SGEMM_NCCL_TRY(ncclRecv(w.c_remote.floats() + (sh.row_begin - remote0) * ldc, n_rows * size_t(ldc), ncclFloat,
                                  r, c, st));
        }
      } else if (!root && rows > 0) {
        SGEMM_NCCL_TRY(ncclSend(w.c.floats(), rows * size_t(ldc), ncclFloat, 0, c, st));
      }
    }
    SGEMM_RETURN_IF_ERROR(end_group(group2));
    SGEMM_RETURN_IF_ERROR(end_spans(works, spans));
    if (!root) return Status::Ok();
    // Device -> host: every local rank its rows, rank 0 the remote rows too.
    auto d2h = [&](RankWork& w, float* dst, const float* src, int64_t rows) {
      if (rows <= 0) return Status::Ok();
      return SGEMM_CUDA_STATUS(cudaMemcpy2DAsync(dst, size_t(s.n) * kF, src, size_t(ldc) * kF, size_t(s.n) * kF,
                                                 size_t(rows), cudaMemcpyDeviceToHost, w.lane->d2h()));
    };
    for (auto& w : works) {
      SGEMM_RETURN_IF_ERROR(after(w, w.lane->d2h(), w.lane->compute()));
      SGEMM_RETURN_IF_ERROR(after(w, w.lane->d2h(), w.lane->comm()));
      SGEMM_RETURN_IF_ERROR(timed(w, w.out, w.lane->d2h(), [&]() -> Status {
        SGEMM_RETURN_IF_ERROR(
            d2h(w, job->c + w.shard.row_begin * s.n, w.c.floats(), w.shard.row_end - w.shard.row_begin));
        if (w.rank == 0) SGEMM_RETURN_IF_ERROR(d2h(w, job->c + remote0 * s.n, w.c_remote.floats(), remote_rows));
        return Status::Ok();
      }));
    }
    return Status::Ok();
  }

  // Records a span's begin on every rank's comm stream; end_spans() closes them.
  StatusOr<std::vector<Span>> begin_spans(std::vector<RankWork>& works) {
    std::vector<Span> spans(works.size());
    for (size_t i = 0; i < works.size(); ++i) {
      RankWork& w = works[i];
      SGEMM_CUDA_TRY(cudaSetDevice(w.lane->device()));
      SGEMM_ASSIGN_OR_RETURN(spans[i].begin, w.lane->next_event());
      SGEMM_ASSIGN_OR_RETURN(spans[i].end, w.lane->next_event());
      SGEMM_CUDA_TRY(cudaEventRecord(spans[i].begin, w.lane->comm()));
    }
    return spans;
  }
  Status end_spans(std::vector<RankWork>& works, const std::vector<Span>& spans) {
    for (size_t i = 0; i < works.size(); ++i) {
      RankWork& w = works[i];
      SGEMM_CUDA_TRY(cudaSetDevice(w.lane->device()));
      SGEMM_CUDA_TRY(cudaEventRecord(spans[i].end, w.lane->comm()));
      w.comm.push_back(spans[i]);
    }
    return Status::Ok();
  }

  // The K split (see the top of the file). Every process issues groups 1-3 in
  // this order; counts are computed from the spec alone, so a sender's and
  // its receiver's agree.
  Status issue_k(const ClusterJobSpec& spec, const GemmJob* job, std::vector<RankWork>& works) {
    const auto& s = spec.shape;
    const int64_t ldb = pad4(s.n), ldc = ldb;
    const bool root = comm_->first_rank() == 0;
    if (root && !job) return Internal("rank 0 without the request's matrices");
    const int nlocal = comm_->local_size();
    const int nranks = comm_->nranks();
    // Equal blocks of rows for the reduce-scatter; the partials have
    // nranks * block rows, those past m zero.
    const int64_t block = cluster_k_block_rows(s.m, nranks);
    const int64_t padded_rows = block * int64_t(nranks);
    auto slice = [&](int r) { return spec.ranks[size_t(r)].k_end - spec.ranks[size_t(r)].k_begin; };
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
    for (auto& w : works) {
      const int dev = w.lane->device();
      const int64_t ks = slice(w.rank);
      SGEMM_ASSIGN_OR_RETURN(w.a, DeviceBuffer::allocate(dev, size_t(s.m * pad4(ks)) * kF, w.lane->h2d()));
      SGEMM_ASSIGN_OR_RETURN(w.b, DeviceBuffer::allocate(dev, size_t(ks * ldb) * kF, w.lane->h2d()));
      SGEMM_ASSIGN_OR_RETURN(w.c, DeviceBuffer::allocate(dev, size_t(padded_rows * ldc) * kF, w.lane->h2d()));
      if (w.rank == 0 && a_total > 0) {
        SGEMM_ASSIGN_OR_RETURN(w.a_remote, DeviceBuffer::allocate(dev, size_t(a_total) * kF, w.lane->h2d()));
        SGEMM_ASSIGN_OR_RETURN(w.b_remote, DeviceBuffer::allocate(dev, size_t(b_total) * kF, w.lane->h2d()));
      }
    }
    // dst[rows x width] (pitch dld) <- host src (pitch sld), all in floats.
    auto h2d = [&](RankWork& w, float* dst, int64_t dld, const float* src, int64_t sld, int64_t width, int64_t rows) {
      return SGEMM_CUDA_STATUS(cudaMemcpy2DAsync(dst, size_t(dld) * kF, src, size_t(sld) * kF, size_t(width) * kF,
                                                 size_t(rows), cudaMemcpyHostToDevice, w.lane->h2d()));
    };
    // Rank r's columns [k_begin, k_end) of A and rows of B, from the host.
    auto slices_in = [&](RankWork& w, int r, float* a, float* b) -> Status {
      const Shard& sh = spec.ranks[size_t(r)];
      const int64_t ks = sh.k_end - sh.k_begin;
      SGEMM_RETURN_IF_ERROR(h2d(w, a, pad4(ks), job->a + sh.k_begin, s.k, ks, s.m));
      return h2d(w, b, ldb, job->b + sh.k_begin * s.n, s.n, s.n, ks);
    };
    // Zeroed partials (the padding rows reduce to zero; rank 0's hold C for
    // beta), then the slices: every local rank its own, rank 0 the remote ones.
    for (auto& w : works) {
      SGEMM_RETURN_IF_ERROR(timed(w, w.in, w.lane->h2d(), [&]() -> Status {
        SGEMM_CUDA_TRY(cudaMemsetAsync(w.c.floats(), 0, size_t(padded_rows * ldc) * kF, w.lane->h2d()));
        if (!root) return Status::Ok();
        SGEMM_RETURN_IF_ERROR(slices_in(w, w.rank, w.a.floats(), w.b.floats()));
        if (w.rank != 0) return Status::Ok();
        if (spec.has_c) SGEMM_RETURN_IF_ERROR(h2d(w, w.c.floats(), ldc, job->c, s.n, s.n, s.m));
        for (int r = nlocal; r < nranks; ++r)
          SGEMM_RETURN_IF_ERROR(
              slices_in(w, r, w.a_remote.floats() + a_off[size_t(r)], w.b_remote.floats() + b_off[size_t(r)]));
        return Status::Ok();
      }));
    }
    for (auto& w : works) SGEMM_RETURN_IF_ERROR(after(w, w.lane->comm(), w.lane->h2d()));
    // Group 1: the remote ranks' slices of A and B from rank 0.
    SGEMM_ASSIGN_OR_RETURN(std::vector<Span> spans, begin_spans(works));
    Group group1;
    SGEMM_RETURN_IF_ERROR(group1.start());
    for (size_t i = 0; i < works.size(); ++i) {
      RankWork& w = works[i];
      ncclComm_t c = comm_->comm(int(i));
      cudaStream_t st = w.lane->comm();
      if (w.rank == 0) {
        for (int r = nlocal; r < nranks; ++r) {
          SGEMM_NCCL_TRY(
              ncclSend(w.a_remote.floats() + a_off[size_t(r)], size_t(s.m * pad4(slice(r))), ncclFloat, r, c, st));
          SGEMM_NCCL_TRY(ncclSend(w.b_remote.floats() + b_off[size_t(r)], size_t(slice(r) * ldb), ncclFloat, r, c, st));
        }
      } else if (!root) {
        SGEMM_NCCL_TRY(ncclRecv(w.a.floats(), size_t(s.m * pad4(slice(w.rank))), ncclFloat, 0, c, st));
        SGEMM_NCCL_TRY(ncclRecv(w.b.floats(), size_t(slice(w.rank) * ldb), ncclFloat, 0, c, st));
      }
    }
    SGEMM_RETURN_IF_ERROR(end_group(group1));
    SGEMM_RETURN_IF_ERROR(end_spans(works, spans));
    // Kernels: every rank its partial over all m rows; beta * C once, on rank 0.
    for (auto& w : works) {
      SGEMM_RETURN_IF_ERROR(after(w, w.lane->compute(), w.lane->comm()));
      const float beta = w.rank == 0 && spec.has_c ? spec.beta : 0.0f;
      SGEMM_RETURN_IF_ERROR(
          timed(w, w.kernel, w.lane->compute(), [&] { return gemm(w, spec, s.m, slice(w.rank), beta); }));
    }
    // Group 2: the partials summed, rank r keeping block r (in place).
    for (auto& w : works) SGEMM_RETURN_IF_ERROR(after(w, w.lane->comm(), w.lane->compute()));
    SGEMM_ASSIGN_OR_RETURN(spans, begin_spans(works));
    Group group2;
    SGEMM_RETURN_IF_ERROR(group2.start());
    for (size_t i = 0; i < works.size(); ++i) {
      RankWork& w = works[i];
      const size_t count = size_t(block * ldc);
      SGEMM_NCCL_TRY(ncclReduceScatter(w.c.floats(), w.c.floats() + size_t(w.rank) * count, count, ncclFloat, ncclSum,
                                       comm_->comm(int(i)), w.lane->comm()));
    }
    SGEMM_RETURN_IF_ERROR(end_group(group2));
    SGEMM_RETURN_IF_ERROR(end_spans(works, spans));
    // Group 3: the remote ranks' blocks to rank 0, into the same rows of its partials.
    SGEMM_ASSIGN_OR_RETURN(spans, begin_spans(works));
    Group group3;
    SGEMM_RETURN_IF_ERROR(group3.start());
    for (size_t i = 0; i < works.size(); ++i) {
      RankWork& w = works[i];
      ncclComm_t c = comm_->comm(int(i));
      cudaStream_t st = w.lane->comm();
      if (w.rank == 0) {
        for (int r = nlocal; r < nranks; ++r)
          if (block_rows(r) > 0)
            SGEMM_NCCL_TRY(ncclRecv(w.c.floats() + r * block * ldc, size_t(block_rows(r) * ldc), ncclFloat, r, c, st));
      } else if (!root && block_rows(w.rank) > 0) {
        SGEMM_NCCL_TRY(
            ncclSend(w.c.floats() + w.rank * block * ldc, size_t(block_rows(w.rank) * ldc), ncclFloat, 0, c, st));
      }
    }
    SGEMM_RETURN_IF_ERROR(end_group(group3));
    SGEMM_RETURN_IF_ERROR(end_spans(works, spans));
    if (!root) return Status::Ok();
    // Device -> host: every local rank its block, rank 0 the remote blocks too.
    auto d2h = [&](RankWork& w, int64_t row0, int64_t rows) {
      if (rows <= 0) return Status::Ok();
      return SGEMM_CUDA_STATUS(cudaMemcpy2DAsync(job->c + row0 * s.n, size_t(s.n) * kF, w.c.floats() + row0 * ldc,
                                                 size_t(ldc) * kF, size_t(s.n) * kF, size_t(rows),
                                                 cudaMemcpyDeviceToHost, w.lane->d2h()));
    };
    for (auto& w : works) {
      SGEMM_RETURN_IF_ERROR(after(w, w.lane->d2h(), w.lane->comm()));
      SGEMM_RETURN_IF_ERROR(timed(w, w.out, w.lane->d2h(), [&]() -> Status {
        SGEMM_RETURN_IF_ERROR(d2h(w, w.rank * block, block_rows(w.rank)));
        if (w.rank == 0) SGEMM_RETURN_IF_ERROR(d2h(w, nlocal * block, s.m - std::min(s.m, nlocal * block)));
        return Status::Ok();
      }));
    }
    return Status::Ok();
  }

  // Every stream of every rank done; or the abort token, the request's
  // cancellation, an NCCL error or the deadline: abort the communicator (the
  // collectives end) and drain.
  Status wait_all(std::vector<RankWork>& works, const CancelToken* abort, const CancelToken* cancel) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.job_timeout_ms);
    Status why;
    for (;;) {
      bool busy = false;
      for (auto& w : works) {
        SGEMM_CUDA_TRY(cudaSetDevice(w.lane->device()));
        for (cudaStream_t st : w.lane->streams()) {
          const cudaError_t r = cudaStreamQuery(st);
          if (r == cudaErrorNotReady) {
            (void)cudaGetLastError();
            busy = true;
          } else if (r != cudaSuccess) {
            return SGEMM_CUDA_STATUS(r);
          }
        }
      }
      if (!busy) return Status::Ok();
      if (abort && !abort->status().ok())
        why = abort->status();
      else if (cancel && !cancel->status().ok())
        why = cancel->status();
      else if (Status e = comm_->async_error(); !e.ok())
        why = e;
      else if (std::chrono::steady_clock::now() >= deadline)
        why = Unavailable("the cluster job did not finish within " + std::to_string(options_.job_timeout_ms) + " ms");
      if (!why.ok()) break;
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    comm_->abort();
    for (auto& w : works) {
      (void)cudaSetDevice(w.lane->device());
      for (cudaStream_t st : w.lane->streams()) (void)cudaStreamSynchronize(st);
      (void)cudaGetLastError();
    }
    return why;
  }

  Status collect(std::vector<RankWork>& works, const ClusterJobSpec& spec, ClusterRunResult* out) {
    for (auto& w : works) {
      SGEMM_CUDA_TRY(cudaSetDevice(w.lane->device()));
      auto sum = [&](const std::vector<Span>& spans, double* into) -> Status {
        double t = 0;
        for (const Span& sp : spans) {
          float ms = 0;
          SGEMM_CUDA_TRY(cudaEventElapsedTime(&ms, sp.begin, sp.end));
          t += ms;
        }
        *into = t;
        return Status::Ok();
      };
      SGEMM_RETURN_IF_ERROR(sum(w.in, &w.timing.copy_in_ms));
      SGEMM_RETURN_IF_ERROR(sum(w.kernel, &w.timing.kernel_ms));
      SGEMM_RETURN_IF_ERROR(sum(w.comm, &w.timing.reduce_ms));
      SGEMM_RETURN_IF_ERROR(sum(w.out, &w.timing.copy_out_ms));
      if (spec.kind == ClusterJobKind::kProbe && w.rank == 0) {
        out->elapsed_ms = w.timing.reduce_ms;
        SGEMM_RETURN_IF_ERROR(sum(w.fanout, &out->fanout_ms));
      }
      if (spec.kind != ClusterJobKind::kProbe) out->timings.push_back(w.timing);
    }
    return Status::Ok();
  }

  const CudaClusterPlaneOptions options_;
  std::unique_ptr<DevicePool> pool_;
  std::unique_ptr<NcclClusterComm> comm_;       // the current epoch's; null between epochs
  const CancelToken* issuing_abort_ = nullptr;  // the running job's, while run() issues it
  uint64_t epoch_ = 0;
};

}  // namespace

StatusOr<std::unique_ptr<ClusterDataPlane>> make_cuda_cluster_plane(const CudaClusterPlaneOptions& options) {
  if (options.job_timeout_ms < 1 || options.chunk_rows < 0)
    return InvalidArgument("job_timeout_ms must be >= 1 and chunk_rows >= 0");
  DevicePoolOptions po;
  po.devices = options.devices;
  po.lanes_per_device = 1;  // cluster jobs run one at a time
  SGEMM_ASSIGN_OR_RETURN(std::unique_ptr<DevicePool> pool, DevicePool::create(po));
  // Before serving: else the first cluster communicator pays NCCL's one-time costs beside requests (warm_up).
  const auto t0 = std::chrono::steady_clock::now();
  if (Status warm = NcclClusterComm::warm_up(pool->ordinals()); !warm.ok())
    return warm.with_context("cluster data plane: NCCL on this process's GPUs");
  const auto warm_ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
  if (options.log)
    options.log("cluster data plane: " + std::to_string(pool->size()) + " GPU(s), one NCCL rank each (NCCL ready in " +
                std::to_string(warm_ms.count()) + " ms)");
  return std::unique_ptr<ClusterDataPlane>(new CudaClusterPlane(options, std::move(pool)));
}

}  // namespace sgemm
