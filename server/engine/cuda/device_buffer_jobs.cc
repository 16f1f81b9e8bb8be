#include "server/engine/cuda/device_buffer_jobs.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <utility>
#include <vector>

#include "kernels/cuda_status.h"
#include "kernels/gemm_backend.h"
#include "server/engine/cuda/job_run.h"
#include "server/engine/cuda/resident_gpu.h"
#include "server/planner/kernel_choice.h"

namespace sgemm {
namespace {

Status cublas_result(cublasStatus_t st, const char* what) {
  if (st == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  if (st == CUBLAS_STATUS_ALLOC_FAILED) return ResourceExhausted(std::string(what) + ": cuBLAS could not allocate");
  return Internal(std::string(what) + " failed: cuBLAS status " + std::to_string(int(st)));
}

// A rows x cols block from `src` (leading dimension sld, on GPU src_dev) to
// `dst` (dld, on dst_dev), on `stream` of the GPU that issues it. Between GPUs:
// a peer copy (one cudaMemcpyPeerAsync when both are dense, else a strided one).
Status copy_block(float* dst, int dst_dev, int64_t dld, const float* src, int src_dev, int64_t sld, int64_t rows,
                  int64_t cols, cudaStream_t stream) {
  const std::size_t width = std::size_t(cols) * sizeof(float);
  if (dst_dev == src_dev)
    return SGEMM_CUDA_STATUS(cudaMemcpy2DAsync(dst, std::size_t(dld) * sizeof(float), src,
                                               std::size_t(sld) * sizeof(float), width, std::size_t(rows),
                                               cudaMemcpyDeviceToDevice, stream));
  enable_peer_access(src_dev, dst_dev);
  if (dld == cols && sld == cols)
    return SGEMM_CUDA_STATUS(cudaMemcpyPeerAsync(dst, dst_dev, src, src_dev, width * std::size_t(rows), stream));
  cudaMemcpy3DPeerParms p{};
  p.srcPtr = make_cudaPitchedPtr(const_cast<float*>(src), std::size_t(sld) * sizeof(float), width, std::size_t(rows));
  p.srcDevice = src_dev;
  p.dstPtr = make_cudaPitchedPtr(dst, std::size_t(dld) * sizeof(float), width, std::size_t(rows));
  p.dstDevice = dst_dev;
  p.extent = make_cudaExtent(width, std::size_t(rows), 1);
  return SGEMM_CUDA_STATUS(cudaMemcpy3DPeerAsync(&p, stream));
}

// One timed operation of a part.
struct Timed {
  cudaEvent_t begin = nullptr, end = nullptr;
  Step meta;
};

// One GPU's share of a job. The lease is declared first, so the scratch
// buffers (freed stream-ordered on its lane) go before the lane is given back.
struct Part {
  LaneLease lease;
  int index = -1;   // in the pool
  int device = -1;  // CUDA ordinal
  Shard shard;
  DeviceBuffer a_buf, b_buf, c_buf;
  std::vector<DeviceBuffer> received;  // the primary of a K split: the other parts' partial Cs
  const float* a = nullptr;
  const float* b = nullptr;
  float* c = nullptr;
  int64_t lda = 0, ldb = 0, ldc = 0;
  cudaEvent_t origin = nullptr;
  double origin_ms = 0;
  std::vector<Timed> timed;
  DeviceTiming timing;
  cudaStream_t stream() const { return lease->compute(); }
};

using Clock = std::chrono::steady_clock;

// Waits for every leased stream when it goes out of scope, so no scratch
// buffer is freed while another GPU's copy may still use it (an early error
// return included).
class DrainOnExit {
 public:
  explicit DrainOnExit(std::vector<Part>& parts) : parts_(parts) {}
  ~DrainOnExit() {
    for (Part& p : parts_) {
      if (p.device < 0 || cudaSetDevice(p.device) != cudaSuccess) continue;
      if (p.lease.index() >= 0) (void)cudaStreamSynchronize(p.stream());
    }
    (void)cudaGetLastError();
  }
  DrainOnExit(const DrainOnExit&) = delete;
  DrainOnExit& operator=(const DrainOnExit&) = delete;

 private:
  std::vector<Part>& parts_;
};

class Issue {
 public:
  explicit Issue(Clock::time_point origin) : origin_(origin) {}

  template <typename Enqueue>
  Status timed(Part& p, StepKind kind, int64_t bytes, Enqueue&& enqueue) {
    SGEMM_CUDA_TRY(cudaSetDevice(p.device));
    SGEMM_ASSIGN_OR_RETURN(cudaEvent_t begin, p.lease->next_event());
    SGEMM_ASSIGN_OR_RETURN(cudaEvent_t end, p.lease->next_event());
    SGEMM_CUDA_TRY(cudaEventRecord(begin, p.stream()));
    SGEMM_RETURN_IF_ERROR(enqueue());
    SGEMM_CUDA_TRY(cudaEventRecord(end, p.stream()));
    Step meta;
    meta.kind = kind;
    meta.bytes = bytes;
    meta.row_begin = p.shard.row_begin;
    meta.row_end = p.shard.row_end;
    meta.k_begin = p.shard.k_begin;
    meta.k_end = p.shard.k_end;
    p.timed.push_back(Timed{begin, end, meta});
    return Status::Ok();
  }

  double since_origin_ms() const { return std::chrono::duration<double, std::milli>(Clock::now() - origin_).count(); }

 private:
  const Clock::time_point origin_;
};

int64_t floats_bytes(int64_t rows, int64_t cols) { return rows * cols * int64_t(sizeof(float)); }

}  // namespace

DeviceBufferJobs::~DeviceBufferJobs() {
  for (const auto& [device, handle] : sum_handles_) {
    if (cudaSetDevice(device) == cudaSuccess) (void)cublasDestroy(handle);
  }
  (void)cudaGetLastError();
}

int DeviceBufferJobs::index_of(int ordinal) const {
  for (int i = 0; i < pool_->size(); ++i)
    if (pool_->ordinal(i) == ordinal) return i;
  return -1;
}

StatusOr<cublasHandle_t> DeviceBufferJobs::sum_handle(int device, std::unique_lock<std::mutex>* lock) {
  *lock = std::unique_lock(sum_mu_);
  if (auto it = sum_handles_.find(device); it != sum_handles_.end()) return it->second;
  SGEMM_CUDA_TRY(cudaSetDevice(device));
  cublasHandle_t h = nullptr;
  SGEMM_RETURN_IF_ERROR(cublas_result(cublasCreate(&h), "cublasCreate"));
  sum_handles_[device] = h;
  return h;
}

StatusOr<GemmReport> DeviceBufferJobs::run(const GemmJob& job) {
  if (!job.device) return Internal("DeviceBufferJobs::run without device operands");
  const GemmRequest& r = job.request;
  const GemmShape& s = r.shape;
  const DeviceOperands& ops = *job.device;
  if (r.op_a != Op::kN || r.op_b != Op::kN) return Internal("a transposed device-buffer operand reached the engine");
  if (r.has_c != ops.c.has_value()) return Internal("a device-buffer job whose input C does not match has_c");
  if (!ops.out && !job.c) return Internal("a device-buffer job with nowhere to put C");
  const Clock::time_point origin = job.origin.value_or(Clock::now());
  Issue issue(origin);
  GemmReport report;
  HostSteps steps(&report.host_ms);
  report.backend = "cuda";
  report.precision = r.options.precision;

  // Where: the output's GPU (else A's) alone, or every GPU of the pool for a named split.
  const int home = ops.out ? ops.out->device() : ops.a.device();
  const int home_idx = index_of(home);
  if (home_idx < 0) return Internal("a device buffer on a GPU outside the pool reached the engine");
  Plan plan;
  const bool named_split = r.options.split == SplitMode::kRows || r.options.split == SplitMode::kK;
  if (named_split && pool_->size() > 1) {
    PlanRequest pr;
    pr.shape = s;
    pr.has_c = r.has_c;
    pr.forced = r.options.split;
    for (int i = 0; i < pool_->size(); ++i)
      pr.devices.push_back(DeviceCaps{pool_->ordinal(i), options_.gpu_tflops, options_.peer_gbps, options_.peer_gbps,
                                      pool_->busy_lanes(i)});
    plan = make_plan(pr, options_.planner);
    bool empty = false;
    for (const Shard& sh : plan.shards) empty = empty || sh.row_end <= sh.row_begin || sh.k_end <= sh.k_begin;
    if (plan.mode != r.options.split || empty) {
      plan = Plan{};  // too small to give every GPU a share
      plan.reason = "device buffers: the product is too small to split over " + std::to_string(pool_->size()) +
                    " GPUs; single on GPU " + std::to_string(home);
    } else {
      plan.reason = "device buffers: " + std::string(split_mode_name(plan.mode)) + " split over " +
                    std::to_string(pool_->size()) + " GPUs, shards moved GPU to GPU, C on GPU " + std::to_string(home);
    }
  }
  if (plan.shards.empty()) {
    plan.mode = SplitMode::kSingle;
    plan.shards = {Shard{home, 0, s.m, 0, s.k}};
    if (plan.reason.empty())
      plan.reason = "device buffers: single on GPU " + std::to_string(home) + ", the GPU holding " +
                    (ops.out ? "the output" : "A");
  }
  report.split = plan.mode;
  report.plan_reason = plan.reason;
  const bool k_split = plan.mode == SplitMode::kK;

  // The kernel, for the largest block one launch computes.
  GemmShape block{0, s.n, 0};
  for (const Shard& sh : plan.shards) {
    block.m = std::max(block.m, sh.row_end - sh.row_begin);
    block.k = std::max(block.k, sh.k_end - sh.k_begin);
  }
  StatusOr<KernelSelection> sel = select_kernel(options_.kernels.query(r, block, pool_->info(home_idx)));
  if (!sel.ok()) return Internal("the kernel selection failed after validation: " + sel.status().to_string());
  report.kernel = sel->kind;
  report.plan_reason += sel->reason;
  const bool may_fall_back =
      !r.options.kernel && (r.options.precision == Precision::kFp32 || r.options.precision == Precision::kFp32Ffma);
  steps.stamp("plan");

  // Lanes in pool order (see the header). The primary part writes C.
  std::vector<Part> parts(plan.shards.size());
  const DrainOnExit drain(parts);  // destroyed before `parts`
  std::vector<std::size_t> order(parts.size());
  for (std::size_t i = 0; i < parts.size(); ++i) {
    parts[i].shard = plan.shards[i];
    parts[i].device = plan.shards[i].device;
    parts[i].index = index_of(parts[i].device);
    if (parts[i].index < 0) return Internal("planner chose an unknown device");
    order[i] = i;
  }
  std::sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) { return parts[x].index < parts[y].index; });
  for (std::size_t i : order) {
    SGEMM_ASSIGN_OR_RETURN(parts[i].lease, pool_->acquire(parts[i].index, job.cancel));
    parts[i].lease->reset_events();
  }
  std::size_t primary = 0;
  for (std::size_t i = 0; i < parts.size(); ++i)
    if (parts[i].device == home) primary = i;
  steps.stamp("lanes");
  if (job.cancel) SGEMM_RETURN_IF_ERROR(job.cancel->status());

