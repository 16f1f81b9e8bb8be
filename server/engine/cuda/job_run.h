// One job's run on the lanes it leased: the state the split executors share
// and the steps they are made of (timed copies, kernels, NCCL spans, copies
// out, the bounded issue-ahead that lets a cancelled job stop at a block
// boundary). Private to the CUDA engine.
//
// Threads: a JobRun lives on the thread that called CudaEngine::run() (or the
// cluster data plane's job) and is used by that thread only. Every Span's
// events come from its lane.
//
// A job's ranks may be partly in other processes (cluster mode,
// docs/cluster.md): works() then holds this process's ranks only, and
// rank_shards() every rank's shard. Such a job watches its peers
// (watch_peers): every wait also polls an abort token and NCCL's
// asynchronous error and has a deadline, and giving up aborts the
// communicator, so collectives end, streams drain and buffers are freed.
//
// Device layouts are dense with leading dimensions rounded up to 4 floats, so
// every block a kernel sees starts 16-byte aligned whatever the request shape;
// host<->device copies are 2-D (cudaMemcpy2DAsync) for that reason and for the
// strided K slices of A.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "common/cancel_token.h"
#include "common/status.h"
#include "kernels/cuda_status.h"
#include "kernels/gemm_args.h"
#include "kernels/gemm_backend.h"
#include "server/comm/communicator.h"
#include "server/comm/nccl_comm.h"
#include "server/devices/device_pool.h"
#include "server/engine/engine.h"

namespace sgemm {

struct SplitExecutor;

// GemmReport::host_ms, step by step: stamp() adds the host time since the
// previous stamp (or since construction) under the step's name.
class HostSteps {
 public:
  explicit HostSteps(std::vector<std::pair<std::string, double>>* into)
      : into_(into), last_(std::chrono::steady_clock::now()) {}
  void stamp(const char* step) {
    const auto now = std::chrono::steady_clock::now();
    into_->emplace_back(step, std::chrono::duration<double, std::milli>(now - last_).count());
    last_ = now;
  }

