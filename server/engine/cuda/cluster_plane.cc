// The CUDA data plane of cluster mode (docs/cluster.md): this process's GPUs
// as ranks of an NcclClusterComm, and each job run as a JobRun of its local
// ranks through a row of the executor table (cluster_rows_executor.cc,
// cluster_k_executor.cc), which watches its peers: every wait polls the job's
// abort token and NCCL's asynchronous error and has a deadline; giving up
// aborts the communicator (ncclCommAbort), so the streams drain and buffers
// are freed.
//
// The probe (at every new communicator) measures the link between hosts: two
// broadcasts of probe_bytes from rank 0, the second timed; then, twice, rank
// 0's sends of probe_bytes to every rank of another process in one group (the
// second timed): the fan-out, which is how the K split scatters its slices
// (several connections at once run faster than one broadcast ring over
// sockets). Every process issues the same calls in the same order.
#include <algorithm>
#include <chrono>

#include "server/comm/nccl_cluster_comm.h"
#include "server/devices/device_pool.h"
#include "server/engine/cuda/cuda_cluster_plane.h"
#include "server/engine/cuda/job_run.h"
#include "server/engine/cuda/split_executor.h"

namespace sgemm {
namespace {

Status issue_probe(JobRun& run, int64_t probe_bytes) {
  Communicator* comm = run.comm();
  auto& works = run.works();
  const size_t count = size_t(std::max<int64_t>(probe_bytes, 4)) / kFloatBytes;
  const int nlocal = comm->local_size();
  const int nranks = comm->size();
  const bool root = comm->first_rank() == 0;
  for (auto& w : works) {
    SGEMM_ASSIGN_OR_RETURN(w.b, DeviceBuffer::allocate(w.lane->device(), count * kFloatBytes, w.lane->comm()));
  }
  enum Phase { kBroadcast, kFanOut };
  for (Phase phase : {kBroadcast, kFanOut}) {
    if (phase == kFanOut && root && nranks == nlocal) break;  // no rank on another process
    for (int round = 0; round < 2; ++round) {
      std::vector<Span> spans;
      if (round == 1) SGEMM_RETURN_IF_ERROR(run.begin_comm_spans(&spans));
      NcclGroup group;
      SGEMM_RETURN_IF_ERROR(group.start_status());
      for (auto& w : works) {
        ncclComm_t c = comm->comm(w.rank);
        cudaStream_t st = w.lane->comm();
        if (phase == kBroadcast) {
          SGEMM_NCCL_TRY(ncclBroadcast(w.b.floats(), w.b.floats(), count, ncclFloat, 0, c, st));
        } else if (w.rank == 0) {
          for (int r = nlocal; r < nranks; ++r) SGEMM_NCCL_TRY(ncclSend(w.b.floats(), count, ncclFloat, r, c, st));
        } else if (!root) {
          SGEMM_NCCL_TRY(ncclRecv(w.b.floats(), count, ncclFloat, 0, c, st));
        }
      }
      SGEMM_RETURN_IF_ERROR(run.end_group(group));
      if (round == 1) SGEMM_RETURN_IF_ERROR(run.end_comm_spans(spans));
    }
  }
  return Status::Ok();
}

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
  StatusOr<ClusterRunResult> run(const ClusterJobSpec& spec, const GemmJob* root_job, const CancelToken* abort) {
    if (!comm_ || comm_->aborted()) return Unavailable("no cluster communicator (it is rebuilt before the next job)");
    if (spec.epoch != epoch_)
      return Unavailable("job for communicator epoch " + std::to_string(spec.epoch) + ", this process is on " +
                         std::to_string(epoch_));
    const bool probe = spec.kind == ClusterJobKind::kProbe;
    if (!probe && int(spec.ranks.size()) != comm_->size())
      return Internal("cluster job with " + std::to_string(spec.ranks.size()) + " shards for " +
                      std::to_string(comm_->size()) + " ranks");
    if (spec.kind == ClusterJobKind::kK)  // refused before any NCCL call: the communicator stays usable
      for (const Shard& sh : spec.ranks)
        if (sh.k_end <= sh.k_begin || sh.row_begin != 0 || sh.row_end != spec.shape.m)
          return Internal("cluster K-split job with an empty K slice or a partial row range");
    const SplitExecutor* executor =
        probe ? nullptr
              : find_split_executor(spec.kind == ClusterJobKind::kK ? SplitMode::kK : SplitMode::kRows,
                                    /*spans_processes=*/true);
    if (!probe && !executor) return Internal("no executor for the cluster job's split");
    // The spec is what every process runs; rank 0's job adds the host
    // matrices and the request's cancellation. Rows are reported by the
    // caller once the whole job is done (ClusterEngine), not through the sink.
    GemmJob job = root_job ? *root_job : GemmJob{};
    job.request.shape = spec.shape;
    job.request.alpha = spec.alpha;
    job.request.beta = spec.beta;
    job.request.has_c = spec.has_c;
    job.feed = nullptr;
    job.sink = nullptr;
    JobSettings set;
    set.kind = spec.kernel;
    set.chunk_rows = options_.chunk_rows;
    std::vector<LaneLease> leases;  // declared before the JobRun: outlive its buffers
    JobRun jr(job, set, comm_.get());
    for (int i = 0; i < comm_->local_size(); ++i) {
      SGEMM_ASSIGN_OR_RETURN(LaneLease l, pool_->acquire(i, abort));
      leases.push_back(std::move(l));
      const int rank = comm_->first_rank() + i;
      jr.add(&*leases.back(), rank, probe ? Shard{} : spec.ranks[size_t(rank)], pool_->info(i));
    }
    // The coordinator picked the kernel from its own GPUs; where one of ours
    // does not have it, cuBLAS runs the job here and the report says so.
    bool kernel_missing = false;
    for (const LaneLease& l : leases) kernel_missing = kernel_missing || (!probe && !l->backend(spec.kernel));
    if (kernel_missing) jr.set_kind(KernelKind::kCublas);
    if (!probe) jr.set_rank_shards(spec.ranks);
    jr.watch_peers(abort, options_.job_timeout_ms);
    std::vector<std::pair<std::string, double>> host_ms;
    HostSteps steps(&host_ms);
    const auto t0 = std::chrono::steady_clock::now();
    const Status ran = probe ? jr.execute([&](JobRun& r) { return issue_probe(r, spec.probe_bytes); }, steps)
                             : jr.execute(*executor, steps);
    ClusterRunResult out;
    out.elapsed_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (!ran.ok()) return ran;  // the JobRun aborted the communicator
    out.fallback_used = (kernel_missing && spec.kernel != KernelKind::kCublas) || jr.fallback_used();
    std::vector<DeviceTiming> timings = jr.timings();
    out.kernel_rows = jr.kernel_rows();
    if (!probe) {
      out.timings = std::move(timings);
      return out;
    }
    // The probe's timed broadcast and fan-out: rank 0's collectives, in order.
    if (comm_->first_rank() == 0) {
      std::vector<double> ms;
      for (const Step& st : timings[0].steps)
        if (st.kind == StepKind::kCollective) ms.push_back(st.end_ms - st.start_ms);
      if (!ms.empty()) out.elapsed_ms = ms[0];
      if (ms.size() > 1) out.fanout_ms = ms[1];
    }
    return out;
  }

  const CudaClusterPlaneOptions options_;
  std::unique_ptr<DevicePool> pool_;
  std::unique_ptr<NcclClusterComm> comm_;  // the current epoch's; null between epochs
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
