// The multi-GPU CUDA engine. See cuda_engine.h for threads and ownership and
// docs/engine.md for the design; this file turns a Plan into stream work.
//
// Per lane the four streams play fixed roles: h2d (copies in, memsets of the
// device buffers), compute (kernels), comm (NCCL), d2h (copies out). Work of
// one block is chained across them with events, so block i's kernel overlaps
// block i+1's copy in and block i-1's copy out. Every event pair that brackets
// an operation also times it (DeviceTiming).
//
// Device layouts are dense with leading dimensions rounded up to 4 floats, so
// every block a kernel sees starts 16-byte aligned whatever the request shape;
// host<->device copies are 2-D (cudaMemcpy2DAsync) for that reason and for the
// strided K slices of A.
#include "server/engine/cuda_engine.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <mutex>

#include "common/cuda_status.h"
#include "kernels/gemm_backend.h"
#include "server/comm/nccl_comm.h"
#include "server/devices/device_pool.h"
#include "server/devices/pinned_host_pool.h"

namespace sgemm {
namespace {

constexpr std::size_t kF = sizeof(float);

int64_t round_up(int64_t x, int64_t a) { return (x + a - 1) / a * a; }
int64_t pad4(int64_t x) { return round_up(std::max<int64_t>(x, 1), 4); }
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Start and end events of one operation on one stream.
struct Span {
  cudaEvent_t begin = nullptr;
  cudaEvent_t end = nullptr;
};

// One device's part of a running job.
struct ShardWork {
  Lane* lane = nullptr;
  int rank = 0;  // position in the pool, which is also the NCCL rank
  Shard shard;
  DeviceTiming timing;
  std::vector<Span> in, kernel, reduce, out;
  DeviceBuffer a, b, c;
};

// A block of C rows on its way to host memory; `done` fires when it is there.
struct OutBlock {
  cudaEvent_t done = nullptr;
  int64_t begin = 0, end = 0;
  bool reported = false;
};

struct JobSettings {
  KernelKind kind = KernelKind::kCublas;
  bool kernel_explicit = false;  // the request named the kernel: no fallback
  int64_t chunk_rows = 0;
  int64_t chunk_k = 0;
  int pipeline_chunks = 8;
  KReduce k_reduce = KReduce::kReduceScatter;
};

// Issues one job's work on its leased lanes, drains them, and reports.
// Lives on the run() thread only.
class JobRun {
 public:
  JobRun(const GemmJob& job, const JobSettings& settings, NcclCommunicator* comm)
      : job_(job), set_(settings), comm_(comm) {}

  void add(Lane* lane, int rank, const Shard& shard, const DeviceInfo& info) {
    ShardWork w;
    w.lane = lane;
    w.rank = rank;
    w.shard = shard;
    w.timing.device = info.index;
    w.timing.name = info.name;
    w.timing.shard = shard;
    works_.push_back(std::move(w));
  }

