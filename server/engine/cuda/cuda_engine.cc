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
#include <thread>

#include "kernels/cuda_status.h"
#include "kernels/gemm_backend.h"
#include "server/comm/nccl_comm.h"
#include "server/devices/device_pool.h"
#include "server/devices/pinned_host_pool.h"
#include "server/engine/cuda/job_run.h"
#include "server/engine/cuda/split_executor.h"
#include "server/planner/kernel_choice.h"

namespace sgemm {
namespace {

class CudaEngine final : public Engine {
 public:
  CudaEngine(CudaEngineOptions options, std::unique_ptr<DevicePool> pool, std::unique_ptr<NcclCommunicator> comm,
             KernelKind default_kind)
      : options_(std::move(options)),
        pool_(std::move(pool)),
        comm_(std::move(comm)),
        host_pool_(options_.pinned_cache_bytes),
        default_kind_(default_kind) {}

  ~CudaEngine() override {
    comm_.reset();  // communicators before the pool's streams
    pool_.reset();
  }

  EngineInfo info() const override {
    EngineInfo info;
    info.backend = "cuda";
    for (int i = 0; i < pool_->size(); ++i) info.devices.push_back(pool_->info(i));
    info.default_kernel = default_kind_;
    info.kernels.push_back(default_kind_);
    for (KernelKind k : pool_->kernels())
      if (k != default_kind_) info.kernels.push_back(k);
    info.startup_ms = startup_ms_;
    info.pinned_pool_bytes = int64_t(host_pool_.stats().arena_bytes);
    info.precisions.push_back(Precision::kFp32);
    for (Precision p : {Precision::kTf32, Precision::kFp32x3})
      if (has_kernel(kernel_of(p))) info.precisions.push_back(p);
    return info;
  }

  HostAllocator& host_allocator() override { return host_pool_; }

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
    if (options_.warm_up) SGEMM_RETURN_IF_ERROR(pool_->warm_up());
    // Without the pool requests still run (pinning their buffers as they come): say so, go on.
    if (Status s = host_pool_.reserve(options_.pinned_pool_bytes); !s.ok() && options_.log)
      options_.log("cuda engine: " + s.message() + "; request buffers are pinned as they come");
    startup_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return Status::Ok();
  }

  Status validate(const GemmRequest& r) const override {
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
    alignas(16) static const float probe[4] = {};
    const GemmShape& s = r.shape;
    GemmArgs args{s, r.alpha, r.beta, probe, pad4(s.k), probe, pad4(s.n), const_cast<float*>(probe), pad4(s.n)};
    return be->can_implement(args);
  }

  StatusOr<GemmReport> run(const GemmJob& job) override {
    const GemmRequest& r = job.request;
    // validate() ran before the data moved; here only what run() relies on is
    // re-checked (cheaply), and a miss is our bug. A block the kernel refuses
    // is caught per block (JobRun::run_gemm).
    const Status rules = check_gemm_request(r);
    StatusOr<KernelKind> resolved = rules.ok() ? resolve_kernel(r) : StatusOr<KernelKind>(rules);
    if (!resolved.ok())
      return Internal("a request that was not validated reached run(): " + resolved.status().to_string());
    if (!job.a || !job.b || !job.c) return Internal("a job without its host matrices reached run()");
    const KernelKind kind = *resolved;
    GemmReport report;
    report.backend = "cuda";
    report.kernel = kind;
    report.precision = r.options.precision;

    PlanRequest req;
    req.shape = r.shape;
    req.has_c = r.has_c;
    req.forced = r.options.split;
    req.k_reduce = options_.k_reduce;
    for (int i = 0; i < pool_->size(); ++i) {
      req.devices.push_back(DeviceCaps{pool_->ordinal(i), rate_tflops(r.options.precision), options_.host_link_gbps,
                                       options_.peer_gbps, pool_->busy_lanes(i)});
    }
    const Plan plan = make_plan(req, options_.planner);
    const SplitExecutor* executor = find_split_executor(plan.mode);
    if (!executor)
      return Internal("no executor for the planned split '" + std::string(split_mode_name(plan.mode)) + "'");
    report.split = plan.mode;
    report.plan_reason = plan.reason;
    if (!r.options.kernel && kind != default_kind_)
      if (const KernelChoiceRow* row = find_kernel_choice(r.shape))
        report.plan_reason += "; kernel " + std::string(kernel_kind_name(kind)) + " for " + row->shape_class +
                              " (measured table, server/planner/kernel_choice.cc)";

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
    JobRun jr(job, set, comm_.get());
    if (!executor->spans_pool) {
      const int idx = index_of(plan.shards[0].device);
      if (idx < 0) return Internal("planner chose an unknown device");
      SGEMM_ASSIGN_OR_RETURN(LaneLease lease, pool_->acquire(idx, job.cancel));
      leases.push_back(std::move(lease));
      jr.add(&*leases.back(), idx, plan.shards[0], pool_->info(idx));
    } else {
      if (!comm_ || int(plan.shards.size()) != pool_->size())
        return Internal("split plan does not cover the device pool");
      const auto t_order = std::chrono::steady_clock::now();
      SGEMM_ASSIGN_OR_RETURN(order, lock_order(job.cancel));
      jr.set_order_wait_ms(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_order).count());
      for (int i = 0; i < pool_->size(); ++i) {
        SGEMM_ASSIGN_OR_RETURN(LaneLease lease, pool_->acquire(i, job.cancel));
        leases.push_back(std::move(lease));
      }
      for (int i = 0; i < pool_->size(); ++i) jr.add(&*leases[size_t(i)], i, plan.shards[size_t(i)], pool_->info(i));
    }
    SGEMM_RETURN_IF_ERROR(jr.execute(*executor));
    if (jr.fallback_used()) {
      report.kernel = KernelKind::kCublas;
      report.precision = Precision::kFp32;
      report.plan_reason += "; " + std::string(kernel_kind_name(kind)) + " refused some blocks: cublas ran them";
      if (options_.log) options_.log("cuda engine: " + report.plan_reason);
    }
    report.devices = jr.timings();
    return report;
  }