 private:
  std::vector<std::pair<std::string, double>>* into_;
  std::chrono::steady_clock::time_point last_;
};

// Start and end events of one operation on one stream, and what it moved
// (meta's times are filled in by collect_timings()).
struct Span {
  cudaEvent_t begin = nullptr;
  cudaEvent_t end = nullptr;
  Step meta;
};

// One device's part of a running job.
struct ShardWork {
  Lane* lane = nullptr;
  int rank = 0;  // the NCCL rank (the local engine: the position in the pool)
  Shard shard;
  DeviceTiming timing;
  std::vector<Span> in, kernel, reduce, out;
  DeviceBuffer a, b, c;
  // Buffers an executor needs besides a, b and c (the cluster's rank 0: the
  // rows it sends to and receives from other processes); freed with them.
  std::vector<DeviceBuffer> extra;
  // A resident B (docs/resident.md) already on this device: rows
  // [b_resident_row0, ...) with leading dimension pad4(n), read in place (no
  // copy of B, no broadcast). Null: B comes from the job's host matrix.
  const float* b_resident = nullptr;
  int64_t b_resident_row0 = 0;
  // A resident A (docs/resident.md): a whole copy on this device (leading
  // dimension a_resident_ld), copied device to device. Null: A comes from the
  // job's host matrix.
  const float* a_resident = nullptr;
  int64_t a_resident_ld = 0;
  const float* a_src(const GemmJob& job) const { return a_resident ? a_resident : job.a; }
  int64_t a_src_ld(const GemmJob& job) const { return a_resident ? a_resident_ld : job.a_ld(); }
  // A resident B that cannot be read in place (stored transposed, or a
  // submatrix of a larger matrix): a whole copy on this device (at the
  // operand's first element, leading dimension b_copy_ld), copied device to
  // device as a host B would be. Null: B is the job's host matrix (or in place).
  const float* b_copy = nullptr;
  int64_t b_copy_ld = 0;
  const float* b_src(const GemmJob& job) const { return b_copy ? b_copy : job.b; }
  int64_t b_src_ld(const GemmJob& job) const { return b_copy ? b_copy_ld : job.b_ld(); }
  // Scratch for a transposed operand's stored block on its way in (h2d_op),
  // used on the h2d stream only; grown there as needed.
  DeviceBuffer stage;
  std::size_t stage_bytes = 0;
  // B's rows [k0, ...) on this device: the resident piece, or the job's buffer.
  const float* b_rows(int64_t k0, int64_t ldb) const {
    return b_resident ? b_resident + (k0 - b_resident_row0) * ldb : b.floats() + k0 * ldb;
  }
  // B (or pieces of it) as the job's kernel prepared it once for every block
  // that reads it (JobRun::prepare_b: fp32x3's split into tf32 planes); none
  // where the kernel reads B as it is. Each is for one B: its first element,
  // leading dimension and shape.
  struct PreparedB {
    DeviceBuffer buffer;
    const float* b = nullptr;
    int64_t ldb = 0, k = 0, n = 0;
  };
  std::vector<PreparedB> b_prepared;
  std::deque<cudaEvent_t> in_flight;  // end events of issued blocks not yet seen finished
  // The device's time reference: `origin` fired at origin_ms (host steady
  // clock, ms since the job's origin), so an event e happened at
  // origin_ms + cudaEventElapsedTime(origin, e).
  cudaEvent_t origin = nullptr;
  double origin_ms = 0;
};

// How a job is run: resolved from the request and the engine's options.
struct JobSettings {
  KernelKind kind = KernelKind::kCublas;
  bool kernel_explicit = false;  // the request named the kernel: no fallback
  int64_t chunk_rows = 0;        // 0: from pipeline_chunks (see row_block)
  int64_t chunk_k = 0;           // 0: from pipeline_chunks (see the K executor)
  int pipeline_chunks = 8;
  KReduce k_reduce = KReduce::kReduceScatter;
  // Blocks a device may have issued and not finished. More keeps the copy and
  // kernel streams busier; fewer makes cancellation act sooner (a cancelled
  // job finishes at most this many blocks per device before it stops).
  int blocks_ahead = 3;
};

inline constexpr std::size_t kFloatBytes = sizeof(float);
inline int64_t round_up(int64_t x, int64_t a) { return (x + a - 1) / a * a; }
inline int64_t pad4(int64_t x) { return round_up(x < 1 ? 1 : x, 4); }
inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A product as the engine lays it out on a device: dense buffers whose leading
// dimensions are padded to 4 floats, so every row starts 16-byte aligned.
inline GemmArgs engine_layout_args(const GemmShape& s, float alpha, float beta, const float* a, const float* b,
                                   float* c) {
  return GemmArgs{s, alpha, beta, a, pad4(s.k), b, pad4(s.n), c, pad4(s.n)};
}
// The same with pointers that must never be read: for a backend's
// can_implement and workspace_bytes, which are pure.
GemmArgs engine_probe_args(const GemmShape& s, float alpha, float beta);

class JobRun {
 public:
  JobRun(const GemmJob& job, const JobSettings& settings, Communicator* comm)
      : job_(job), set_(settings), comm_(comm), origin_(job.origin.value_or(std::chrono::steady_clock::now())) {}

  void add(Lane* lane, int rank, const Shard& shard, const DeviceInfo& info);

  // Issues the work through `executor`, waits for every stream, reports the
  // rows of C and collects timings. Device buffers are freed whatever happens.
  // Its host time is stamped step by step into `steps`.
  Status execute(const SplitExecutor& executor, HostSteps& steps);
  // The same with an issue function outside the executor table (the cluster's
  // link probe).
  Status execute(const std::function<Status(JobRun&)>& issue, HostSteps& steps);

  // The job's ranks reach other processes: every wait polls `abort` (its
  // status is returned) and the communicator's asynchronous error, and gives
  // up (UNAVAILABLE) `timeout_ms` after execute() began; a job that gives up
  // or fails aborts the communicator. Call before execute().
  void watch_peers(const CancelToken* abort, int64_t timeout_ms);
  // Every rank's shard in rank order, when ranks are in other processes
  // (works() has this process's only). Call before execute().
  void set_rank_shards(std::vector<Shard> shards) { rank_shards_ = std::move(shards); }

