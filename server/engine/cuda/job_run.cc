#include "server/engine/cuda/job_run.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "kernels/cuda_status.h"
#include "kernels/transpose.h"
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

Status JobRun::execute(const SplitExecutor& executor, HostSteps& steps) { return execute(executor.issue, steps); }

void JobRun::watch_peers(const CancelToken* abort, int64_t timeout_ms) {
  watching_ = true;
  peer_abort_ = abort;
  peer_timeout_ms_ = timeout_ms;
}

Status JobRun::execute(const std::function<Status(JobRun&)>& issue, HostSteps& steps) {
  if (watching_) deadline_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(peer_timeout_ms_);
  for (auto& w : works_) w.lane->reset_events();
  const Status origins = record_origins();
  steps.stamp("origins");
  const Status issued = origins.ok() ? issue(*this) : origins;
  steps.stamp("issue");
  // Peers in other processes wait on the calls a job that failed half-way
  // never made: abort at once (the collectives issued end), then drain.
  if (!issued.ok() && watching_) comm_->abort();
  const Status drained = watching_ ? drain_watched() : drain();
  steps.stamp("drain");
  Status s = issued.ok() ? drained : issued;
  // A peer that went away shows first as a failed enqueue, then as the
  // UNAVAILABLE the wait gave up with: that names the cause.
  if (watching_ && !issued.ok() && drained.code() == StatusCode::kUnavailable) s = drained;
  if (s.ok()) {
    report_outputs(/*all_done=*/true);
    steps.stamp("outputs");
    s = collect_timings();
    steps.stamp("timings");
  }
  for (auto& w : works_) {  // every stream is idle now: stream-ordered frees are safe
    w.a.reset();
    w.b.reset();
    w.c.reset();
    w.stage.reset();
    w.b_prepared.clear();
    w.extra.clear();
  }
  // A failed job leaves a communicator that spans processes in an unknown state.
  if (!s.ok() && watching_ && !comm_->aborted()) comm_->abort();
  steps.stamp("free");
  return s;
}

std::vector<DeviceTiming> JobRun::timings() const {
  std::vector<DeviceTiming> v;
  for (const auto& w : works_) {
    v.push_back(w.timing);
    v.back().order_wait_ms = order_wait_ms_;
  }
  return v;
}

Status JobRun::record_origins() {
  // The lanes are leased and idle: each origin fires as soon as the device
  // sees it, so the host time of the record places it, to within the launch
  // latency (a few microseconds; waiting for it would cost a round trip to
  // the device per request).
  for (auto& w : works_) {
    SGEMM_CUDA_TRY(cudaSetDevice(w.lane->device()));
    SGEMM_ASSIGN_OR_RETURN(w.origin, w.lane->next_event());
    const auto t = std::chrono::steady_clock::now();
    SGEMM_CUDA_TRY(cudaEventRecord(w.origin, w.lane->h2d()));
    w.origin_ms = host_ms(t);
  }
  return Status::Ok();
}

Status JobRun::feed_wait(MatrixId m, int64_t elements) {
  if (!job_.feed || elements <= 0) return Status::Ok();
  const auto t0 = std::chrono::steady_clock::now();
  Status s = job_.feed->wait_for(m, elements);
  const auto t1 = std::chrono::steady_clock::now();
  const double ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
  if (ms > 0.01) {  // a wait that found the data present is no wait
    pending_wait_ms_ += ms;
    Step st;
    st.kind = StepKind::kWaitInput;
    st.start_ms = host_ms(t0);
    st.end_ms = host_ms(t1);
    st.bytes = elements * int64_t(kFloatBytes);  // the prefix waited for
    pending_waits_.push_back(st);
  }
  return s;
}

void JobRun::charge_input_wait(ShardWork& w) {
  w.timing.copy_in_wait_ms += pending_wait_ms_;
  for (Step& st : pending_waits_) {
    st.row_begin = w.shard.row_begin;
    st.row_end = w.shard.row_end;
    st.k_begin = w.shard.k_begin;
    st.k_end = w.shard.k_end;
    w.timing.steps.push_back(st);
  }
  pending_wait_ms_ = 0;
  pending_waits_.clear();
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
  // B prepared by the job's kernel (prepare_b), for the block reading that B.
  GemmArgs run_args = args;
  if (be == w.lane->backend(set_.kind))
    for (const ShardWork::PreparedB& p : w.b_prepared)
      if (p.b == args.b && p.ldb == args.ldb && p.k == args.shape.k && p.n == args.shape.n)
        run_args.b_prepared = p.buffer.floats();
  const std::size_t need = be->workspace_bytes(run_args);
  SGEMM_ASSIGN_OR_RETURN(void* ws, w.lane->workspace(need));
  SGEMM_RETURN_IF_ERROR(be->run(run_args, ws, need, w.lane->compute()));
  const int row = count_kernel_launches(&kernel_rows_, be->kernel_name(run_args));
  // timed() adds this launch's span to w.kernel next; collect_timings labels it.
  launch_rows_.push_back(LaunchRow{&w, w.kernel.size(), row});
  return Status::Ok();
}

