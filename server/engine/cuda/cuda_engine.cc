// The multi-GPU CUDA engine. See cuda_engine.h for threads and ownership and
// docs/engine.md for the design. run() validates nothing twice: it resolves
// the kernel, asks the planner (server/planner/) for a plan, leases lanes and
// hands the job to the plan's executor (split_executor.h), which turns it into
// stream work through JobRun.
#include "server/engine/cuda/cuda_engine.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <mutex>

#include "kernels/cuda_status.h"
#include "kernels/gemm_backend.h"
#include "server/comm/nccl_comm.h"
#include "server/devices/device_pool.h"
#include "server/devices/pinned_host_pool.h"
#include "server/engine/cuda/batch_executor.h"
#include "server/engine/cuda/device_buffer_jobs.h"
#include "server/engine/cuda/job_run.h"
#include "server/engine/cuda/kernel_tuner.h"
#include "server/engine/cuda/pool_health.h"
#include "server/engine/cuda/resident_gpu.h"
#include "server/engine/cuda/split_executor.h"
#include "server/engine/kernel_site.h"
#include "server/planner/kernel_choice.h"

namespace sgemm {
namespace {

class CudaEngine final : public Engine {
 public:
  CudaEngine(CudaEngineOptions options, std::unique_ptr<DevicePool> pool, std::unique_ptr<NcclCommunicator> comm,
             KernelKind default_kind, FaultInjection faults)
      : options_(std::move(options)),
        pool_(std::move(pool)),
        comm_(std::move(comm)),
        host_pool_(options_.pinned_cache_bytes),
        default_kind_(default_kind),
        site_{pool_->kernels(), default_kind, options_.kernel_speeds},
        tuner_(KernelTunerOptions{.max_bytes = options_.autotune_max_bytes}),
        health_(std::make_unique<PoolHealth>(pool_.get(), comm_.get(), faults,
                                             PoolHealthOptions{options_.collective_timeout, options_.log})),
        store_(ResidentStoreOptions{options_.resident_bytes, pool_->ordinals()}),
        device_jobs_(std::make_unique<DeviceBufferJobs>(
            pool_.get(), DeviceBufferJobOptions{site_, options_.planner, options_.gpu_tflops, options_.peer_gbps})) {
    batch_ = std::make_unique<BatchExecutor>(pool_.get(), &store_, options_.batch_max_pieces);
  }

  ~CudaEngine() override {
    health_->stop();       // the watchdog, before the communicator goes
    batch_.reset();        // its cuBLAS handles while the devices are ours
    store_.clear();        // resident pieces (device memory) while the devices are ours
    device_jobs_.reset();  // IPC mappings are held by jobs, not here; its cuBLAS handles go
    comm_.reset();         // communicators before the pool's streams
    pool_.reset();
    health_.reset();
  }

  EngineInfo info() const override {
    EngineInfo info;
    info.backend = "cuda";
    for (int i = 0; i < pool_->size(); ++i) {
      info.devices.push_back(pool_->info(i));
      const bool healthy = health_->devices().healthy(i);
      info.unhealthy.push_back(healthy ? std::string() : health_->devices().reason(i));
      // A device out of service is not asked: its context may be lost.
      if (healthy) info.devices.back().memory_used_bytes = pool_->memory_used(i);
    }
    info.default_kernel = default_kind_;
    info.kernel_speeds = options_.kernel_speeds;
    info.kernels.push_back(default_kind_);
    for (KernelKind k : pool_->kernels())
      if (k != default_kind_) info.kernels.push_back(k);
    info.startup_ms = startup_ms_;
    info.pinned_pool_bytes = int64_t(host_pool_.stats().arena_bytes);
    for (Precision p : all_precisions()) {
      const std::vector<KernelKind> serving = kernels_serving(p, pool_->kernels());
      if (serving.empty()) continue;
      info.precisions.push_back(p);
      info.contracts.push_back(PrecisionContractInfo{p, serving});
    }
    return info;
  }

