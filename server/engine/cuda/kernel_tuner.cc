#include "server/engine/cuda/kernel_tuner.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "kernels/cuda_status.h"
#include "kernels/gemm_args.h"
#include "kernels/gemm_backend.h"
#include "server/engine/cuda/job_run.h"
#include "server/planner/kernel_choice.h"

namespace sgemm {
namespace {

std::string ms_text(double ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", ms);
  return buf;
}

// Timing events, destroyed with the measurement.
class Events {
 public:
  ~Events() {
    for (cudaEvent_t e : events_) (void)cudaEventDestroy(e);
  }
  StatusOr<cudaEvent_t> make() {
    cudaEvent_t e = nullptr;
    SGEMM_CUDA_TRY(cudaEventCreate(&e));
    events_.push_back(e);
    return e;
  }

 private:
  std::vector<cudaEvent_t> events_;
};

}  // namespace

StatusOr<KernelDecision> KernelTuner::choose(Lane& lane, const GemmShape& shape, bool beta_nonzero,
                                             KernelKind table_pick, KernelKind other) {
  const auto key = std::make_tuple(lane.device(), shape.m, shape.n, shape.k, beta_nonzero);
  {
    std::lock_guard lock(mu_);
    if (auto it = cache_.find(key); it != cache_.end()) return it->second;
  }
  // Measured outside the lock: another request may measure the same shape at
  // the same time; the first decision stored is the one every later request gets.
  SGEMM_ASSIGN_OR_RETURN(KernelDecision d, measure(lane, shape, beta_nonzero, table_pick, other));
  std::lock_guard lock(mu_);
  return cache_.emplace(key, std::move(d)).first->second;
}

StatusOr<KernelDecision> KernelTuner::measure(Lane& lane, const GemmShape& s, bool beta_nonzero, KernelKind table_pick,
                                              KernelKind other) const {
  KernelDecision d;
  d.kind = d.table_pick = table_pick;
  d.other = other;
  GemmBackend* const be_table = lane.backend(table_pick);
  GemmBackend* const be_other = lane.backend(other);
  if (!be_table || !be_other) {
    d.note = "not timed: the lane lacks one of the kernels";
    return d;
  }
  if (s.flops() < options_.min_flops) {
    d.note = "not timed: " + gemm_shape_text(s) + " is below the smallest timed size";
    return d;
  }
  const float beta = beta_nonzero ? 1.0f : 0.0f;
  GemmArgs args = engine_probe_args(s, 1.0f, beta);
  const std::size_t a_bytes = std::size_t(s.m * args.lda) * kFloatBytes;
  const std::size_t b_bytes = std::size_t(s.k * args.ldb) * kFloatBytes;
  const std::size_t c_bytes = std::size_t(s.m * args.ldc) * kFloatBytes;
  if (!be_table->can_implement(args).ok() || !be_other->can_implement(args).ok()) {
    d.note = "not timed: one of the kernels cannot run " + gemm_shape_text(s);
    return d;
  }
  const std::size_t ws_bytes = std::max(be_table->workspace_bytes(args), be_other->workspace_bytes(args));
  if (a_bytes + b_bytes + c_bytes + ws_bytes > options_.max_bytes) {
    d.note = "not timed: " + gemm_shape_text(s) + " needs more scratch than the tuner may take";
    return d;
  }

  const int dev = lane.device();
  const cudaStream_t stream = lane.compute();
  SGEMM_CUDA_TRY(cudaSetDevice(dev));
  SGEMM_ASSIGN_OR_RETURN(DeviceBuffer a, DeviceBuffer::allocate(dev, a_bytes, stream));
  SGEMM_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::allocate(dev, b_bytes, stream));
  SGEMM_ASSIGN_OR_RETURN(DeviceBuffer c, DeviceBuffer::allocate(dev, c_bytes, stream));
  SGEMM_CUDA_TRY(cudaMemsetAsync(a.floats(), 0, a_bytes, stream));
  SGEMM_CUDA_TRY(cudaMemsetAsync(b.floats(), 0, b_bytes, stream));
  SGEMM_CUDA_TRY(cudaMemsetAsync(c.floats(), 0, c_bytes, stream));
  SGEMM_ASSIGN_OR_RETURN(void* ws, lane.workspace(ws_bytes));
  args = engine_layout_args(s, 1.0f, beta, a.floats(), b.floats(), c.floats());

  GemmBackend* const backends[2] = {be_table, be_other};
  for (GemmBackend* be : backends) SGEMM_RETURN_IF_ERROR(be->run(args, ws, ws_bytes, stream));  // untimed
  const int rounds = std::max(1, options_.rounds);
  Events events;
  std::vector<cudaEvent_t> marks;  // per round, per kernel: start, end
  for (int r = 0; r < rounds; ++r)
    for (GemmBackend* be : backends) {
      SGEMM_ASSIGN_OR_RETURN(cudaEvent_t e0, events.make());
      SGEMM_ASSIGN_OR_RETURN(cudaEvent_t e1, events.make());
      SGEMM_CUDA_TRY(cudaEventRecord(e0, stream));
      SGEMM_RETURN_IF_ERROR(be->run(args, ws, ws_bytes, stream));
      SGEMM_CUDA_TRY(cudaEventRecord(e1, stream));
      marks.push_back(e0);
      marks.push_back(e1);
    }
  SGEMM_CUDA_TRY(cudaEventSynchronize(marks.back()));
  std::vector<float> times[2];
  for (std::size_t i = 0; i < marks.size(); i += 2) {
    float ms = 0;
    SGEMM_CUDA_TRY(cudaEventElapsedTime(&ms, marks[i], marks[i + 1]));
    times[(i / 2) % 2].push_back(ms);
  }
  for (auto& t : times) std::sort(t.begin(), t.end());
  d.table_ms = times[0][times[0].size() / 2];
  d.other_ms = times[1][times[1].size() / 2];
  d.measured = true;
  d.kind = prefer_measured(table_pick, d.table_ms, other, d.other_ms, options_.margin);
  d.note = "kernel " + std::string(kernel_kind_name(d.kind)) + " for " + gemm_shape_text(s) + " blocks, timed on GPU " +
           std::to_string(dev) + ": " + std::string(kernel_kind_name(table_pick)) + " " + ms_text(d.table_ms) +
           " ms, " + std::string(kernel_kind_name(other)) + " " + ms_text(d.other_ms) + " ms";
  return d;
}

}  // namespace sgemm