  Status execute(SplitMode mode) {
    for (auto& w : works_) w.lane->reset_events();
    Status issued = mode == SplitMode::kK ? issue_k() : issue_rows();
    Status drained = drain();
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

  std::vector<DeviceTiming> timings() const {
    std::vector<DeviceTiming> v;
    for (const auto& w : works_) v.push_back(w.timing);
    return v;
  }
  bool fallback_used() const { return fallback_used_; }

 private:
  Status feed_wait(MatrixId m, int64_t elements) {
    if (!job_.feed || elements <= 0) return Status::Ok();
    return job_.feed->wait_for(m, elements);
  }

  // Records begin, enqueues, records end on `stream`; `end_out` gets the end
  // event, which later stages wait on.
  template <typename Enqueue>
  Status timed(ShardWork& w, std::vector<Span>& into, cudaStream_t stream, Enqueue&& enqueue,
               cudaEvent_t* end_out) {
    SGEMM_CUDA_TRY(cudaSetDevice(w.lane->device()));
    SGEMM_ASSIGN_OR_RETURN(cudaEvent_t begin, w.lane->next_event());
    SGEMM_ASSIGN_OR_RETURN(cudaEvent_t end, w.lane->next_event());
    SGEMM_CUDA_TRY(cudaEventRecord(begin, stream));
    SGEMM_RETURN_IF_ERROR(enqueue());
    SGEMM_CUDA_TRY(cudaEventRecord(end, stream));
    into.push_back(Span{begin, end});
    if (end_out) *end_out = end;
    return Status::Ok();
  }

  // Makes `waiter` wait for everything enqueued on `producer` so far.
  Status order_after(ShardWork& w, cudaStream_t waiter, cudaStream_t producer) {
    SGEMM_CUDA_TRY(cudaSetDevice(w.lane->device()));
    SGEMM_ASSIGN_OR_RETURN(cudaEvent_t e, w.lane->next_event());
    SGEMM_CUDA_TRY(cudaEventRecord(e, producer));
    SGEMM_CUDA_TRY(cudaStreamWaitEvent(waiter, e, 0));
    return Status::Ok();
  }

  // The requested kernel; when it refuses a block and the request did not
  // name it, cuBLAS takes that block.
  Status run_gemm(ShardWork& w, const GemmArgs& args) {
    GemmBackend* be = w.lane->backend(set_.kind);
    if (!be) return Internal("no backend for the resolved kernel on this lane");
    Status can = be->can_implement(args);
    if (!can.ok()) {
      GemmBackend* fb = w.lane->backend(KernelKind::kCublas);
      if (set_.kernel_explicit || !fb || fb == be) return can;
      SGEMM_RETURN_IF_ERROR(fb->can_implement(args));
      be = fb;
      fallback_used_ = true;
    }
    return be->run(args, w.lane->compute());
  }

  Status h2d_2d(ShardWork& w, float* dst, int64_t dpitch, const float* src, int64_t spitch, int64_t width,
                int64_t height) {
    if (width <= 0 || height <= 0) return Status::Ok();
    return SGEMM_CUDA_STATUS(cudaMemcpy2DAsync(dst, size_t(dpitch) * kF, src, size_t(spitch) * kF,
                                               size_t(width) * kF, size_t(height), cudaMemcpyHostToDevice,
                                               w.lane->h2d()));
  }

  Status d2h_2d(ShardWork& w, float* dst, int64_t dpitch, const float* src, int64_t spitch, int64_t width,
                int64_t height) {
    if (width <= 0 || height <= 0) return Status::Ok();
    return SGEMM_CUDA_STATUS(cudaMemcpy2DAsync(dst, size_t(dpitch) * kF, src, size_t(spitch) * kF,
                                               size_t(width) * kF, size_t(height), cudaMemcpyDeviceToHost,
                                               w.lane->d2h()));
  }

  // Copies rows [begin, end) of C (device rows start at `dev_row0` of `dev`)
  // to the host once `after` (on this device) is done; queues them for rows_ready.
  Status copy_out(ShardWork& w, const float* dev, int64_t dev_row0, int64_t ldc, int64_t begin, int64_t end,
                  cudaEvent_t after) {
    const int64_t n = job_.shape.n;
    SGEMM_CUDA_TRY(cudaSetDevice(w.lane->device()));
    SGEMM_CUDA_TRY(cudaStreamWaitEvent(w.lane->d2h(), after, 0));
    cudaEvent_t done = nullptr;
    SGEMM_RETURN_IF_ERROR(timed(
        w, w.out, w.lane->d2h(),
        [&] { return d2h_2d(w, job_.c + begin * n, n, dev + (begin - dev_row0) * ldc, ldc, n, end - begin); },
        &done));
    outs_.push_back(OutBlock{done, begin, end, false});
    report_outputs(/*all_done=*/false);
    return Status::Ok();
  }

  // Tells the sink about blocks that have reached host memory. Without
  // all_done it only polls (never blocks), so reporting overlaps issuing.
  void report_outputs(bool all_done) {
    for (auto& o : outs_) {
      if (o.reported) continue;
      if (!all_done) {
        cudaError_t e = cudaEventQuery(o.done);
        if (e != cudaSuccess) {
          (void)cudaGetLastError();  // cudaErrorNotReady is not an error; keep the next launch check clean
          continue;
        }
      }
      o.reported = true;
      if (job_.sink) job_.sink->rows_ready(o.begin, o.end);
    }
  }

  int64_t row_block(int64_t rows) const {
    if (set_.chunk_rows > 0) return set_.chunk_rows;
    // At least 512 rows: smaller blocks leave the ping-pong kernel's grid too
    // small to fill 132 SMs (2xH200 sweep, docs/engine.md: 4096^3 row split
    // kernel phase 1.90x with 256-row blocks, 1.99x with 512).
    return std::max<int64_t>(512, round_up(ceil_div(rows, std::max(1, set_.pipeline_chunks)), 128));
  }

  // Single GPU and row split. B enters through every device's host link (a
  // slice each) and is completed on every device by one NCCL broadcast per
  // slice; A (and C) then stream in by row blocks, one kernel per block.
  Status issue_rows() {
    const GemmShape& s = job_.shape;
    const int64_t lda = pad4(s.k), ldb = pad4(s.n), ldc = ldb;
    const int p = int(works_.size());
    const bool has_c = job_.has_c;
    for (auto& w : works_) {
      const int dev = w.lane->device();
      const int64_t rows = w.shard.row_end - w.shard.row_begin;
      SGEMM_ASSIGN_OR_RETURN(w.b, DeviceBuffer::allocate(dev, size_t(s.k * ldb) * kF, w.lane->h2d()));
      if (rows > 0) {
        SGEMM_ASSIGN_OR_RETURN(w.a, DeviceBuffer::allocate(dev, size_t(rows * lda) * kF, w.lane->h2d()));
        SGEMM_ASSIGN_OR_RETURN(w.c, DeviceBuffer::allocate(dev, size_t(rows * ldc) * kF, w.lane->h2d()));
      }
    }
    // B: slice j of its rows comes in on device j.
    const auto kb = split_range(s.k, std::vector<double>(size_t(p), 1.0), 16);
    std::vector<cudaEvent_t> b_ready(static_cast<size_t>(p));
    for (int j = 0; j < p; ++j) {
      ShardWork& w = works_[size_t(j)];
      SGEMM_RETURN_IF_ERROR(feed_wait(MatrixId::kB, kb[size_t(j) + 1] * s.n));
      const int64_t r0 = kb[size_t(j)], r1 = kb[size_t(j) + 1];
      SGEMM_RETURN_IF_ERROR(timed(
          w, w.in, w.lane->h2d(),
          [&] { return h2d_2d(w, w.b.floats() + r0 * ldb, ldb, job_.b + r0 * s.n, s.n, s.n, r1 - r0); },
          &b_ready[size_t(j)]));
    }
    if (p > 1) {
      if (!comm_ || comm_->size() != p) return Internal("row split without a communicator over its devices");
      std::vector<Span> spans(static_cast<size_t>(p));
      for (int j = 0; j < p; ++j) {
        ShardWork& w = works_[size_t(j)];
        SGEMM_CUDA_TRY(cudaSetDevice(w.lane->device()));
        SGEMM_CUDA_TRY(cudaStreamWaitEvent(w.lane->comm(), b_ready[size_t(j)], 0));
        SGEMM_ASSIGN_OR_RETURN(spans[size_t(j)].begin, w.lane->next_event());
        SGEMM_ASSIGN_OR_RETURN(spans[size_t(j)].end, w.lane->next_event());
        SGEMM_CUDA_TRY(cudaEventRecord(spans[size_t(j)].begin, w.lane->comm()));
      }
      {
        NcclGroup group;
        SGEMM_RETURN_IF_ERROR(group.start_status());
        for (int root = 0; root < p; ++root) {
          const int64_t r0 = kb[size_t(root)], r1 = kb[size_t(root) + 1];
          if (r1 <= r0) continue;
          for (int j = 0; j < p; ++j) {
            ShardWork& w = works_[size_t(j)];
            float* slice = w.b.floats() + r0 * ldb;
            SGEMM_NCCL_TRY(ncclBroadcast(slice, slice, size_t((r1 - r0) * ldb), ncclFloat, root,
                                         comm_->comm(w.rank), w.lane->comm()));
          }
        }
        SGEMM_RETURN_IF_ERROR(group.end());
      }
      for (int j = 0; j < p; ++j) {
        ShardWork& w = works_[size_t(j)];
        SGEMM_CUDA_TRY(cudaSetDevice(w.lane->device()));
        SGEMM_CUDA_TRY(cudaEventRecord(spans[size_t(j)].end, w.lane->comm()));
        w.reduce.push_back(spans[size_t(j)]);
        b_ready[size_t(j)] = spans[size_t(j)].end;
      }
    }
    for (int j = 0; j < p; ++j) {
      ShardWork& w = works_[size_t(j)];
      SGEMM_CUDA_TRY(cudaSetDevice(w.lane->device()));
      SGEMM_CUDA_TRY(cudaStreamWaitEvent(w.lane->compute(), b_ready[size_t(j)], 0));
    }
    // A (and C) by row blocks: copy in, kernel, copy out, each on its stream.
    const float beta = has_c ? job_.beta : 0.0f;
    for (auto& w : works_) {
      const int64_t r0 = w.shard.row_begin, r1 = w.shard.row_end;
      const int64_t step = row_block(r1 - r0);
      for (int64_t c0 = r0; c0 < r1; c0 += step) {
        const int64_t c1 = std::min(r1, c0 + step);
        SGEMM_RETURN_IF_ERROR(feed_wait(MatrixId::kA, c1 * s.k));
        if (has_c) SGEMM_RETURN_IF_ERROR(feed_wait(MatrixId::kC, c1 * s.n));
        float* da = w.a.floats() + (c0 - r0) * lda;
        float* dc = w.c.floats() + (c0 - r0) * ldc;
        cudaEvent_t in_done = nullptr, k_done = nullptr;
        SGEMM_RETURN_IF_ERROR(timed(
            w, w.in, w.lane->h2d(),
            [&]() -> Status {
              SGEMM_RETURN_IF_ERROR(h2d_2d(w, da, lda, job_.a + c0 * s.k, s.k, s.k, c1 - c0));
              if (has_c) SGEMM_RETURN_IF_ERROR(h2d_2d(w, dc, ldc, job_.c + c0 * s.n, s.n, s.n, c1 - c0));
              return Status::Ok();
            },
            &in_done));
        SGEMM_CUDA_TRY(cudaStreamWaitEvent(w.lane->compute(), in_done, 0));
        GemmArgs args{GemmShape{c1 - c0, s.n, s.k}, job_.alpha, beta, da, lda, w.b.floats(), ldb, dc, ldc};
        SGEMM_RETURN_IF_ERROR(timed(w, w.kernel, w.lane->compute(), [&] { return run_gemm(w, args); }, &k_done));
        SGEMM_RETURN_IF_ERROR(copy_out(w, w.c.floats(), r0, ldc, c0, c1, k_done));
      }
    }
    return Status::Ok();
  }

  // K split. Device i gets columns [k0, k1) of A (strided on the host: 2-D
  // copies) and rows [k0, k1) of B, by K blocks, and accumulates its partial C
  // over them. Shard 0 alone starts from C (so beta*C is added exactly once);
  // the others start from zero. The partial Cs are summed by reduce-scatter
  // (each device then copies out its own block of rows) or reduce to device 0.
  Status issue_k() {
    const GemmShape& s = job_.shape;
    const int p = int(works_.size());
    if (p < 2 || !comm_ || comm_->size() != p) return Internal("K split without a communicator over its devices");
    const bool scatter = set_.k_reduce == KReduce::kReduceScatter;
    const int64_t m_pad = scatter ? round_up(s.m, p) : s.m;
    const int64_t ldb = pad4(s.n), ldc = ldb;
    SGEMM_RETURN_IF_ERROR(feed_wait(MatrixId::kA, s.m * s.k));  // a column slice needs every row
    if (job_.has_c) SGEMM_RETURN_IF_ERROR(feed_wait(MatrixId::kC, s.m * s.n));
    for (auto& w : works_) {
      const int dev = w.lane->device();
      const int64_t k0 = w.shard.k_begin, k1 = w.shard.k_end, kc = k1 - k0;
      const int64_t lda = pad4(kc);
      const bool owns_c = w.rank == 0 && job_.has_c;
      SGEMM_ASSIGN_OR_RETURN(w.c, DeviceBuffer::allocate(dev, size_t(m_pad * ldc) * kF, w.lane->h2d()));
      if (kc > 0) {
        SGEMM_ASSIGN_OR_RETURN(w.a, DeviceBuffer::allocate(dev, size_t(s.m * lda) * kF, w.lane->h2d()));
        SGEMM_ASSIGN_OR_RETURN(w.b, DeviceBuffer::allocate(dev, size_t(kc * ldb) * kF, w.lane->h2d()));
      }
      // The partial C's starting value, on h2d so the kernels' waits cover it.
      SGEMM_RETURN_IF_ERROR(timed(
          w, w.in, w.lane->h2d(),
          [&]() -> Status {
            if (owns_c) SGEMM_RETURN_IF_ERROR(h2d_2d(w, w.c.floats(), ldc, job_.c, s.n, s.n, s.m));
            const int64_t zero_from = (kc > 0 || owns_c) ? s.m : 0;  // padding rows, or all when no kernel runs
            if (m_pad > zero_from)
              SGEMM_CUDA_TRY(cudaMemsetAsync(w.c.floats() + zero_from * ldc, 0,
                                             size_t((m_pad - zero_from) * ldc) * kF, w.lane->h2d()));
            return Status::Ok();
          },
          nullptr));
      // K blocks: 1/pipeline_chunks of the slice, at least 2048. When C is small
      // (m*n <= 4 Mi elements) each block's product is too small to fill the GPU
      // and A's strided 2-D copy moves short rows, so blocks are at least 16384
      // deep there (2xH200 sweep at 1024x1024x65536, docs/engine.md: kernel plus
      // reduce 1.49x with 4096-deep blocks, 1.92x with 16384).
      const int64_t min_step = s.m * s.n <= (int64_t{4} << 20) ? 16384 : 2048;
      const int64_t step = set_.chunk_k > 0
                               ? set_.chunk_k
                               : std::max<int64_t>(min_step, round_up(ceil_div(kc, std::max(1, set_.pipeline_chunks)), 16));
      bool first = true;
      for (int64_t s0 = k0; s0 < k1; s0 += step) {
        const int64_t s1 = std::min(k1, s0 + step);
        SGEMM_RETURN_IF_ERROR(feed_wait(MatrixId::kB, s1 * s.n));
        float* da = w.a.floats() + (s0 - k0);
        float* db = w.b.floats() + (s0 - k0) * ldb;
        cudaEvent_t in_done = nullptr;
        SGEMM_RETURN_IF_ERROR(timed(
            w, w.in, w.lane->h2d(),
            [&]() -> Status {
              SGEMM_RETURN_IF_ERROR(h2d_2d(w, da, lda, job_.a + s0, s.k, s1 - s0, s.m));
              return h2d_2d(w, db, ldb, job_.b + s0 * s.n, s.n, s.n, s1 - s0);
            },
            &in_done));
        SGEMM_CUDA_TRY(cudaStreamWaitEvent(w.lane->compute(), in_done, 0));
        const float beta = first ? (owns_c ? job_.beta : 0.0f) : 1.0f;
        GemmArgs args{GemmShape{s.m, s.n, s1 - s0}, job_.alpha, beta, da, lda, db, ldb, w.c.floats(), ldc};
        SGEMM_RETURN_IF_ERROR(timed(w, w.kernel, w.lane->compute(), [&] { return run_gemm(w, args); }, nullptr));
        first = false;
      }
      // The reduce starts after this device's kernels and its h2d work (which
      // is all there is when its slice is empty).
      SGEMM_RETURN_IF_ERROR(order_after(w, w.lane->comm(), w.lane->h2d()));
      SGEMM_RETURN_IF_ERROR(order_after(w, w.lane->comm(), w.lane->compute()));
    }
    std::vector<Span> spans(static_cast<size_t>(p));
    for (int i = 0; i < p; ++i) {
      ShardWork& w = works_[size_t(i)];
      SGEMM_CUDA_TRY(cudaSetDevice(w.lane->device()));
      SGEMM_ASSIGN_OR_RETURN(spans[size_t(i)].begin, w.lane->next_event());
      SGEMM_ASSIGN_OR_RETURN(spans[size_t(i)].end, w.lane->next_event());
      SGEMM_CUDA_TRY(cudaEventRecord(spans[size_t(i)].begin, w.lane->comm()));
    }
    const int64_t block_rows = m_pad / p;
    {
      NcclGroup group;
      SGEMM_RETURN_IF_ERROR(group.start_status());
      for (int i = 0; i < p; ++i) {
        ShardWork& w = works_[size_t(i)];
        float* part = w.c.floats();
        if (scatter) {
          const size_t count = size_t(block_rows * ldc);
          SGEMM_NCCL_TRY(ncclReduceScatter(part, part + size_t(w.rank) * count, count, ncclFloat, ncclSum,
                                           comm_->comm(w.rank), w.lane->comm()));
        } else {
          SGEMM_NCCL_TRY(ncclReduce(part, part, size_t(s.m * ldc), ncclFloat, ncclSum, 0, comm_->comm(w.rank),
                                    w.lane->comm()));
        }
      }
      SGEMM_RETURN_IF_ERROR(group.end());
    }
    for (int i = 0; i < p; ++i) {
      ShardWork& w = works_[size_t(i)];
      SGEMM_CUDA_TRY(cudaSetDevice(w.lane->device()));
      SGEMM_CUDA_TRY(cudaEventRecord(spans[size_t(i)].end, w.lane->comm()));
      w.reduce.push_back(spans[size_t(i)]);
    }
    if (scatter) {
      for (int i = 0; i < p; ++i) {
        ShardWork& w = works_[size_t(i)];
        const int64_t b0 = std::min(s.m, w.rank * block_rows), b1 = std::min(s.m, b0 + block_rows);
        if (b1 > b0) SGEMM_RETURN_IF_ERROR(copy_out(w, w.c.floats(), 0, ldc, b0, b1, spans[size_t(i)].end));
      }
    } else {
      ShardWork& root = works_[0];
      const int64_t step = row_block(s.m);
      for (int64_t c0 = 0; c0 < s.m; c0 += step)
        SGEMM_RETURN_IF_ERROR(copy_out(root, root.c.floats(), 0, ldc, c0, std::min(s.m, c0 + step), spans[0].end));
    }
    return Status::Ok();
  }

  // Waits for every stream of every lane; the first error wins.
  Status drain() {
    Status first;
    for (auto& w : works_) {
      Status s = SGEMM_CUDA_STATUS(cudaSetDevice(w.lane->device()));
      for (cudaStream_t st : w.lane->streams()) {
        if (s.ok()) s = SGEMM_CUDA_STATUS(cudaStreamSynchronize(st));
      }
      if (first.ok() && !s.ok()) first = s;
    }
    return first;
  }

  Status collect_timings() {
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

  const GemmJob& job_;
  JobSettings set_;
  NcclCommunicator* comm_;
  std::vector<ShardWork> works_;
  std::vector<OutBlock> outs_;
  bool fallback_used_ = false;
};

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
    info.default_kernel = std::string(kernel_kind_name(default_kind_));
    info.kernels.push_back(info.default_kernel);
    for (KernelKind k : pool_->kernels())
      if (k != default_kind_) info.kernels.emplace_back(kernel_kind_name(k));
    return info;
  }