 private:
  static KernelKind kernel_of(Precision p) { return p == Precision::kTf32 ? KernelKind::kTf32 : KernelKind::kFp32x3; }
  bool has_kernel(KernelKind k) const {
    const auto& ks = pool_->kernels();
    return std::find(ks.begin(), ks.end(), k) != ks.end();
  }
  // The planner's rate for a precision (its kernel's measured TFLOP/s).
  double rate_tflops(Precision p) const {
    switch (p) {
      case Precision::kFp32:
        return options_.gpu_tflops;
      case Precision::kTf32:
        return options_.tf32_tflops;
      case Precision::kFp32x3:
        return options_.fp32x3_tflops;
    }
    return options_.gpu_tflops;
  }

  // The kernel a request runs: the one its precision needs, or for fp32 the
  // one it names (FAILED_PRECONDITION when this engine lacks it), else the
  // measured table's choice for its shape.
  StatusOr<KernelKind> resolve_kernel(const GemmRequest& r) const {
    const auto& ks = pool_->kernels();
    if (r.options.precision != Precision::kFp32) {
      const KernelKind k = kernel_of(r.options.precision);
      if (r.options.kernel && *r.options.kernel != k)
        return InvalidArgument("kernel '" + std::string(kernel_kind_name(*r.options.kernel)) +
                               "' computes fp32; precision " + std::string(precision_name(r.options.precision)) +
                               " runs its own kernel (leave kernel unset)");
      if (!has_kernel(k))
        return FailedPrecondition(
            "precision " + std::string(precision_name(r.options.precision)) +
            " is not available on these GPUs (it needs an sm_90 GPU; available kernels: " + kernel_kind_list(ks) + ")");
      return k;
    }
    if (!r.options.kernel) return choose_kernel(r.shape, default_kind_, ks);
    const KernelKind kind = *r.options.kernel;
    if (kind == KernelKind::kTf32 || kind == KernelKind::kFp32x3)
      return InvalidArgument("kernel '" + std::string(kernel_kind_name(kind)) + "' is chosen by precision " +
                             std::string(kernel_kind_name(kind)) + ", not by name");
    if (!has_kernel(kind))
      return FailedPrecondition("kernel '" + std::string(kernel_kind_name(kind)) +
                                "' is not available on the cuda backend (available: " + kernel_kind_list(ks) + ")");
    return kind;
  }

  // The communicator's order, waited for while the job is still wanted.
  StatusOr<std::unique_lock<std::mutex>> lock_order(const CancelToken* cancel) {
    std::unique_lock<std::mutex> lock(comm_->order_mutex(), std::defer_lock);
    while (!lock.try_lock()) {
      if (cancel) SGEMM_RETURN_IF_ERROR(cancel->status());
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    return lock;
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
  auto engine = std::make_unique<CudaEngine>(options, std::move(pool), std::move(comm), def);
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