  HostAllocator& host_allocator() override { return host_pool_; }
  // cuBLAS (which takes blocks our kernels refuse) indexes with int.
  int64_t max_leading_dimension() const override { return INT32_MAX; }
  ResidentStore* resident_store() override { return &store_; }
  DeviceMemoryAccess* device_memory() override { return device_jobs_.get(); }

  // A new resident matrix goes whole to the GPU its bytes were reserved on
  // (the one with the most room); plans move it as they need (run()).
  StatusOr<std::shared_ptr<ResidentData>> make_resident(std::shared_ptr<HostBuffer> host, int64_t rows, int64_t cols,
                                                        ResidentBytes bytes) override {
    if (!host || int64_t(host->bytes()) < rows * cols * int64_t(sizeof(float)))
      return Internal("make_resident: the host buffer is smaller than the matrix");
    return upload_resident(*host, rows, cols, std::move(bytes));
  }

  // One cudaHostRegister with cudaHostRegisterPortable page-locks the range
  // for every device of the process (a second call for another device would
  // fail with cudaErrorHostMemoryAlreadyRegistered), so copies on any lane
  // run at the pinned rate straight from and into it.
  Status register_host_memory(void* data, std::size_t bytes) override {
    if (!data || bytes == 0) return InvalidArgument("register_host_memory: an empty range");
    SGEMM_CUDA_TRY(cudaSetDevice(pool_->ordinal(0)));
    const cudaError_t e = cudaHostRegister(data, bytes, cudaHostRegisterPortable);
    if (e == cudaErrorMemoryAllocation || e == cudaErrorHostMemoryAlreadyRegistered) {
      (void)cudaGetLastError();
      return ResourceExhausted("cannot page-lock " + std::to_string(bytes) +
                               " bytes of a shared-memory region: " + cudaGetErrorString(e));
    }
    return SGEMM_CUDA_STATUS(e);
  }

  Status unregister_host_memory(void* data) override {
    SGEMM_CUDA_TRY(cudaSetDevice(pool_->ordinal(0)));
    return SGEMM_CUDA_STATUS(cudaHostUnregister(data));
  }

  // Start-up, after construction and before the engine is shared: warm-up
  // and the pinned pool (see CudaEngineOptions).
  Status start(std::chrono::steady_clock::time_point t0) {
    if (options_.warm_up) {
      SGEMM_RETURN_IF_ERROR(pool_->warm_up());
      if (comm_) SGEMM_RETURN_IF_ERROR(comm_->warm_up());  // NCCL's connections, set up on first use
    }
    // Without the pool requests still run (pinning their buffers as they come): say so, go on.
    if (Status s = host_pool_.reserve(options_.pinned_pool_bytes); !s.ok() && options_.log)
      options_.log("cuda engine: " + s.message() + "; request buffers are pinned as they come");
    startup_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return Status::Ok();
  }

  Status validate(const GemmRequest& r) const override {
    if (r.batch) return batch_->validate(r);  // batch_executor.h
    SGEMM_RETURN_IF_ERROR(check_gemm_request(r));
    // Forced kRows/kK on a one-GPU pool is accepted and runs on that GPU (the
    // plan reason says so); see docs/engine.md.
    if (r.options.split != SplitMode::kAuto && !find_split_executor(r.options.split))
      return FailedPrecondition("split '" + std::string(split_mode_name(r.options.split)) +
                                "' is not available on the cuda backend");
    SGEMM_ASSIGN_OR_RETURN(const KernelKind kind, resolve_kernel(r));
    // Ask the kernel about the shape as the engine lays it out: dense device
    // buffers whose leading dimensions are padded to 4 floats. can_implement
    // is pure and reads no memory; the probe pointers only need to be non-null.
    const GemmBackend* be = pool_->probe_backend(kind);
    if (!be) return Internal("no backend to ask for kernel '" + std::string(kernel_kind_name(kind)) + "'");
    return be->can_implement(engine_probe_args(r.shape, r.alpha, r.beta));
  }

