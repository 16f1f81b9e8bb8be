#include "server/cluster/cluster_engine.h"

#include <algorithm>

#include "server/engine/kernel_site.h"
#include "server/planner/cluster_plan.h"
#include "server/planner/kernel_choice.h"

namespace sgemm {
namespace {

// What the cluster path forwards: dense, untransposed host operands (a
// transposed or strided one runs on the local engine, as a resident one does).
bool dense_host_operands(const GemmJob& job) {
  const GemmShape& s = job.request.shape;
  return !job.a_resident && !job.b_resident && !job.c_resident && !job.device && job.request.op_a == Op::kN &&
         job.request.op_b == Op::kN && job.a_ld() == s.k && job.b_ld() == s.n && job.c_ld() == s.n;
}

class ClusterEngine final : public Engine {
 public:
  ClusterEngine(std::unique_ptr<Engine> local, ClusterCoordinator& c, ClusterEngineOptions o)
      : local_(std::move(local)), coord_(c), options_(o) {}

  EngineInfo info() const override { return local_->info(); }
  HostAllocator& host_allocator() override { return local_->host_allocator(); }
  Status validate(const GemmRequest& r) const override { return local_->validate(r); }
  int64_t max_leading_dimension() const override { return local_->max_leading_dimension(); }

  // Shared-memory regions are read and written by the local engine's copies
  // (the cluster path too starts from this host's memory): lock them there.
  Status register_host_memory(void* data, std::size_t bytes) override {
    return local_->register_host_memory(data, bytes);
  }
  Status unregister_host_memory(void* data) override { return local_->unregister_host_memory(data); }

  // Resident matrices live on this host's GPUs; requests that use them run
  // on the local engine (run()).
  ResidentStore* resident_store() override { return local_->resident_store(); }
  StatusOr<std::shared_ptr<ResidentData>> make_resident(std::shared_ptr<HostBuffer> host, int64_t rows, int64_t cols,
                                                        ResidentBytes bytes) override {
    return local_->make_resident(std::move(host), rows, cols, std::move(bytes));
  }
  // Device buffers are on this host's GPUs: their jobs run on the local engine (run()).
  DeviceMemoryAccess* device_memory() override { return local_->device_memory(); }

  // No estimate: a job may wait for the cluster's job lock, so the service
  // must never compute one on its own thread.
  double estimate_ms(const GemmJob& /*job*/) const override { return -1; }