  HostAllocator& host_allocator() override { return host_pool_; }

  Status validate(const GemmShape& shape, const ExecOptions& options) const override {
    if (shape.m < 0) return InvalidArgument("shape.m = " + std::to_string(shape.m) + " must be >= 0");
    if (shape.n < 0) return InvalidArgument("shape.n = " + std::to_string(shape.n) + " must be >= 0");
    if (shape.k < 0) return InvalidArgument("shape.k = " + std::to_string(shape.k) + " must be >= 0");
    // Forced kRows/kK on a one-GPU pool is accepted and runs on that GPU (the
    // plan reason says so); see docs/engine.md.
    return resolve_kernel(options.kernel).status();
  }

  StatusOr<GemmReport> run(const GemmJob& job) override {
    SGEMM_RETURN_IF_ERROR(validate(job.shape, job.options));
    SGEMM_ASSIGN_OR_RETURN(KernelKind kind, resolve_kernel(job.options.kernel));
    const GemmShape& s = job.shape;
    GemmReport report;
    report.backend = "cuda";
    report.kernel = std::string(kernel_kind_name(kind));
    report.split = SplitMode::kSingle;
    if (s.m == 0 || s.n == 0) {
      report.plan_reason = "empty result: nothing to compute";
      return report;
    }
    if (!job.c) return InvalidArgument("job.c is null");
    if (s.k == 0) return run_k_zero(job, report);
    if (!job.a || !job.b) return InvalidArgument(std::string("job.") + (job.a ? "b" : "a") + " is null");

    PlanRequest req;
    req.shape = s;
    req.has_c = job.has_c;
    req.forced = job.options.split;
    req.k_reduce = options_.k_reduce;
    for (int i = 0; i < pool_->size(); ++i) {
      req.devices.push_back(DeviceCaps{pool_->ordinal(i), options_.gpu_tflops, options_.host_link_gbps,
                                       options_.peer_gbps, pool_->busy_lanes(i)});
    }
    const Plan plan = make_plan(req, options_.planner);
    report.split = plan.mode;
    report.plan_reason = plan.reason;

    JobSettings set;
    set.kind = kind;
    set.kernel_explicit = !job.options.kernel.empty();
    set.chunk_rows = options_.chunk_rows;
    set.chunk_k = options_.chunk_k;
    set.pipeline_chunks = options_.planner.pipeline_chunks;
    set.k_reduce = options_.k_reduce;

    std::unique_lock<std::mutex> order;  // held for split jobs: NCCL order
    std::vector<LaneLease> leases;       // declared before the JobRun: outlive its buffers
    JobRun jr(job, set, comm_.get());
    if (plan.mode == SplitMode::kSingle) {
      const int idx = index_of(plan.shards[0].device);
      if (idx < 0) return Internal("planner chose an unknown device");
      leases.push_back(pool_->acquire(idx));
      jr.add(&*leases.back(), idx, plan.shards[0], pool_->info(idx));
    } else {
      if (!comm_ || int(plan.shards.size()) != pool_->size())
        return Internal("split plan does not cover the device pool");
      order = std::unique_lock<std::mutex>(comm_->order_mutex());
      for (int i = 0; i < pool_->size(); ++i) leases.push_back(pool_->acquire(i));
      for (int i = 0; i < pool_->size(); ++i) jr.add(&*leases[size_t(i)], i, plan.shards[size_t(i)], pool_->info(i));
    }
    Status st = jr.execute(plan.mode);
    if (!st.ok()) return st;
    if (jr.fallback_used()) {
      report.kernel = "cublas";
      report.plan_reason += "; " + std::string(kernel_kind_name(kind)) + " refused some blocks: cublas ran them";
      if (options_.log) options_.log("cuda engine: " + report.plan_reason);
    }
    report.devices = jr.timings();
    return report;
  }