  StatusOr<GemmReport> run(const GemmJob& job) override {
    if (job.request.batch) return batch_->run(job, health_->healthy_devices());  // batch_executor.h
    if (job.device) return device_jobs_->run(job);  // operands in a caller's GPU memory: device_buffer_jobs.h
    const GemmRequest& r = job.request;
    // validate() ran before the data moved; here only what run() relies on is
    // re-checked (cheaply), and a miss is our bug. A block the kernel refuses
    // is caught per block (JobRun::run_gemm).
    const Status rules = check_gemm_request(r);
    StatusOr<KernelKind> resolved = rules.ok() ? resolve_kernel(r) : StatusOr<KernelKind>(rules);
    if (!resolved.ok())
      return Internal("a request that was not validated reached run(): " + resolved.status().to_string());
    if ((!job.a && !job.a_resident) || (!job.b && !job.b_resident) || !job.c)
      return Internal("a job without its host matrices reached run()");
    KernelKind kind = *resolved;
    GemmReport report;
    HostSteps steps(&report.host_ms);
    report.backend = "cuda";
    report.kernel = kind;
    report.precision = r.options.precision;

    // Only healthy devices are planned over; a split needs the communicator
    // to cover exactly them (it is rebuilt when one drops out).
    const std::vector<int> healthy = health_->healthy_devices();
    if (healthy.empty()) return Unavailable(health_->no_device_left());
    health_->ensure_comm(healthy, job.cancel);
    const Plan plan = make_plan(plan_request(job, healthy), options_.planner);
    steps.stamp("plan");
    // Resident operands laid out as the plan needs (docs/resident.md); held
    // until run() returns so a layout change by another job cannot free them.
    std::shared_ptr<const GpuResident> res_b, res_a, res_c;
    SGEMM_RETURN_IF_ERROR(bind_resident(job, plan, &res_a, &res_b, &res_c));
    if (job.a_resident || job.b_resident || job.c_resident) steps.stamp("resident");
    const SplitExecutor* executor = find_split_executor(plan.mode);
    if (!executor)
      return Internal("no executor for the planned split '" + std::string(split_mode_name(plan.mode)) + "'");
    report.split = plan.mode;
    report.plan_reason = plan.reason;
    // A request that names no kernel: select_kernel on the shape one kernel
    // launch computes (the plan's largest block); an FFMA pick from the speeds is
    // then timed against the other FFMA kernel on the GPU where the tuner has
    // not seen that shape yet.
    const bool chosen_by_shape =
        !r.options.kernel && (r.options.precision == Precision::kFp32 || r.options.precision == Precision::kFp32Ffma);
    const GemmShape block =
        kernel_block_shape(plan, r.shape, options_.chunk_rows, options_.chunk_k, options_.planner.pipeline_chunks);
    if (chosen_by_shape) {
      StatusOr<KernelSelection> sel = select_kernel(site_.query(r, block, pool_->info(0)));
      if (!sel.ok()) return Internal("the kernel selection failed after validation: " + sel.status().to_string());
      kind = sel->kind;
      report.plan_reason += sel->reason;
    }

    JobSettings set;
    set.kind = kind;
    set.kernel_explicit = r.options.kernel.has_value();
    set.chunk_rows = options_.chunk_rows;
    set.chunk_k = options_.chunk_k;
    set.pipeline_chunks = options_.planner.pipeline_chunks;
    set.k_reduce = options_.k_reduce;
    set.blocks_ahead = options_.blocks_ahead;

    std::unique_lock<std::mutex> order;  // held for jobs that span the pool: NCCL order
    std::vector<LaneLease> leases;       // declared before the JobRun: outlive its buffers
    std::vector<int> used;               // pool index of each lease (rank order for a split)
    JobRun jr(job, set, comm_.get());
    if (!executor->spans_pool) {
      const int idx = index_of(plan.shards[0].device);
      if (idx < 0) return Internal("planner chose an unknown device");
      SGEMM_ASSIGN_OR_RETURN(LaneLease lease, pool_->acquire(idx, job.cancel));
      leases.push_back(std::move(lease));
      used.push_back(idx);
      jr.add(&*leases.back(), idx, plan.shards[0], pool_->info(idx));
    } else {
      const auto t_order = std::chrono::steady_clock::now();
      SGEMM_ASSIGN_OR_RETURN(order, health_->lock_order(job.cancel));
      jr.set_order_wait_ms(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_order).count());
      if (!health_->comm_covers(healthy) || plan.shards.size() != healthy.size())
        return Unavailable("the split plan's devices changed while it waited (a GPU failed); retry");
      for (std::size_t rank = 0; rank < healthy.size(); ++rank) {
        SGEMM_ASSIGN_OR_RETURN(LaneLease lease, pool_->acquire(healthy[rank], job.cancel));
        leases.push_back(std::move(lease));
        used.push_back(healthy[rank]);
      }
      for (std::size_t rank = 0; rank < healthy.size(); ++rank)
        jr.add(&*leases[rank], int(rank), plan.shards[rank], pool_->info(healthy[rank]));
    }
    if (res_a)
      for (ShardWork& w : jr.works()) {
        const GpuPiece* piece = res_a->find(w.lane->device(), 0, job.a_resident->rows);
        if (!piece) return Internal("resident A has no whole copy on GPU " + std::to_string(w.lane->device()));
        w.a_resident = piece->data + job.a_at.row * piece->ld + job.a_at.col;  // the operand's first element
        w.a_resident_ld = piece->ld;
      }
    if (res_b && !b_in_place(job))
      for (ShardWork& w : jr.works()) {
        const GpuPiece* piece = res_b->find(w.lane->device(), 0, job.b_resident->rows);
        if (!piece) return Internal("resident B has no whole copy on GPU " + std::to_string(w.lane->device()));
        w.b_copy = piece->data + job.b_at.row * piece->ld + job.b_at.col;
        w.b_copy_ld = piece->ld;
      }
    if (res_b && b_in_place(job))
      for (ShardWork& w : jr.works()) {
        const int64_t k0 = plan.mode == SplitMode::kK ? w.shard.k_begin : 0;
        const int64_t k1 = plan.mode == SplitMode::kK ? w.shard.k_end : r.shape.k;
        if (k1 <= k0) continue;  // an empty K slice reads no B
        const GpuPiece* piece = res_b->find(w.lane->device(), k0, k1);
        if (!piece) return Internal("resident B has no piece for GPU " + std::to_string(w.lane->device()));
        w.b_resident = piece->data;
        w.b_resident_row0 = piece->where.row_begin;
      }
    steps.stamp("lanes");
    if (chosen_by_shape) {
      kind = tuned_kernel(*leases[0], block, r.beta != 0.0f, kind, &report.plan_reason);
      jr.set_kind(kind);
      steps.stamp("kernel choice");
    }
    report.kernel = kind;
    if (r.op_a == Op::kT || r.op_b == Op::kT)
      report.plan_reason += std::string("; op_a = ") + std::string(op_name(r.op_a)) +
                            ", op_b = " + std::string(op_name(r.op_b)) +
                            ": transposed operands are transposed on the GPU as they "
                            "come in, the kernel multiplies n,n";
    if (const GemmBackend* be = leases[0]->backend(kind))
      report.kernel_row = be->kernel_name(engine_probe_args(block, r.alpha, r.beta));
    SGEMM_RETURN_IF_ERROR(health_->guarded(executor->spans_pool, leases, used, &order, job.cancel,
                                           [&] { return jr.execute(*executor, steps); }));
    // The lanes go back before the report is put together: the job's events
    // are read (execute collected the timings) and its buffers freed, so the
    // next job waiting for a lane need not wait for this one's report.
    leases.clear();
    // What ran, launch by launch; the plan's largest block names it only where
    // no launch was counted.
    report.kernel_rows = jr.kernel_rows();
    if (!report.kernel_rows.empty()) report.kernel_row = most_launched_row(report.kernel_rows);
    if (jr.fallback_used()) {
      report.kernel = KernelKind::kCublas;
      report.precision = Precision::kFp32Ffma;
      report.plan_reason += "; " + std::string(kernel_kind_name(kind)) + " refused some blocks: cublas ran them";
      if (options_.log) options_.log("cuda engine: " + report.plan_reason);
    }
    report.devices = jr.timings();
    return report;
  }

