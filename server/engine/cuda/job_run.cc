#include "server/engine/cuda/job_run.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "kernels/cuda_status.h"
#include "server/engine/cuda/split_executor.h"

namespace sgemm {

void JobRun::add(Lane* lane, int rank, const Shard& shard, const DeviceInfo& info) {
  ShardWork w;
  w.lane = lane;
  w.rank = rank;
  w.shard = shard;
  w.timing.device = info.index;
  w.timing.name = info.name;
  w.timing.shard = shard;
  works_.push_back(std::move(w));
}

Status JobRun::execute(const SplitExecutor& executor) {
  for (auto& w : works_) w.lane->reset_events();
  const Status issued = executor.issue(*this);
  const Status drained = drain();
  Status s = issued.ok() ? drained : issued;
  if (s.ok()) {
    report_outputs(/*all_done=*/true);
    s = collect_timings();
  }
  for (auto& w : works_) {  // every stream is idle now: stream-ordered frees are safe
    w.a.reset();
    w.b.reset();
    w.c.reset();
  }
  return s;
}

std::vector<DeviceTiming> JobRun::timings() const {
  std::vector<DeviceTiming> v;
  for (const auto& w : works_) v.push_back(w.timing);
  return v;
}

Status JobRun::feed_wait(MatrixId m, int64_t elements) {
  if (!job_.feed || elements <= 0) return Status::Ok();
  return job_.feed->wait_for(m, elements);
}

Status JobRun::order_after(ShardWork& w, cudaStream_t waiter, cudaStream_t producer) {
  SGEMM_CUDA_TRY(cudaSetDevice(w.lane->device()));
  SGEMM_ASSIGN_OR_RETURN(cudaEvent_t e, w.lane->next_event());
  SGEMM_CUDA_TRY(cudaEventRecord(e, producer));
  SGEMM_CUDA_TRY(cudaStreamWaitEvent(waiter, e, 0));
  return Status::Ok();
}

Status JobRun::wait_on(ShardWork& w, cudaStream_t stream, cudaEvent_t event) {
  SGEMM_CUDA_TRY(cudaSetDevice(w.lane->device()));
  SGEMM_CUDA_TRY(cudaStreamWaitEvent(stream, event, 0));
  return Status::Ok();
}

Status JobRun::run_gemm(ShardWork& w, const GemmArgs& args) {
  GemmBackend* be = w.lane->backend(set_.kind);
  if (!be) return Internal("no backend for kernel '" + std::string(kernel_kind_name(set_.kind)) + "' on this lane");
  if (Status can = be->can_implement(args); !can.ok()) {
    // validate() asked the kernel about the request's shape; a block it then
    // refuses is a layout the engine chose (or our bug when it was named).
    GemmBackend* fb = w.lane->backend(KernelKind::kCublas);
    if (set_.kernel_explicit || !fb || fb == be)
      return Internal("kernel '" + std::string(be->name()) +
                      "' refused a block it accepted at validation: " + can.message());
    SGEMM_RETURN_IF_ERROR(fb->can_implement(args));
    be = fb;
    fallback_used_ = true;
  }
  const std::size_t need = be->workspace_bytes(args);
  SGEMM_ASSIGN_OR_RETURN(void* ws, w.lane->workspace(need));
  return be->run(args, ws, need, w.lane->compute());
}

Status JobRun::h2d_2d(ShardWork& w, float* dst, int64_t dpitch, const float* src, int64_t spitch, int64_t width,
                      int64_t height) {
  if (width <= 0 || height <= 0) return Status::Ok();
  return SGEMM_CUDA_STATUS(cudaMemcpy2DAsync(dst, size_t(dpitch) * kFloatBytes, src, size_t(spitch) * kFloatBytes,
                                             size_t(width) * kFloatBytes, size_t(height), cudaMemcpyHostToDevice,
                                             w.lane->h2d()));
}

Status JobRun::copy_out(ShardWork& w, const float* dev, int64_t dev_row0, int64_t ldc, int64_t begin, int64_t end,
                        cudaEvent_t after) {
  const int64_t n = shape().n;
  const int64_t hldc = job_.c_ld();  // the host C's stride (a region may be wider than n)
  SGEMM_RETURN_IF_ERROR(wait_on(w, w.lane->d2h(), after));
  cudaEvent_t done = nullptr;
  SGEMM_RETURN_IF_ERROR(timed(
      w, w.out, w.lane->d2h(),
      [&] {
        return SGEMM_CUDA_STATUS(cudaMemcpy2DAsync(job_.c + begin * hldc, size_t(hldc) * kFloatBytes,
                                                   dev + (begin - dev_row0) * ldc, size_t(ldc) * kFloatBytes,
                                                   size_t(n) * kFloatBytes, size_t(end - begin), cudaMemcpyDeviceToHost,
                                                   w.lane->d2h()));
      },
      &done));
  outs_.push_back(OutBlock{done, begin, end, false});
  report_outputs(/*all_done=*/false);
  return Status::Ok();
}

Status JobRun::begin_comm_spans(std::vector<Span>* spans, const std::vector<cudaEvent_t>* wait_for) {
  spans->assign(works_.size(), Span{});
  for (size_t i = 0; i < works_.size(); ++i) {
    ShardWork& w = works_[i];
    SGEMM_CUDA_TRY(cudaSetDevice(w.lane->device()));
    if (wait_for) SGEMM_CUDA_TRY(cudaStreamWaitEvent(w.lane->comm(), (*wait_for)[i], 0));
    SGEMM_ASSIGN_OR_RETURN((*spans)[i].begin, w.lane->next_event());
    SGEMM_ASSIGN_OR_RETURN((*spans)[i].end, w.lane->next_event());
    SGEMM_CUDA_TRY(cudaEventRecord((*spans)[i].begin, w.lane->comm()));
  }
  return Status::Ok();
}

Status JobRun::end_comm_spans(const std::vector<Span>& spans) {
  for (size_t i = 0; i < works_.size(); ++i) {
    ShardWork& w = works_[i];
    SGEMM_CUDA_TRY(cudaSetDevice(w.lane->device()));
    SGEMM_CUDA_TRY(cudaEventRecord(spans[i].end, w.lane->comm()));
    w.reduce.push_back(spans[i]);
  }
  return Status::Ok();
}

Status JobRun::wait_event(ShardWork& w, cudaEvent_t e) {
  SGEMM_CUDA_TRY(cudaSetDevice(w.lane->device()));
  for (;;) {
    const cudaError_t r = cudaEventQuery(e);
    if (r == cudaSuccess) return Status::Ok();
    if (r != cudaErrorNotReady) return SGEMM_CUDA_STATUS(r);
    (void)cudaGetLastError();  // cudaErrorNotReady is not an error; keep the next launch check clean
    SGEMM_RETURN_IF_ERROR(check_cancel());
    report_outputs(/*all_done=*/false);
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

Status JobRun::throttle(ShardWork& w, cudaEvent_t done) {
  w.in_flight.push_back(done);
  while (int(w.in_flight.size()) > std::max(1, set_.blocks_ahead)) {
    SGEMM_RETURN_IF_ERROR(wait_event(w, w.in_flight.front()));
    w.in_flight.pop_front();
  }
  return Status::Ok();
}

int64_t JobRun::row_block(int64_t rows) const {
  if (set_.chunk_rows > 0) return set_.chunk_rows;
  // At least 512 rows: smaller blocks leave the ping-pong kernel's grid too
  // small to fill 132 SMs (2xH200 sweep, docs/engine.md: 4096^3 row split
  // kernel phase 1.90x with 256-row blocks, 1.99x with 512).
  return std::max<int64_t>(512, round_up(ceil_div(rows, std::max(1, set_.pipeline_chunks)), 128));
}

void JobRun::report_outputs(bool all_done) {
  for (auto& o : outs_) {
    if (o.reported) continue;
    if (!all_done) {
      if (cudaEventQuery(o.done) != cudaSuccess) {
        (void)cudaGetLastError();  // cudaErrorNotReady is not an error
        continue;
      }
    }
    o.reported = true;
    if (job_.sink) job_.sink->rows_ready(o.begin, o.end);
  }
}

Status JobRun::drain() {
  Status first;
  for (auto& w : works_) {
    Status s = SGEMM_CUDA_STATUS(cudaSetDevice(w.lane->device()));
    for (cudaStream_t st : w.lane->streams())
      if (s.ok()) s = SGEMM_CUDA_STATUS(cudaStreamSynchronize(st));
    if (first.ok() && !s.ok()) first = s;
  }
  return first;
}

Status JobRun::collect_timings() {
  for (auto& w : works_) {
    auto sum = [&](const std::vector<Span>& spans, double* out) -> Status {
      double total = 0;
      for (const Span& sp : spans) {
        float ms = 0;
        SGEMM_CUDA_TRY(cudaEventElapsedTime(&ms, sp.begin, sp.end));
        total += ms;
      }
      *out = total;
      return Status::Ok();
    };
    SGEMM_CUDA_TRY(cudaSetDevice(w.lane->device()));
    SGEMM_RETURN_IF_ERROR(sum(w.in, &w.timing.copy_in_ms));
    SGEMM_RETURN_IF_ERROR(sum(w.kernel, &w.timing.kernel_ms));
    SGEMM_RETURN_IF_ERROR(sum(w.reduce, &w.timing.reduce_ms));
    SGEMM_RETURN_IF_ERROR(sum(w.out, &w.timing.copy_out_ms));
  }
  return Status::Ok();
}

}  // namespace sgemm