  for (Part& p : parts) {
    SGEMM_CUDA_TRY(cudaSetDevice(p.device));
    SGEMM_ASSIGN_OR_RETURN(p.origin, p.lease->next_event());
    SGEMM_CUDA_TRY(cudaEventRecord(p.origin, p.stream()));
    p.origin_ms = issue.since_origin_ms();
    p.timing.device = p.device;
    p.timing.name = pool_->info(p.index).name;
    p.timing.shard = p.shard;
  }

  const float beta_c = r.has_c ? r.beta : 0.0f;
  bool fallback_used = false;
  std::vector<cudaEvent_t> sent(parts.size(), nullptr);  // K split: a part's partial C is on the primary

  // Every part: its operands where its GPU reads them, then its product.
  for (std::size_t i = 0; i < parts.size(); ++i) {
    Part& p = parts[i];
    const int d = p.device;
    const bool writes_c = !k_split || i == primary;
    const int64_t r0 = k_split ? 0 : p.shard.row_begin;
    const int64_t rows = k_split ? s.m : p.shard.row_end - p.shard.row_begin;
    const int64_t k0 = k_split ? p.shard.k_begin : 0;
    const int64_t kk = k_split ? p.shard.k_end - p.shard.k_begin : s.k;
    cudaStream_t st = p.stream();
    // A: rows [r0, r0 + rows) x columns [k0, k0 + kk).
    const float* a_src = ops.a.data() + r0 * ops.a.ld + k0;
    if (ops.a.device() == d) {
      p.a = a_src;
      p.lda = ops.a.ld;
    } else {
      p.lda = pad4(kk);
      SGEMM_ASSIGN_OR_RETURN(p.a_buf, DeviceBuffer::allocate(d, std::size_t(rows * p.lda) * sizeof(float), st));
      p.a = p.a_buf.floats();
      SGEMM_RETURN_IF_ERROR(issue.timed(p, StepKind::kCopyIn, floats_bytes(rows, kk), [&] {
        return copy_block(p.a_buf.floats(), d, p.lda, a_src, ops.a.device(), ops.a.ld, rows, kk, st);
      }));
    }
    // B: rows [k0, k0 + kk).
    const float* b_src = ops.b.data() + k0 * ops.b.ld;
    if (ops.b.device() == d) {
      p.b = b_src;
      p.ldb = ops.b.ld;
    } else {
      p.ldb = pad4(s.n);
      SGEMM_ASSIGN_OR_RETURN(p.b_buf, DeviceBuffer::allocate(d, std::size_t(kk * p.ldb) * sizeof(float), st));
      p.b = p.b_buf.floats();
      SGEMM_RETURN_IF_ERROR(issue.timed(p, StepKind::kCopyIn, floats_bytes(kk, s.n), [&] {
        return copy_block(p.b_buf.floats(), d, p.ldb, b_src, ops.b.device(), ops.b.ld, kk, s.n, st);
      }));
    }
    // C: the output's rows in place when they are on this GPU, else scratch;
    // the input C goes there first (unless it is those very bytes).
    if (writes_c && ops.out && ops.out->device() == d) {
      p.c = ops.out->data() + r0 * ops.out->ld;
      p.ldc = ops.out->ld;
    } else {
      p.ldc = pad4(s.n);
      SGEMM_ASSIGN_OR_RETURN(p.c_buf, DeviceBuffer::allocate(d, std::size_t(rows * p.ldc) * sizeof(float), st));
      p.c = p.c_buf.floats();
    }
    if (writes_c && ops.c) {
      const float* c_src = ops.c->data() + r0 * ops.c->ld;
      if (!(c_src == p.c && ops.c->ld == p.ldc))
        SGEMM_RETURN_IF_ERROR(issue.timed(p, StepKind::kCopyIn, floats_bytes(rows, s.n), [&] {
          return copy_block(p.c, d, p.ldc, c_src, ops.c->device(), ops.c->ld, rows, s.n, st);
        }));
    }
    GemmArgs args{GemmShape{rows, s.n, kk}, r.alpha, writes_c ? beta_c : 0.0f, p.a, p.lda, p.b, p.ldb, p.c, p.ldc};
    GemmBackend* be = p.lease->backend(sel->kind);
    if (!be) return Internal("no backend for kernel '" + std::string(kernel_kind_name(sel->kind)) + "'");
    if (Status can = be->can_implement(args); !can.ok()) {
      // The caller's layout (a leading dimension that is not a multiple of 4,
      // an offset not 16-byte aligned) is not one every kernel takes.
      if (!may_fall_back) return can;
      be = p.lease->backend(KernelKind::kCublas);
      if (!be) return can;
      SGEMM_RETURN_IF_ERROR(be->can_implement(args));
      fallback_used = true;
    }
    const std::size_t ws_bytes = be->workspace_bytes(args);
    SGEMM_ASSIGN_OR_RETURN(void* ws, p.lease->workspace(ws_bytes));
    SGEMM_RETURN_IF_ERROR(issue.timed(p, StepKind::kKernel, 0, [&] { return be->run(args, ws, ws_bytes, st); }));
    p.timed.back().meta.kernel_row = count_kernel_launches(&report.kernel_rows, be->kernel_name(args));
    // A K split's partial C goes to the primary's GPU.
    if (k_split && i != primary) {
      Part& home_part = parts[primary];
      SGEMM_CUDA_TRY(cudaSetDevice(home));
      home_part.received.emplace_back();
      SGEMM_ASSIGN_OR_RETURN(
          home_part.received.back(),
          DeviceBuffer::allocate(home, std::size_t(s.m * pad4(s.n)) * sizeof(float), home_part.stream()));
      SGEMM_ASSIGN_OR_RETURN(cudaEvent_t allocated, home_part.lease->next_event());
      SGEMM_CUDA_TRY(cudaEventRecord(allocated, home_part.stream()));
      SGEMM_CUDA_TRY(cudaSetDevice(d));
      SGEMM_CUDA_TRY(cudaStreamWaitEvent(st, allocated, 0));
      float* into = home_part.received.back().floats();
      // Scratch to scratch with the same padded rows: one contiguous peer copy.
      enable_peer_access(d, home);
      SGEMM_RETURN_IF_ERROR(issue.timed(p, StepKind::kCopyOut, floats_bytes(s.m, s.n), [&] {
        return SGEMM_CUDA_STATUS(cudaMemcpyPeerAsync(into, home, p.c, d, std::size_t(s.m * p.ldc) * sizeof(float), st));
      }));
      SGEMM_ASSIGN_OR_RETURN(sent[i], p.lease->next_event());
      SGEMM_CUDA_TRY(cudaEventRecord(sent[i], st));
    }
  }