Status JobRun::prepare_b(ShardWork& w, const GemmArgs& args) {
  GemmBackend* be = w.lane->backend(set_.kind);
  if (!be || !be->can_implement(args).ok()) return Status::Ok();
  const std::size_t bytes = be->prepared_b_bytes(args);
  if (bytes == 0) return Status::Ok();
  StatusOr<DeviceBuffer> buf = DeviceBuffer::allocate(w.lane->device(), bytes, w.lane->compute());
  if (!buf.ok()) return Status::Ok();  // each block splits B itself
  ShardWork::PreparedB& p = w.b_prepared.emplace_back();
  p.buffer = std::move(*buf);
  p.b = args.b;
  p.ldb = args.ldb;
  p.k = args.shape.k;
  p.n = args.shape.n;
  float* const into = p.buffer.floats();
  return timed(
      w, w.kernel, w.lane->compute(), [&] { return be->prepare_b(args, into, bytes, w.lane->compute()); }, nullptr,
      Step{.row_begin = 0, .row_end = 0, .k_begin = 0, .k_end = args.shape.k});
}

Status JobRun::h2d_2d(ShardWork& w, float* dst, int64_t dpitch, const float* src, int64_t spitch, int64_t width,
                      int64_t height, cudaStream_t stream) {
  if (width <= 0 || height <= 0) return Status::Ok();
  return SGEMM_CUDA_STATUS(cudaMemcpy2DAsync(dst, size_t(dpitch) * kFloatBytes, src, size_t(spitch) * kFloatBytes,
                                             size_t(width) * kFloatBytes, size_t(height), cudaMemcpyDefault,
                                             stream ? stream : w.lane->h2d()));
}

Status JobRun::h2d_op(ShardWork& w, Op op, float* dst, int64_t dpitch, const float* src, int64_t spitch,
                      int64_t row_begin, int64_t row_end, int64_t col_begin, int64_t col_end) {
  const StoredBlock sb = stored_block(op, row_begin, row_end, col_begin, col_end);
  const float* from = src + sb.row_begin * spitch + sb.col_begin;
  const int64_t rows = sb.row_end - sb.row_begin, cols = sb.col_end - sb.col_begin;
  if (op == Op::kN) return h2d_2d(w, dst, dpitch, from, spitch, cols, rows);
  if (rows <= 0 || cols <= 0) return Status::Ok();
  // The stored block (rows x cols, the transpose of what `dst` receives)
  // lands dense in the stage, then is transposed into place; both on h2d, so
  // the next block's copy into the stage waits for this transpose.
  const int64_t stage_ld = pad4(cols);
  const std::size_t need = std::size_t(rows * stage_ld) * kFloatBytes;
  if (need > w.stage_bytes) {
    w.stage.reset();  // stream-ordered on h2d: after the transposes that read it
    w.stage_bytes = 0;
    SGEMM_ASSIGN_OR_RETURN(w.stage, DeviceBuffer::allocate(w.lane->device(), need, w.lane->h2d()));
    w.stage_bytes = need;
  }
  SGEMM_RETURN_IF_ERROR(h2d_2d(w, w.stage.floats(), stage_ld, from, spitch, cols, rows));
  return SGEMM_CUDA_STATUS(launch_transpose(w.stage.floats(), rows, cols, stage_ld, dst, dpitch, w.lane->h2d()));
}

int64_t JobRun::a_prefix(int64_t row_end) const {
  const GemmShape& s = shape();
  return job_.request.op_a == Op::kN ? row_end * s.k : s.m * s.k;
}

int64_t JobRun::b_prefix(int64_t row_end) const {
  const GemmShape& s = shape();
  return job_.request.op_b == Op::kN ? row_end * s.n : s.k * s.n;
}