  std::vector<DeviceTiming> timings() const;
  // Host time the job waited for the NCCL order before it ran (every device's
  // order_wait_ms).
  void set_order_wait_ms(double ms) { order_wait_ms_ = ms; }
  bool fallback_used() const { return fallback_used_; }
  // Every concrete kernel run_gemm launched on this process's ranks, in the
  // order of first use, with its launches (GemmReport::kernel_rows).
  const std::vector<KernelRowUse>& kernel_rows() const { return kernel_rows_; }
  // The kernel every block runs, when it is settled after construction (the
  // engine times the kernels on a leased lane first: kernel_tuner.h).
  void set_kind(KernelKind kind) { set_.kind = kind; }

  // ---- What executors use -------------------------------------------------
  const GemmJob& job() const { return job_; }
  const GemmShape& shape() const { return job_.request.shape; }
  const JobSettings& settings() const { return set_; }
  std::vector<ShardWork>& works() { return works_; }
  Communicator* comm() const { return comm_; }
  const std::vector<Shard>& rank_shards() const { return rank_shards_; }

  // The job's cancellation status (OK while it may go on).
  Status check_cancel() const { return job_.cancel ? job_.cancel->status() : Status::Ok(); }
  // Waits until the first `elements` of `m` are in host memory (streaming input).
  // The time it blocks is charged, as waiting for input, to the device whose
  // copy in is issued next (the one the data was waited for).
  Status feed_wait(MatrixId m, int64_t elements);

  // Records begin, enqueues, records end on `stream`; `end_out` gets the end
  // event, which later stages wait on. `meta` says what the step moves
  // (bytes, rows, K range) for traces; its kind follows from `into`.
  // `begin_at`: an event recorded on `stream` with nothing enqueued after it
  // (the previous span's end): the span starts there, and no second event is
  // recorded for the same point of the stream.
  template <typename Enqueue>
  Status timed(ShardWork& w, std::vector<Span>& into, cudaStream_t stream, Enqueue&& enqueue, cudaEvent_t* end_out,
               const Step& meta = {}, cudaEvent_t begin_at = nullptr) {
    SGEMM_CUDA_TRY(cudaSetDevice(w.lane->device()));
    cudaEvent_t begin = begin_at;
    if (!begin) {
      SGEMM_ASSIGN_OR_RETURN(begin, w.lane->next_event());
      SGEMM_CUDA_TRY(cudaEventRecord(begin, stream));
    }
    SGEMM_ASSIGN_OR_RETURN(cudaEvent_t end, w.lane->next_event());
    SGEMM_RETURN_IF_ERROR(enqueue());
    SGEMM_CUDA_TRY(cudaEventRecord(end, stream));
    Span span{begin, end, meta};
    span.meta.kind = &into == &w.in ? StepKind::kCopyIn : &into == &w.out ? StepKind::kCopyOut : StepKind::kKernel;
    if (&into == &w.in) charge_input_wait(w);
    into.push_back(span);
    if (end_out) *end_out = end;
    return Status::Ok();
  }

  // Makes `waiter` wait for everything enqueued on `producer` so far.
  Status order_after(ShardWork& w, cudaStream_t waiter, cudaStream_t producer);
  // Makes `stream` of `w` wait for `event`.
  Status wait_on(ShardWork& w, cudaStream_t stream, cudaEvent_t event);

  // The job's kernel on the lane's compute stream, with the lane's workspace.
  // When the kernel refuses a block and the request did not name it, cuBLAS
  // takes that block (the report says so).
  Status run_gemm(ShardWork& w, const GemmArgs& args);
  // Prepares `args`' B once on w's compute stream for the blocks that follow
  // (GemmBackend::prepare_b); run_gemm then hands it to every block with that
  // B. A kernel with nothing to prepare, or no memory for it, leaves every
  // block to do its own (the same results).
  Status prepare_b(ShardWork& w, const GemmArgs& args);