 private:
  StatusOr<KernelKind> resolve_kernel(const std::string& name) const {
    if (name.empty()) return default_kind_;
    std::string available;
    for (KernelKind k : pool_->kernels()) available += (available.empty() ? "" : ", ") + std::string(kernel_kind_name(k));
    KernelKind kind;
    if (!parse_kernel_kind(name, &kind))
      return InvalidArgument("unknown kernel '" + name + "' (available: " + available + ")");
    const auto& ks = pool_->kernels();
    if (std::find(ks.begin(), ks.end(), kind) == ks.end())
      return InvalidArgument("kernel '" + name + "' is not available in this build (available: " + available + ")");
    return kind;
  }

  int index_of(int ordinal) const {
    for (int i = 0; i < pool_->size(); ++i)
      if (pool_->ordinal(i) == ordinal) return i;
    return -1;
  }

  // K = 0: C = beta * C (or zeros); nothing for a GPU to do.
  StatusOr<GemmReport> run_k_zero(const GemmJob& job, GemmReport report) {
    const int64_t count = job.shape.m * job.shape.n;
    if (job.has_c && job.feed) SGEMM_RETURN_IF_ERROR(job.feed->wait_for(MatrixId::kC, count));
    const bool keep = job.has_c && job.beta != 0.0f;
    for (int64_t i = 0; i < count; ++i) job.c[i] = keep ? job.beta * job.c[i] : 0.0f;
    if (job.sink) job.sink->rows_ready(0, job.shape.m);
    report.plan_reason = "k = 0: C = beta*C on the host";
    return report;
  }