  StatusOr<GemmReport> run(const GemmJob& job) override {
    const GemmRequest& r = job.request;
    // The cluster runs fp32 with the default or a named fp32 kernel; a request
    // that names split K may run as the cluster K split, one that names rows
    // or nothing as either cluster split.
    if (coord_.member_count() == 0 || r.options.precision != Precision::kFp32 ||
        r.options.split == SplitMode::kSingle || r.batch)  // a batch runs on this host's GPUs, split by product
      return local_->run(job);
    // The cluster's data plane moves dense host matrices: operands kept on
    // this host's GPUs, or strided views of a larger region, run here.
    if (!dense_host_operands(job))
      return run_here(job, "cluster not used: resident or strided operands (or device buffers) run on this host");
    // No request waits for a communicator to form (a member that is slow or
    // never answers ready would hold it up to the connect timeout): while one
    // forms, requests run here. Asked again under the job lock, since a
    // member may have joined or left while this request waited for it.
    if (StatusOr<ClusterView> formed = coord_.current_view(); !formed.ok())
      return run_here(job, "cluster not used: " + formed.status().message());
    MutexLock jobs(coord_.job_mutex());
    StatusOr<ClusterView> view = coord_.current_view();
    if (!view.ok()) {
      jobs.unlock();
      return run_here(job, "cluster not used: " + view.status().message());
    }
    if (view->members == 0) {
      jobs.unlock();
      return local_->run(job);
    }
    const EngineInfo info = local_->info();
    ClusterPlanRequest pr;
    pr.shape = r.shape;
    pr.has_c = r.has_c;
    pr.net_gbps = view->net_gbps;
    pr.fanout_gbps = view->fanout_gbps;
    pr.forced = coord_.options().always;
    pr.split = r.options.split;
    PlanRequest local_req;
    local_req.shape = r.shape;
    local_req.has_c = r.has_c;
    local_req.forced = r.options.split;
    for (const DeviceInfo& d : info.devices) {
      DeviceCaps c = options_.caps;
      c.device = d.index;
      local_req.devices.push_back(c);
    }
    if (local_req.devices.empty()) local_req.devices.push_back(options_.caps);
    pr.local_est_ms = make_plan(local_req, options_.planner).est_ms;
    for (const auto& rank : view->ranks) pr.ranks.push_back(ClusterRank{options_.caps, rank.host});
    const ClusterPlan plan = make_cluster_plan(pr, options_.planner);
    if (!plan.use_cluster) {
      jobs.unlock();
      return run_here(job, plan.reason);
    }
    // The cluster path moves whole matrices: wait for every input.
    if (job.feed) {
      SGEMM_RETURN_IF_ERROR(job.feed->wait_for(MatrixId::kA, r.shape.m * r.shape.k));
      SGEMM_RETURN_IF_ERROR(job.feed->wait_for(MatrixId::kB, r.shape.k * r.shape.n));
      if (r.has_c) SGEMM_RETURN_IF_ERROR(job.feed->wait_for(MatrixId::kC, r.shape.m * r.shape.n));
    }
    if (job.cancel) SGEMM_RETURN_IF_ERROR(job.cancel->status());
    ClusterJobSpec spec;
    spec.kind = plan.split == SplitMode::kK ? ClusterJobKind::kK : ClusterJobKind::kRows;
    spec.shape = r.shape;
    spec.alpha = r.alpha;
    spec.beta = r.has_c ? r.beta : 0.0f;
    spec.has_c = r.has_c;
    spec.ranks = plan.shards;
    // One kernel for every rank, chosen as the local engine chooses for a
    // whole request (the same query, the local engine's measured speeds) for
    // the largest shard (the K split: all rows, the longest slice of K). The
    // ranks run FFMA kernels only, so the fp32 contract picks among them.
    GemmShape largest{0, r.shape.n, 0};
    for (const Shard& sh : plan.shards) {
      largest.m = std::max(largest.m, sh.row_end - sh.row_begin);
      largest.k = std::max(largest.k, sh.k_end - sh.k_begin);
    }
    KernelSite site{{}, info.default_kernel, info.kernel_speeds};
    for (KernelKind k : info.kernels)
      if (kernel_arithmetic(k) == ArithmeticClass::kFfma) site.available.push_back(k);
    StatusOr<KernelSelection> sel =
        select_kernel(site.query(r, largest, info.devices.empty() ? DeviceInfo{} : info.devices[0]));
    if (!sel.ok())
      return Internal("the cluster's kernel selection failed after validation: " + sel.status().to_string());
    spec.kernel = sel->kind;
    std::string kernel_reason = std::move(sel->reason);
    SGEMM_ASSIGN_OR_RETURN(ClusterRunResult res, coord_.run(spec, job));
    jobs.unlock();
    if (job.sink) job.sink->rows_ready(0, r.shape.m);
    GemmReport rep;
    rep.backend = info.backend;
    rep.kernel = spec.kernel;
    rep.precision = Precision::kFp32;
    rep.split = plan.split;
    rep.plan_reason = plan.reason + kernel_reason;
    rep.devices = std::move(res.timings);
    rep.kernel_rows = std::move(res.kernel_rows);
    rep.kernel_row = most_launched_row(rep.kernel_rows);
    if (res.fallback_used) {
      rep.kernel = KernelKind::kCublas;
      rep.precision = Precision::kFp32Ffma;
      rep.plan_reason +=
          "; " + std::string(kernel_kind_name(spec.kernel)) + " refused some blocks on this host: cublas ran them";
    }
    return rep;
  }

 private:
  // `job` on this host's engine, `why` added to its plan's reason.
  StatusOr<GemmReport> run_here(const GemmJob& job, const std::string& why) {
    StatusOr<GemmReport> rep = local_->run(job);
    if (rep.ok()) rep->plan_reason += "; " + why;
    return rep;
  }

  std::unique_ptr<Engine> local_;
  ClusterCoordinator& coord_;
  const ClusterEngineOptions options_;
};

}  // namespace

std::unique_ptr<Engine> make_cluster_engine(std::unique_ptr<Engine> local, ClusterCoordinator& coordinator,
                                            ClusterEngineOptions options) {
  return std::make_unique<ClusterEngine>(std::move(local), coordinator, options);
}

}  // namespace sgemm