Status JobRun::copy_out(ShardWork& w, const float* dev, int64_t dev_row0, int64_t ldc, int64_t begin, int64_t end,
                        cudaEvent_t after, cudaStream_t stream) {
  const int64_t n = shape().n;
  const int64_t hldc = job_.c_ld();  // the host C's stride (a region may be wider than n)
  const bool own_stream = !stream;
  if (own_stream) {
    stream = w.lane->d2h();
    SGEMM_RETURN_IF_ERROR(wait_on(w, stream, after));
  }
  cudaEvent_t done = nullptr;
  SGEMM_RETURN_IF_ERROR(timed(
      w, w.out, stream,
      [&] {
        return SGEMM_CUDA_STATUS(cudaMemcpy2DAsync(
            job_.c + begin * hldc, size_t(hldc) * kFloatBytes, dev + (begin - dev_row0) * ldc,
            size_t(ldc) * kFloatBytes, size_t(n) * kFloatBytes, size_t(end - begin), cudaMemcpyDeviceToHost, stream));
      },
      &done, Step{}, own_stream ? nullptr : after));
  w.out.back().meta.bytes = (end - begin) * n * int64_t(kFloatBytes);
  w.out.back().meta.row_begin = begin;
  w.out.back().meta.row_end = end;
  w.out.back().meta.k_begin = w.shard.k_begin;
  w.out.back().meta.k_end = w.shard.k_end;
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

Status JobRun::end_comm_spans(const std::vector<Span>& spans, const std::vector<int64_t>& bytes) {
  for (size_t i = 0; i < works_.size(); ++i) {
    ShardWork& w = works_[i];
    SGEMM_CUDA_TRY(cudaSetDevice(w.lane->device()));
    SGEMM_CUDA_TRY(cudaEventRecord(spans[i].end, w.lane->comm()));
    Span sp = spans[i];
    sp.meta.kind = StepKind::kCollective;
    sp.meta.bytes = i < bytes.size() ? bytes[i] : 0;
    sp.meta.row_begin = w.shard.row_begin;
    sp.meta.row_end = w.shard.row_end;
    sp.meta.k_begin = w.shard.k_begin;
    sp.meta.k_end = w.shard.k_end;
    w.reduce.push_back(sp);
  }
  return Status::Ok();
}

Status JobRun::end_group(NcclGroup& group) {
  SGEMM_RETURN_IF_ERROR(group.end());
  if (!watching_) return comm_->wait_issued(nullptr, 0);
  Status s = comm_->wait_issued(peer_abort_, remaining_ms());
  if (s.code() == StatusCode::kUnavailable && std::chrono::steady_clock::now() >= deadline_)
    return Unavailable("the cluster job did not finish within " + std::to_string(peer_timeout_ms_) + " ms");
  return s;
}

int64_t JobRun::remaining_ms() const {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - std::chrono::steady_clock::now());
  return std::max<int64_t>(1, left.count());
}

Status JobRun::give_up_status() const {
  if (!watching_) return check_cancel();
  if (peer_abort_ && !peer_abort_->status().ok()) return peer_abort_->status();
  SGEMM_RETURN_IF_ERROR(check_cancel());
  SGEMM_RETURN_IF_ERROR(comm_->async_error());
  if (std::chrono::steady_clock::now() >= deadline_)
    return Unavailable("the cluster job did not finish within " + std::to_string(peer_timeout_ms_) + " ms");
  return Status::Ok();
}