  const CudaEngineOptions options_;
  std::unique_ptr<DevicePool> pool_;
  std::unique_ptr<NcclCommunicator> comm_;  // null with one device
  PinnedHostPool host_pool_;
  const KernelKind default_kind_;
};

}  // namespace

StatusOr<std::unique_ptr<Engine>> make_cuda_engine(const CudaEngineOptions& options) {
  if (options.lanes_per_device < 1) return InvalidArgument("lanes_per_device must be >= 1");
  if (!(options.gpu_tflops > 0) || !(options.host_link_gbps > 0) || !(options.peer_gbps > 0))
    return InvalidArgument("gpu_tflops, host_link_gbps and peer_gbps must be > 0");
  if (options.chunk_rows < 0 || options.chunk_k < 0) return InvalidArgument("chunk_rows and chunk_k must be >= 0");
  DevicePoolOptions po;
  po.devices = options.devices;
  po.lanes_per_device = options.lanes_per_device;
  SGEMM_ASSIGN_OR_RETURN(std::unique_ptr<DevicePool> pool, DevicePool::create(po));
  const auto& ks = pool->kernels();
  KernelKind def;
  if (options.default_kernel.empty()) {
    def = std::find(ks.begin(), ks.end(), KernelKind::kPingpong) != ks.end() ? KernelKind::kPingpong
          : std::find(ks.begin(), ks.end(), KernelKind::kCublas) != ks.end() ? KernelKind::kCublas
                                                                             : ks.front();
  } else if (!parse_kernel_kind(options.default_kernel, &def) || std::find(ks.begin(), ks.end(), def) == ks.end()) {
    return InvalidArgument("default_kernel '" + options.default_kernel + "' is unknown or not available");
  }
  std::unique_ptr<NcclCommunicator> comm;
  if (pool->size() > 1) {
    SGEMM_ASSIGN_OR_RETURN(comm, NcclCommunicator::create(pool->ordinals()));
  }
  if (options.log) {
    std::string msg = "cuda engine: " + std::to_string(pool->size()) + " GPU(s)";
    for (int i = 0; i < pool->size(); ++i) msg += (i ? ", " : ": ") + std::to_string(pool->ordinal(i)) + " " + pool->info(i).name;
    msg += "; " + std::to_string(options.lanes_per_device) + " lanes each; default kernel " +
           std::string(kernel_kind_name(def)) + (comm ? "; NCCL communicator ready" : "");
    options.log(msg);
  }
  return std::unique_ptr<Engine>(new CudaEngine(options, std::move(pool), std::move(comm), def));
}

}  // namespace sgemm