  // The measured speeds' pick `table`, or the other fp32 kernel where the tuner
  // timed both on `lane`'s GPU for `block` and the other was faster
  // (kernel_tuner.h). A failed measurement is logged and the pick runs.
  KernelKind tuned_kernel(Lane& lane, const GemmShape& block, bool beta_nonzero, KernelKind table,
                          std::string* reason) {
    if (!options_.kernel_autotune) return table;
    const KernelKind other = table == KernelKind::kCublas ? KernelKind::kPingpong : KernelKind::kCublas;
    if ((table != KernelKind::kCublas && table != KernelKind::kPingpong) || !has_kernel(other) || !has_kernel(table))
      return table;
    StatusOr<KernelDecision> d = tuner_.choose(lane, block, beta_nonzero, table, other);
    if (!d.ok()) {
      if (options_.log)
        options_.log("cuda engine: timing the kernels failed (" + d.status().to_string() + "); " +
                     std::string(kernel_kind_name(table)) + " runs, as the measured speeds say");
      (void)cudaGetLastError();
      return table;
    }
    if (d->measured) *reason += "; " + d->note;
    return d->kind;
  }

  // No estimate while any GPU's lanes are in use: a job would wait for them.
  double estimate_ms(const GemmJob& job) const override {
    if (job.request.batch) return -1;  // no cost model for batches: computed on the pool
    const std::vector<int> healthy = health_->healthy_devices();
    if (healthy.empty() || !check_gemm_request(job.request).ok()) return -1;
    for (int i : healthy)
      if (pool_->busy_lanes(i) > 0) return -1;
    return make_plan(plan_request(job, healthy), options_.planner).est_ms;
  }

