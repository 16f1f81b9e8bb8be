// Single GPU: the row pipeline on one lane (no broadcast: B comes in whole),
// or, for a job the pipeline would run as one block, that block on the lane's
// compute stream alone.
//
// One block overlaps nothing: its copies in, its kernel and its copy out
// depend on each other in turn. On one stream they need no cross-stream waits
// (the row pipeline makes 3), one device allocation and free instead of three
// of each, and 6 events recorded instead of 9 (the origin and both ends of 4
// spans: B in, A and C in, kernel, copy out). The kernel's span has its own
// start: the time the device waits for the host to launch it is not kernel
// time. The copy out, enqueued while the kernel runs, starts at the kernel's
// end event. Every span is still timed on the device.
#include <algorithm>

#include "server/engine/cuda/job_run.h"
#include "server/engine/cuda/split_executor.h"

namespace sgemm {
namespace {

// Floats between the operands carved from the one allocation: 256 bytes, the
// alignment of a separate allocation, so a kernel sees each operand as it
// would see its own buffer.
constexpr int64_t kCarveAlign = 64;

// Whether `run` is one row block the compute stream can take whole: its
// operands are present (no streaming input to wait for block by block) and
// untransposed (a transposed operand goes through the h2d stream's stage).
bool one_block(JobRun& run) {
  const GemmJob& job = run.job();
  const ShardWork& w = run.works().front();
  const int64_t rows = w.shard.row_end - w.shard.row_begin;
  return rows > 0 && rows <= run.row_block(rows) && !job.feed && job.request.op_a == Op::kN &&
         job.request.op_b == Op::kN;
}

Status issue_one_block(JobRun& run) {
  const GemmJob& job = run.job();
  const GemmShape& s = run.shape();
  ShardWork& w = run.works().front();
  const cudaStream_t stream = w.lane->compute();
  const int64_t r0 = w.shard.row_begin, r1 = w.shard.row_end, rows = r1 - r0;
  const int64_t lda = pad4(s.k), ldb = pad4(s.n), ldc = ldb;
  const int64_t hldc = job.c_ld();
  const bool has_c = job.request.has_c;
  const bool copy_b = !w.b_resident;  // a resident B is read where it is
  const int64_t a_floats = round_up(rows * lda, kCarveAlign);
  const int64_t b_floats = copy_b ? round_up(s.k * ldb, kCarveAlign) : 0;
  const int64_t c_floats = rows * ldc;
  SGEMM_RETURN_IF_ERROR(run.check_cancel());
  SGEMM_ASSIGN_OR_RETURN(
      w.a, DeviceBuffer::allocate(w.lane->device(), size_t(a_floats + b_floats + c_floats) * kFloatBytes, stream));
  float* const da = w.a.floats();
  float* const db = copy_b ? da + a_floats : nullptr;
  float* const dc = da + a_floats + b_floats;
  const float* const b = copy_b ? db : w.b_rows(0, ldb);
  cudaEvent_t k_done = nullptr;
  SGEMM_RETURN_IF_ERROR(run.timed(
      w, w.in, stream,
      [&]() -> Status {
        if (copy_b) SGEMM_RETURN_IF_ERROR(run.h2d_2d(w, db, ldb, w.b_src(job), w.b_src_ld(job), s.n, s.k, stream));
        SGEMM_RETURN_IF_ERROR(
            run.h2d_2d(w, da, lda, w.a_src(job) + r0 * w.a_src_ld(job), w.a_src_ld(job), s.k, rows, stream));
        if (has_c) SGEMM_RETURN_IF_ERROR(run.h2d_2d(w, dc, ldc, job.c + r0 * hldc, hldc, s.n, rows, stream));
        return Status::Ok();
      },
      nullptr,
      Step{.bytes = (rows * (s.k + (has_c ? s.n : 0)) + (copy_b ? s.k * s.n : 0)) * int64_t(kFloatBytes),
           .row_begin = r0,
           .row_end = r1,
           .k_begin = 0,
           .k_end = s.k}));
  const GemmArgs args{
      GemmShape{rows, s.n, s.k}, job.request.alpha, has_c ? job.request.beta : 0.0f, da, lda, b, ldb, dc, ldc};
  SGEMM_RETURN_IF_ERROR(run.timed(
      w, w.kernel, stream, [&] { return run.run_gemm(w, args); }, &k_done,
      Step{.row_begin = r0, .row_end = r1, .k_begin = 0, .k_end = s.k}));
  return run.copy_out(w, dc, r0, ldc, r0, r1, k_done, stream);
}

Status issue(JobRun& run) {
  if (run.works().size() != 1)
    return Internal("single-GPU executor given " + std::to_string(run.works().size()) + " shards");
  return one_block(run) ? issue_one_block(run) : issue_row_pipeline(run);
}

}  // namespace

const SplitExecutor kSingleExecutor{SplitMode::kSingle, /*spans_pool=*/false, issue};

}  // namespace sgemm