Status JobRun::wait_event(ShardWork& w, cudaEvent_t e) {
  SGEMM_CUDA_TRY(cudaSetDevice(w.lane->device()));
  for (;;) {
    const cudaError_t r = cudaEventQuery(e);
    if (r == cudaSuccess) return Status::Ok();
    if (r != cudaErrorNotReady) return SGEMM_CUDA_STATUS(r);
    (void)cudaGetLastError();  // cudaErrorNotReady is not an error; keep the next launch check clean
    SGEMM_RETURN_IF_ERROR(give_up_status());
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

GemmArgs engine_probe_args(const GemmShape& s, float alpha, float beta) {
  alignas(16) static const float probe[4] = {};
  return engine_layout_args(s, alpha, beta, probe, probe, const_cast<float*>(probe));
}

// At least 512 rows (server/planner/plan.h): smaller blocks leave the ping-pong
// kernel's grid too small to fill 132 SMs (2xH200 sweep, docs/engine.md: 4096^3
// row split kernel phase 1.90x with 256-row blocks, 1.99x with 512).
int64_t JobRun::row_block(int64_t rows) const {
  return pipeline_row_block(rows, set_.chunk_rows, set_.pipeline_chunks);
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

Status JobRun::drain_watched() {
  Status why;
  for (;;) {
    bool busy = false;
    for (auto& w : works_) {
      why = SGEMM_CUDA_STATUS(cudaSetDevice(w.lane->device()));
      for (cudaStream_t st : w.lane->streams()) {
        if (!why.ok()) break;
        const cudaError_t r = cudaStreamQuery(st);
        if (r == cudaErrorNotReady) {
          (void)cudaGetLastError();  // not an error
          busy = true;
        } else if (r != cudaSuccess) {
          why = SGEMM_CUDA_STATUS(r);
        }
      }
      if (!why.ok()) break;
    }
    if (why.ok() && !busy) return Status::Ok();
    if (why.ok()) why = give_up_status();
    if (!why.ok()) break;
    report_outputs(/*all_done=*/false);
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  comm_->abort();  // the collectives end, so the streams drain
  for (auto& w : works_) {
    (void)cudaSetDevice(w.lane->device());
    for (cudaStream_t st : w.lane->streams()) (void)cudaStreamSynchronize(st);
    (void)cudaGetLastError();
  }
  return why;
}

Status JobRun::collect_timings() {
  // Every span on the job's common timeline (ms since the origin).
  for (auto& w : works_) {
    SGEMM_CUDA_TRY(cudaSetDevice(w.lane->device()));
    for (auto* spans : {&w.in, &w.kernel, &w.reduce, &w.out}) {
      for (Span& sp : *spans) {
        float b = 0, e = 0;
        SGEMM_CUDA_TRY(cudaEventElapsedTime(&b, w.origin, sp.begin));
        SGEMM_CUDA_TRY(cudaEventElapsedTime(&e, w.origin, sp.end));
        sp.meta.start_ms = w.origin_ms + b;
        sp.meta.end_ms = w.origin_ms + std::max(b, e);
      }
    }
  }
  // A collective makes progress only once every device has reached it: the
  // c-th collective of each device is the same call (begin/end_comm_spans).
  std::vector<double> peer_ready;
  for (const auto& w : works_)
    for (size_t c = 0; c < w.reduce.size(); ++c) {
      if (peer_ready.size() <= c) peer_ready.resize(c + 1, 0.0);
      peer_ready[c] = std::max(peer_ready[c], w.reduce[c].meta.start_ms);
    }
  for (auto& w : works_) {
    // Working: the spans themselves. Waiting: the stream idle between its
    // first and last span of the phase (it waited on another stream).
    auto work_and_gaps = [](const std::vector<Span>& spans, double* work, double* wait) {
      double total = 0, first = 0, last = 0;
      for (size_t i = 0; i < spans.size(); ++i) {
        total += spans[i].meta.end_ms - spans[i].meta.start_ms;
        first = i == 0 ? spans[i].meta.start_ms : std::min(first, spans[i].meta.start_ms);
        last = i == 0 ? spans[i].meta.end_ms : std::max(last, spans[i].meta.end_ms);
      }
      *work = total;
      if (wait) *wait = std::max(0.0, (last - first) - total);
    };
    work_and_gaps(w.in, &w.timing.copy_in_ms, nullptr);  // its wait is the input's (feed_wait)
    work_and_gaps(w.kernel, &w.timing.kernel_ms, &w.timing.kernel_wait_ms);
    work_and_gaps(w.out, &w.timing.copy_out_ms, &w.timing.copy_out_wait_ms);
    double reduce_work = 0, reduce_wait = 0;
    for (size_t c = 0; c < w.reduce.size(); ++c) {
      Step& m = w.reduce[c].meta;
      const double len = m.end_ms - m.start_ms;
      const double wait = std::clamp(peer_ready[c] - m.start_ms, 0.0, len);
      m.peer_ready_ms = std::max(m.start_ms, std::min(peer_ready[c], m.end_ms));
      reduce_wait += wait;
      reduce_work += len - wait;
    }
    w.timing.reduce_ms = reduce_work;
    w.timing.reduce_wait_ms = reduce_wait;
    for (const LaunchRow& l : launch_rows_)
      if (l.work == &w && l.span < w.kernel.size()) w.kernel[l.span].meta.kernel_row = l.row;
    for (auto* spans : {&w.in, &w.kernel, &w.reduce, &w.out})
      for (const Span& sp : *spans) w.timing.steps.push_back(sp.meta);
  }
  return Status::Ok();
}

}  // namespace sgemm