 private:
  // A resident B is read where it is kept only as the whole, untransposed
  // operand (its pieces are the K rows the plan needs); a transposed one or a
  // submatrix is copied in from a whole copy, as A is.
  static bool b_in_place(const GemmJob& job) {
    return job.b_resident && job.request.op_b == Op::kN && job.b_at.zero() &&
           job.b_resident->rows == job.request.shape.k && job.b_resident->cols == job.request.shape.n;
  }

  // What the planner is told about `job` on the `healthy` devices.
  PlanRequest plan_request(const GemmJob& job, const std::vector<int>& healthy) const {
    const GemmRequest& r = job.request;
    PlanRequest req;
    req.shape = r.shape;
    req.has_c = r.has_c;
    req.forced = r.options.split;
    req.k_reduce = options_.k_reduce;
    // One selection for the whole product: every GPU of the pool runs the same kernels.
    const double rate = rate_tflops(r);
    for (int i : healthy) {
      req.devices.push_back(
          DeviceCaps{pool_->ordinal(i), rate, options_.host_link_gbps, options_.peer_gbps, pool_->busy_lanes(i)});
    }
    if (healthy.size() > 1 && !health_->comm_covers(healthy)) req.forced = SplitMode::kSingle;
    // The planner is told where a resident B lives, so a request goes to it.
    if (b_in_place(job))
      if (const auto cur = job.b_resident->data())
        for (DeviceCaps& d : req.devices)
          d.b_resident_fraction = resident_fraction_on(cur->layout(), d.device, r.shape.k);
    return req;
  }

  // The planner's rate for request `r`: the measured TFLOP/s of the kernel family
  // select_kernel picks for its whole product.
  double rate_tflops(const GemmRequest& r) const {
    const StatusOr<KernelKind> kind = resolve_kernel(r);
    if (!kind.ok()) return options_.gpu_tflops;
    switch (kernel_arithmetic(*kind)) {
      case ArithmeticClass::kFp32x3:
        return options_.fp32x3_tflops;
      case ArithmeticClass::kTf32:
        return options_.tf32_tflops;
      case ArithmeticClass::kFfma:
        break;
    }
    return options_.gpu_tflops;
  }
  bool has_kernel(KernelKind k) const {
    const auto& ks = pool_->kernels();
    return std::find(ks.begin(), ks.end(), k) != ks.end();
  }