  // K split: the primary sums the partials into its C.
  if (k_split) {
    Part& p = parts[primary];
    std::size_t next = 0;
    for (std::size_t i = 0; i < parts.size(); ++i) {
      if (i == primary) continue;
      const float* partial = p.received[next++].floats();
      SGEMM_CUDA_TRY(cudaSetDevice(home));
      SGEMM_CUDA_TRY(cudaStreamWaitEvent(p.stream(), sent[i], 0));
      std::unique_lock<std::mutex> lock;
      SGEMM_ASSIGN_OR_RETURN(cublasHandle_t h, sum_handle(home, &lock));
      SGEMM_RETURN_IF_ERROR(cublas_result(cublasSetStream(h, p.stream()), "cublasSetStream"));
      const float one = 1.0f;
      // Row-major m x n is column-major n x m: C = C + partial, in place.
      SGEMM_RETURN_IF_ERROR(issue.timed(p, StepKind::kCollective, floats_bytes(s.m, s.n), [&] {
        return cublas_result(cublasSgeam(h, CUBLAS_OP_N, CUBLAS_OP_N, int(s.n), int(s.m), &one, p.c, int(p.ldc), &one,
                                         partial, int(pad4(s.n)), p.c, int(p.ldc)),
                             "cublasSgeam (summing the K split's partial C)");
      }));
    }
  }