  // A width x height block of floats into the device, on w's h2d stream (a
  // null `stream`) or on `stream`.
  Status h2d_2d(ShardWork& w, float* dst, int64_t dpitch, const float* src, int64_t spitch, int64_t width,
                int64_t height, cudaStream_t stream = nullptr);
  // Rows [row_begin, row_end) x columns [col_begin, col_end) of op(X) into
  // `dst` (dense N layout, leading dimension dpitch) on w's h2d stream, where
  // X is stored at `src` (host or device) with leading dimension `spitch`.
  // kN: one 2-D copy. kT: the stored block (stored_block(), the mirror) is
  // copied into w.stage and transposed on the device into `dst`.
  Status h2d_op(ShardWork& w, Op op, float* dst, int64_t dpitch, const float* src, int64_t spitch, int64_t row_begin,
                int64_t row_end, int64_t col_begin, int64_t col_end);
  // Elements of the stored A (B) that must be in host memory before rows
  // [0, row_end) of op(A) (op(B)) can be read: a row prefix under kN, all of
  // it under kT (every row of op(X) reads every row of the stored X).
  int64_t a_prefix(int64_t row_end) const;
  int64_t b_prefix(int64_t row_end) const;
  // Copies rows [begin, end) of C (device rows start at `dev_row0` of `dev`)
  // to the host once `after` (on this device) is done; queues them for rows_ready.
  // On the lane's d2h stream (null `stream`), which waits for `after`; on
  // another `stream`, `after` must be the last thing recorded there (the
  // copy's span starts at it).
  Status copy_out(ShardWork& w, const float* dev, int64_t dev_row0, int64_t ldc, int64_t begin, int64_t end,
                  cudaEvent_t after, cudaStream_t stream = nullptr);

  // Every device's comm stream brackets one collective: begin_comm_spans()
  // records the start on each (after `wait_for[i]` when given), end_comm_spans()
  // the end, adding the span to each device's reduce timing. `bytes[i]` is
  // what device i receives (traces); empty = unknown.
  Status begin_comm_spans(std::vector<Span>* spans, const std::vector<cudaEvent_t>* wait_for = nullptr);
  Status end_comm_spans(const std::vector<Span>& spans, const std::vector<int64_t>& bytes = {});
  // Ends `group` and waits until every local rank has issued it (at once on
  // the local communicator; on a cluster's, polling as watch_peers says).
  Status end_group(NcclGroup& group);

  // A block ending with `done` was issued on `w`. While more than blocks_ahead
  // blocks of `w` are unfinished, waits for the oldest, polling the job's
  // cancellation (and reporting finished rows) as it waits.
  Status throttle(ShardWork& w, cudaEvent_t done);

  // Rows per block of a row pipeline over `rows` rows.
  int64_t row_block(int64_t rows) const;

 private:
  Status wait_event(ShardWork& w, cudaEvent_t e);
  // Why a wait gives up now: the job's cancellation, and for a job that
  // watches its peers the abort token, NCCL's asynchronous error and the
  // deadline (OK: go on waiting).
  Status give_up_status() const;
  int64_t remaining_ms() const;
  Status record_origins();
  void charge_input_wait(ShardWork& w);
  double host_ms(std::chrono::steady_clock::time_point t) const {
    return std::chrono::duration<double, std::milli>(t - origin_).count();
  }
  void report_outputs(bool all_done);
  Status drain();
  // drain() for a job that watches its peers: polls give_up_status(); giving
  // up aborts the communicator, then drains.
  Status drain_watched();
  Status collect_timings();

  // A block of C rows on its way to host memory; `done` fires when it is there.
  struct OutBlock {
    cudaEvent_t done = nullptr;
    int64_t begin = 0, end = 0;
    bool reported = false;
  };

  const GemmJob& job_;
  JobSettings set_;
  Communicator* comm_;
  std::vector<ShardWork> works_;
  std::vector<Shard> rank_shards_;
  // watch_peers(): the token, the timeout and the deadline it sets at execute().
  bool watching_ = false;
  const CancelToken* peer_abort_ = nullptr;
  int64_t peer_timeout_ms_ = 0;
  std::chrono::steady_clock::time_point deadline_{};
  std::vector<OutBlock> outs_;
  bool fallback_used_ = false;
  std::vector<KernelRowUse> kernel_rows_;  // run_gemm's launches by row
  // Each launch of run_gemm: its work, its span's index in work->kernel and its
  // index in kernel_rows_ (Step::kernel_row).
  struct LaunchRow {
    const ShardWork* work = nullptr;
    std::size_t span = 0;
    int row = -1;
  };
  std::vector<LaunchRow> launch_rows_;
  const std::chrono::steady_clock::time_point origin_;
  double order_wait_ms_ = 0;
  // Input waits not yet charged to a device (see feed_wait).
  double pending_wait_ms_ = 0;
  std::vector<Step> pending_waits_;
};

}  // namespace sgemm