  // The kernel a request runs, as select_kernel decides it for the whole
  // shape (run() decides again for the plan's block): validation's answer.
  StatusOr<KernelKind> resolve_kernel(const GemmRequest& r) const {
    SGEMM_ASSIGN_OR_RETURN(const KernelSelection sel, select_kernel(site_.query(r, r.shape, pool_->info(0))));
    return sel.kind;
  }

  // Resident operands (docs/resident.md). B is laid out as the plan needs
  // (ensure_layout: in place when it already is, else peer copies that
  // replace the layout; a single-GPU plan adds a copy instead of moving, so
  // jobs on different GPUs do not take it from each other). A gets a whole
  // copy on every device of the plan (added, never moved), read device to
  // device; an input C is copied from a whole copy into the job's C first.
  // Submatrices (GemmJob::a_at ...) start at their element of the whole copy;
  // a B that is transposed or a submatrix is handled as A is (b_in_place).
  Status bind_resident(const GemmJob& job, const Plan& plan, std::shared_ptr<const GpuResident>* a,
                       std::shared_ptr<const GpuResident>* b, std::shared_ptr<const GpuResident>* c) {
    const bool single = plan.mode == SplitMode::kSingle;
    auto on_every_device = [&](int64_t rows) {
      Layout l;
      for (const Shard& s : plan.shards)
        if (std::none_of(l.begin(), l.end(), [&](const Piece& p) { return p.device == s.device; }))
          l.push_back(Piece{s.device, 0, rows});
      return l;
    };
    if (b_in_place(job)) {
      SGEMM_ASSIGN_OR_RETURN(
          *b, ensure_layout(store_, *job.b_resident, layout_needed_for_b(plan, job.request.shape.k), single));
    } else if (job.b_resident) {  // copied in like A, from a whole copy on each device
      SGEMM_ASSIGN_OR_RETURN(
          *b, ensure_layout(store_, *job.b_resident, on_every_device(job.b_resident->rows), /*additive=*/true));
    }
    if (job.a_resident) {
      SGEMM_ASSIGN_OR_RETURN(
          *a, ensure_layout(store_, *job.a_resident, on_every_device(job.a_resident->rows), /*additive=*/true));
    }
    if (job.c_resident) {
      const ResidentMatrix& m = *job.c_resident;
      auto cur = std::dynamic_pointer_cast<const GpuResident>(m.data());
      if (!cur) return Internal("resident matrix '" + m.handle + "' has no GPU data");
      int dev = device_with_whole(cur->layout(), m.rows, plan.shards.empty() ? -1 : plan.shards[0].device);
      if (dev < 0) {
        dev = plan.shards.empty() ? pool_->ordinal(0) : plan.shards[0].device;
        SGEMM_ASSIGN_OR_RETURN(cur, ensure_layout(store_, m, whole_on(dev, m.rows), /*additive=*/true));
      }
      *c = cur;
      const GpuPiece* p = cur->find(dev, 0, m.rows);
      if (!p) return Internal("resident C has no whole copy on GPU " + std::to_string(dev));
      const GemmShape& s = job.request.shape;
      SGEMM_CUDA_TRY(cudaSetDevice(p->where.device));
      SGEMM_CUDA_TRY(cudaMemcpy2D(job.c, std::size_t(job.c_ld()) * sizeof(float),
                                  p->data + job.c_at.row * p->ld + job.c_at.col, std::size_t(p->ld) * sizeof(float),
                                  std::size_t(s.n) * sizeof(float), std::size_t(s.m), cudaMemcpyDeviceToHost));
    }
    return Status::Ok();
  }

  int index_of(int ordinal) const {
    for (int i = 0; i < pool_->size(); ++i)
      if (pool_->ordinal(i) == ordinal) return i;
    return -1;
  }

