#include "server/engine/cuda/batch_executor.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>

#include "kernels/cuda_status.h"
#include "server/engine/cuda/job_run.h"
#include "server/planner/batch_plan.h"

namespace sgemm {
namespace {

// One GPU's share of a batch while it runs: its lane, its products, its
// device buffers and the events around its copies and launch. Destroyed after
// its stream is synchronised (run()'s Drain): the buffers go back stream-ordered
// first, then the lane (members go in reverse order).
struct DeviceShare {
  LaneLease lease;
  int index = -1;  // pool index
  ProductRange range;
  int64_t a0 = 0, b0 = 0, c0 = 0;  // first element of the range's slice of each concatenated operand
  int64_t a_n = 0, b_n = 0, c_n = 0;
  DeviceBuffer a, b, c, pointers;
  cudaEvent_t start = nullptr, copied_in = nullptr, computed = nullptr, copied_out = nullptr;
  bool launched = false;  // some product of the range runs (others failed check_finite)
};

double elapsed_ms(cudaEvent_t from, cudaEvent_t to) {
  float ms = 0;
  if (cudaEventElapsedTime(&ms, from, to) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return ms;
}

}  // namespace

StatusOr<BatchKernelSelection> BatchExecutor::select(const GemmRequest& r) const {
  BatchKernelQuery q;
  q.launch = r.batch->kind == BatchKind::kStrided ? BatchLaunch::kStridedBatched : BatchLaunch::kGrouped;
  q.precision = r.options.precision;
  q.named = r.options.kernel;
  q.available = pool_->kernels();
  return select_batch_kernel(q);
}

Status BatchExecutor::validate(const GemmRequest& r) const {
  SGEMM_RETURN_IF_ERROR(check_batch_request(r));
  SGEMM_RETURN_IF_ERROR(select(r).status());
  const BatchSpec& spec = *r.batch;
  for (std::size_t i = 0; i < spec.products.size(); ++i) {
    const GemmShape& s = spec.products[i].shape;
    for (auto [dim, v] : {std::pair{'m', s.m}, std::pair{'n', s.n}, std::pair{'k', s.k}})
      if (v > INT32_MAX)
        return InvalidArgument(batch_shape_field(spec, i, dim) + " = " + std::to_string(v) +
                               " is over cuBLAS's limit of 2^31 - 1 for a batched launch");
    if (spec.kind == BatchKind::kStrided) break;
  }
  return Status::Ok();
}

StatusOr<CublasBatchedGemm*> BatchExecutor::handle_for(const Lane& lane) {
  MutexLock lock(mu_);
  auto& h = handles_[&lane];
  if (!h) {
    SGEMM_CUDA_TRY(cudaSetDevice(lane.device()));
    SGEMM_ASSIGN_OR_RETURN(h, CublasBatchedGemm::create());
  }
  return h.get();
}

StatusOr<GemmReport> BatchExecutor::run(const GemmJob& job, const std::vector<int>& healthy) {
  const GemmRequest& r = job.request;
  if (!r.batch) return Internal("BatchExecutor::run without a batch");
  const BatchSpec& spec = *r.batch;
  if (Status v = validate(r); !v.ok())
    return Internal("a batch that was not validated reached run(): " + v.to_string());
  if (!job.a || !job.b || !job.c) return Internal("a batch without its host matrices reached run()");
  if (healthy.empty()) return Unavailable("no GPU is in service");
  SGEMM_ASSIGN_OR_RETURN(const BatchKernelSelection sel, select(r));
  const BatchedArithmetic arithmetic =
      sel.row->arithmetic == ArithmeticClass::kTf32 ? BatchedArithmetic::kTf32 : BatchedArithmetic::kFp32;
  const std::size_t count = spec.products.size();

  GemmReport report;
  HostSteps steps(&report.host_ms);
  report.backend = "cuda";
  report.kernel = sel.row->family;
  report.kernel_row = sel.row->name;
  report.precision = r.options.precision;
  report.product_status.assign(count, Status::Ok());

  // Inputs with NaN or infinity, when asked: those products stay out of every launch.
  std::vector<bool> runs(count, true);
  int failed = 0;
  if (spec.check_finite) {
    for (std::size_t i = 0; i < count; ++i) {
      Status finite = check_product_finite(job, i);
      if (finite.ok()) continue;
      if (spec.fail_fast) return finite;
      report.product_status[i] = std::move(finite);
      runs[i] = false;
      ++failed;
    }
    steps.stamp("check finite");
  }

  // Which GPUs: all healthy ones split by product, or the least busy with split single.
  std::vector<int> devices = healthy;
  if (r.options.split == SplitMode::kSingle || devices.size() == 1) {
    const int idle = *std::min_element(devices.begin(), devices.end(),
                                       [&](int x, int y) { return pool_->busy_lanes(x) < pool_->busy_lanes(y); });
    devices = {idle};
  }
  std::vector<double> work(count, 0.0);
  for (std::size_t i = 0; i < count; ++i)
    if (runs[i]) work[i] = spec.products[i].shape.flops() + 1.0;  // + 1: a product costs a launch slot
  const std::vector<ProductRange> ranges = split_products(work, int(devices.size()));
  steps.stamp("plan");

  auto slice_end = [&](int64_t end, int64_t BatchProduct::*offset, int64_t total) {
    return end < int64_t(count) ? spec.products[std::size_t(end)].*offset : total;
  };
  std::vector<DeviceShare> shares(ranges.size());
  // Whichever way run() returns, no copy into the job's host buffers is still in flight.
  struct Drain {
    std::vector<DeviceShare>& shares;
    ~Drain() {
      for (DeviceShare& sh : shares)
        if (sh.lease.index() >= 0 && cudaSetDevice(sh.lease->device()) == cudaSuccess &&
            cudaStreamSynchronize(sh.lease->compute()) != cudaSuccess)
          (void)cudaGetLastError();
    }
  } drain{shares};
  for (std::size_t d = 0; d < ranges.size(); ++d) {
    DeviceShare& sh = shares[d];
    sh.index = devices[d];
    sh.range = ranges[d];
    const BatchProduct& first = spec.products[std::size_t(sh.range.begin)];
    sh.a0 = first.a_offset;
    sh.b0 = first.b_offset;
    sh.c0 = first.c_offset;
    sh.a_n = slice_end(sh.range.end, &BatchProduct::a_offset, spec.a_elements) - sh.a0;
    sh.b_n = slice_end(sh.range.end, &BatchProduct::b_offset, spec.b_elements) - sh.b0;
    sh.c_n = slice_end(sh.range.end, &BatchProduct::c_offset, spec.c_elements) - sh.c0;
    SGEMM_ASSIGN_OR_RETURN(sh.lease, pool_->acquire(sh.index, job.cancel));
  }
  steps.stamp("lanes");

  // Issue every GPU's work before waiting for any.
  for (DeviceShare& sh : shares) {
    if (job.cancel) SGEMM_RETURN_IF_ERROR(job.cancel->status());
    Lane& lane = *sh.lease;
    const int ordinal = lane.device();
    const cudaStream_t st = lane.compute();
    SGEMM_CUDA_TRY(cudaSetDevice(ordinal));
    lane.reset_events();
    for (cudaEvent_t* e : {&sh.start, &sh.copied_in, &sh.computed, &sh.copied_out}) {
      SGEMM_ASSIGN_OR_RETURN(*e, lane.next_event());
    }
    SGEMM_ASSIGN_OR_RETURN(CublasBatchedGemm * gemm, handle_for(lane));
    SGEMM_ASSIGN_OR_RETURN(sh.a, DeviceBuffer::allocate(ordinal, std::size_t(sh.a_n) * sizeof(float), st));
    SGEMM_ASSIGN_OR_RETURN(sh.b, DeviceBuffer::allocate(ordinal, std::size_t(sh.b_n) * sizeof(float), st));
    SGEMM_ASSIGN_OR_RETURN(sh.c, DeviceBuffer::allocate(ordinal, std::size_t(sh.c_n) * sizeof(float), st));
    // Without an input C, beta must not read the buffer (cuBLAS reads no C when beta is 0).
    const float beta = r.has_c ? r.beta : 0.0f;
    auto dev = [&](const BatchProduct& p, float* base_a, float* base_b, float* base_c) {
      return BatchedProduct{p.shape, base_a + (p.a_offset - sh.a0), base_b + (p.b_offset - sh.b0),
                            base_c + (p.c_offset - sh.c0)};
    };
    // A group's pointer arrays first: their pageable copy waits for the stream's earlier work, which is
    // none yet, so the operands' copies below are queued without the host waiting for them.
    std::optional<CublasBatchedGemm::GroupLaunch> group;
    if (spec.kind == BatchKind::kGroup) {
      std::vector<BatchedProduct> products;
      for (int64_t i = sh.range.begin; i < sh.range.end; ++i)
        if (runs[std::size_t(i)])
          products.push_back(dev(spec.products[std::size_t(i)], sh.a.floats(), sh.b.floats(), sh.c.floats()));
      if (!products.empty()) {
        SGEMM_ASSIGN_OR_RETURN(
            sh.pointers,
            DeviceBuffer::allocate(ordinal, CublasBatchedGemm::grouped_workspace_bytes(products.size()), st));
        SGEMM_ASSIGN_OR_RETURN(group,
                               CublasBatchedGemm::stage_group(products, r.op_a, r.op_b, sh.pointers.floats(), st));
      }
    }
    SGEMM_CUDA_TRY(cudaEventRecord(sh.start, st));
    SGEMM_CUDA_TRY(
        cudaMemcpyAsync(sh.a.floats(), job.a + sh.a0, std::size_t(sh.a_n) * sizeof(float), cudaMemcpyHostToDevice, st));
    SGEMM_CUDA_TRY(
        cudaMemcpyAsync(sh.b.floats(), job.b + sh.b0, std::size_t(sh.b_n) * sizeof(float), cudaMemcpyHostToDevice, st));
    if (r.has_c)
      SGEMM_CUDA_TRY(cudaMemcpyAsync(sh.c.floats(), job.c + sh.c0, std::size_t(sh.c_n) * sizeof(float),
                                     cudaMemcpyHostToDevice, st));
    SGEMM_CUDA_TRY(cudaEventRecord(sh.copied_in, st));
    if (spec.kind == BatchKind::kStrided) {
      // One launch per run of consecutive products that compute (all of them unless check_finite left some out).
      for (int64_t i = sh.range.begin; i < sh.range.end;) {
        if (!runs[std::size_t(i)]) {
          ++i;
          continue;
        }
        int64_t j = i;
        while (j < sh.range.end && runs[std::size_t(j)]) ++j;
        const BatchedProduct p = dev(spec.products[std::size_t(i)], sh.a.floats(), sh.b.floats(), sh.c.floats());
        StridedBatchArgs args;
        args.shape = p.shape;
        args.count = j - i;
        args.a = p.a;
        args.b = p.b;
        args.c = p.c;
        args.alpha = r.alpha;
        args.beta = beta;
        args.op_a = r.op_a;
        args.op_b = r.op_b;
        args.arithmetic = arithmetic;
        SGEMM_RETURN_IF_ERROR(gemm->strided(args, st));
        sh.launched = true;
        i = j;
      }
    } else if (group) {
      SGEMM_RETURN_IF_ERROR(gemm->grouped(*group, r.alpha, beta, arithmetic, st));
      sh.launched = true;
    }
    SGEMM_CUDA_TRY(cudaEventRecord(sh.computed, st));
    // C's slice back: a product left out keeps what the host buffer held (it is not sent).
    if (sh.launched)
      for (int64_t i = sh.range.begin; i < sh.range.end; ++i) {
        if (!runs[std::size_t(i)]) continue;
        int64_t j = i;  // consecutive computed products: one copy
        while (j < sh.range.end && runs[std::size_t(j)]) ++j;
        const int64_t e0 = spec.products[std::size_t(i)].c_offset;
        const int64_t e1 = slice_end(j, &BatchProduct::c_offset, spec.c_elements);
        SGEMM_CUDA_TRY(cudaMemcpyAsync(job.c + e0, sh.c.floats() + (e0 - sh.c0), std::size_t(e1 - e0) * sizeof(float),
                                       cudaMemcpyDeviceToHost, st));
        i = j;
      }
    SGEMM_CUDA_TRY(cudaEventRecord(sh.copied_out, st));
  }
  steps.stamp("issue");

  for (DeviceShare& sh : shares) {
    SGEMM_CUDA_TRY(cudaSetDevice(sh.lease->device()));
    SGEMM_CUDA_TRY(cudaStreamSynchronize(sh.lease->compute()));
  }
  steps.stamp("wait");
  if (job.cancel) SGEMM_RETURN_IF_ERROR(job.cancel->status());

  std::string where;
  for (DeviceShare& sh : shares) {
    DeviceTiming t;
    t.device = sh.lease->device();
    t.name = pool_->info(sh.index).name;
    // For a batch a device's "rows" are its products [begin, end).
    t.shard = Shard{t.device, sh.range.begin, sh.range.end, 0, 0};
    t.copy_in_ms = elapsed_ms(sh.start, sh.copied_in);
    t.kernel_ms = elapsed_ms(sh.copied_in, sh.computed);
    t.copy_out_ms = elapsed_ms(sh.computed, sh.copied_out);
    report.devices.push_back(std::move(t));
    if (!where.empty()) where += ", ";
    where += "products " + std::to_string(sh.range.begin) + "-" + std::to_string(sh.range.end - 1) + " on GPU " +
             std::to_string(sh.lease->device());
    // Elements of C (batch.h), one report per run of consecutive computed products: they are final together.
    for (int64_t i = sh.range.begin; i < sh.range.end && job.sink;) {
      if (!runs[std::size_t(i)]) {
        ++i;
        continue;
      }
      int64_t j = i;
      while (j < sh.range.end && runs[std::size_t(j)]) ++j;
      job.sink->rows_ready(spec.products[std::size_t(i)].c_offset,
                           slice_end(j, &BatchProduct::c_offset, spec.c_elements));
      i = j;
    }
  }
  // One GPU: split single. Several: no split mode of one product describes it (SPLIT_UNSPECIFIED on the wire).
  report.split = shares.size() == 1 ? SplitMode::kSingle : SplitMode::kAuto;
  report.plan_reason = std::string(spec.kind == BatchKind::kStrided ? "a strided batch of " : "a group of ") +
                       std::to_string(count) + " products" +
                       (spec.kind == BatchKind::kStrided ? " of " + gemm_shape_text(spec.products[0].shape) : "") +
                       ", " + sel.row->name + " (one launch per GPU), split by product: " + where + sel.reason;
  if (failed > 0) report.plan_reason += "; " + std::to_string(failed) + " not computed (see their status)";
  return report;
}

}  // namespace sgemm