  // C out of scratch: into the caller's output buffer (GPU to GPU) or to host memory.
  for (std::size_t i = 0; i < parts.size(); ++i) {
    Part& p = parts[i];
    if (k_split && i != primary) continue;
    if (!p.c_buf.floats()) continue;  // written in place
    const int64_t r0 = k_split ? 0 : p.shard.row_begin;
    const int64_t rows = k_split ? s.m : p.shard.row_end - p.shard.row_begin;
    SGEMM_RETURN_IF_ERROR(issue.timed(p, StepKind::kCopyOut, floats_bytes(rows, s.n), [&]() -> Status {
      if (ops.out)
        return copy_block(ops.out->data() + r0 * ops.out->ld, ops.out->device(), ops.out->ld, p.c, p.device, p.ldc,
                          rows, s.n, p.stream());
      return SGEMM_CUDA_STATUS(cudaMemcpy2DAsync(job.c + r0 * job.c_ld(), std::size_t(job.c_ld()) * sizeof(float), p.c,
                                                 std::size_t(p.ldc) * sizeof(float), std::size_t(s.n) * sizeof(float),
                                                 std::size_t(rows), cudaMemcpyDeviceToHost, p.stream()));
    }));
  }
  steps.stamp("issue");

  Status waited = Status::Ok();
  for (Part& p : parts) {  // every part is drained, even after an error
    if (cudaSetDevice(p.device) != cudaSuccess) continue;
    const Status synced = SGEMM_CUDA_STATUS(cudaStreamSynchronize(p.stream()));
    if (waited.ok()) waited = synced;
  }
  SGEMM_RETURN_IF_ERROR(waited);
  steps.stamp("gpu");