  const CudaEngineOptions options_;
  double startup_ms_ = 0;  // set once by make_cuda_engine, before the engine is shared
  std::unique_ptr<DevicePool> pool_;
  std::unique_ptr<NcclCommunicator> comm_;  // null with one device
  PinnedHostPool host_pool_;
  const KernelKind default_kind_;
  const KernelSite site_;  // what the kernel choice is asked with (kernel_site.h)
  KernelTuner tuner_;      // kernel choice by measurement, per kernel shape and GPU
  // Devices in service, the communicator over them, faults; stopped first, freed last.
  std::unique_ptr<PoolHealth> health_;
  ResidentStore store_;                            // resident matrices (docs/resident.md); cleared before the pool goes
  std::unique_ptr<DeviceBufferJobs> device_jobs_;  // device-buffer jobs and IPC opening; reset before the pool goes
  std::unique_ptr<BatchExecutor> batch_;           // batched and grouped products; reset before the pool goes
};

}  // namespace

StatusOr<std::unique_ptr<Engine>> make_cuda_engine(const CudaEngineOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  if (options.lanes_per_device < 1) return InvalidArgument("lanes_per_device must be >= 1");
  if (!(options.gpu_tflops > 0) || !(options.tf32_tflops > 0) || !(options.fp32x3_tflops > 0) ||
      !(options.host_link_gbps > 0) || !(options.peer_gbps > 0))
    return InvalidArgument("gpu_tflops, tf32_tflops, fp32x3_tflops, host_link_gbps and peer_gbps must be > 0");
  if (options.chunk_rows < 0 || options.chunk_k < 0) return InvalidArgument("chunk_rows and chunk_k must be >= 0");
  if (options.blocks_ahead < 1) return InvalidArgument("blocks_ahead must be >= 1");
  if (options.collective_timeout.count() <= 0) return InvalidArgument("collective_timeout must be > 0");
  SGEMM_ASSIGN_OR_RETURN(const FaultInjection faults, FaultInjection::from_env());
  DevicePoolOptions po;
  po.devices = options.devices;
  po.lanes_per_device = options.lanes_per_device;
  SGEMM_ASSIGN_OR_RETURN(std::unique_ptr<DevicePool> pool, DevicePool::create(po));
  const auto& ks = pool->kernels();
  const KernelKind def = options.default_kernel.value_or(
      std::find(ks.begin(), ks.end(), KernelKind::kPingpong) != ks.end() ? KernelKind::kPingpong : ks.front());
  if (std::find(ks.begin(), ks.end(), def) == ks.end())
    return InvalidArgument("default_kernel '" + std::string(kernel_kind_name(def)) +
                           "' is not available on the cuda backend (available: " + kernel_kind_list(ks) + ")");
  std::unique_ptr<NcclCommunicator> comm;
  if (pool->size() > 1) {
    SGEMM_ASSIGN_OR_RETURN(comm, NcclCommunicator::create(pool->ordinals()));
  }
  if (options.log) {
    std::string msg = "cuda engine: " + std::to_string(pool->size()) + " GPU(s)";
    for (int i = 0; i < pool->size(); ++i)
      msg += (i ? ", " : ": ") + std::to_string(pool->ordinal(i)) + " " + pool->info(i).name;
    msg += "; " + std::to_string(options.lanes_per_device) + " lanes each; default kernel " +
           std::string(kernel_kind_name(def)) + (comm ? "; NCCL communicator ready" : "");
    options.log(msg);
  }
  if (faults.any() && options.log)
    options.log("cuda engine: FAULT INJECTION ON (SGEMM_FAULT_INJECT=" + faults.describe() +
                "): test hooks will break GPUs on purpose");
  auto engine = std::make_unique<CudaEngine>(options, std::move(pool), std::move(comm), def, faults);
  SGEMM_RETURN_IF_ERROR(engine->start(t0));
  if (options.log) {
    const EngineInfo info = engine->info();
    options.log("cuda engine: started in " + std::to_string(int64_t(info.startup_ms)) + " ms (" +
                (options.warm_up ? "kernels and cuBLAS warmed up on every lane" : "no warm-up") + ", " +
                std::to_string(info.pinned_pool_bytes >> 20) + " MiB pinned pool)");
  }
  return std::unique_ptr<Engine>(std::move(engine));
}

}  // namespace sgemm