  for (Part& p : parts) {
    for (Timed& t : p.timed) {
      float begin_ms = 0, end_ms = 0;
      SGEMM_CUDA_TRY(cudaEventElapsedTime(&begin_ms, p.origin, t.begin));
      SGEMM_CUDA_TRY(cudaEventElapsedTime(&end_ms, p.origin, t.end));
      t.meta.start_ms = p.origin_ms + begin_ms;
      t.meta.end_ms = p.origin_ms + end_ms;
      const double ms = end_ms - begin_ms;
      switch (t.meta.kind) {
        case StepKind::kCopyIn:
          p.timing.copy_in_ms += ms;
          break;
        case StepKind::kKernel:
          p.timing.kernel_ms += ms;
          break;
        case StepKind::kCollective:
          p.timing.reduce_ms += ms;
          break;
        case StepKind::kCopyOut:
          p.timing.copy_out_ms += ms;
          break;
        case StepKind::kWaitInput:
          break;
      }
      p.timing.steps.push_back(t.meta);
    }
    report.devices.push_back(std::move(p.timing));
  }
  if (!report.kernel_rows.empty()) report.kernel_row = most_launched_row(report.kernel_rows);
  if (fallback_used) {
    report.kernel = KernelKind::kCublas;
    report.precision = Precision::kFp32Ffma;
    report.plan_reason += "; " + std::string(kernel_kind_name(sel->kind)) +
                          " does not take the caller's layout (leading dimension or alignment): cublas ran it";
  }
  if (!ops.out && job.sink) job.sink->rows_ready(0, s.m);
  return report;
}

}  // namespace sgemm
