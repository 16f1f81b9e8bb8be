// Row split (and, through issue_row_pipeline, single GPU). B enters by K
// pieces (halves over several devices), each through every device's host
// link, a slice each, and completed on every device by one NCCL broadcast
// per slice. The first half of each device's rows accumulates over the
// pieces as they arrive (A's matching columns come in beside them), so
// kernels start after one piece of B rather than all of it. The other rows then stream in by row
// blocks over all of B, one kernel per block, block i of every device before
// block i+1 of any, so the devices start together and a cancelled job stops
// on all of them.
#include <algorithm>

#include "server/engine/cuda/executor_steps.h"
#include "server/engine/cuda/job_run.h"
#include "server/engine/cuda/split_executor.h"

namespace sgemm {
namespace {

// Pieces B comes in by: two halves of K where several devices share it and K
// is long enough for a kernel over half of it to run at the GPU's rate (over
// sixteenths the kernels ran ~30% slower), else one. On one device halves
// cost more than they hide: its copies overlap best as whole row blocks
// (4 H200, 2026-11-27_h200x4_rows-pipeline: 4 GPUs 16384^3 26.7 -> 25.4 ms,
// 4096^3 1.59 -> 1.34 ms; one GPU 4096^3 3.08 -> 3.54 ms).
int64_t b_pieces(int64_t k, int devices) { return devices > 1 && k >= 4096 ? 2 : 1; }

// The first rows of w's shard, computed piece by piece while B arrives: half
// of them in whole 128-row tiles, where the shard has two blocks or more (the
// kernels over the pieces then cover B's arrival); none otherwise.
int64_t early_rows(const JobRun& run, const ShardWork& w) {
  const int64_t rows = w.shard.row_end - w.shard.row_begin;
  if (rows <= run.row_block(rows)) return 0;
  return std::min(rows, round_up(ceil_div(rows, 2), 128));
}

}  // namespace

Status issue_row_pipeline(JobRun& run) {
  const GemmJob& job = run.job();
  const GemmShape& s = run.shape();
  auto& works = run.works();
  const int64_t lda = pad4(s.k), ldb = pad4(s.n), ldc = ldb;
  const int64_t hldc = job.c_ld();  // the host C's stride (A's and B's: ShardWork::a_src_ld, b_src_ld)
  // Operands stored transposed (op = t) are copied by their stored blocks and
  // transposed on the device (JobRun::h2d_op): the device layout, and so every
  // kernel and the broadcast below, is the same as for op = n.
  const Op op_a = job.request.op_a, op_b = job.request.op_b;
  const int p = int(works.size());
  const bool has_c = job.request.has_c;
  // A resident B on every device (docs/resident.md) is read where it is: no
  // copy in, no broadcast.
  const bool b_resident = std::all_of(works.begin(), works.end(), [](const ShardWork& w) { return w.b_resident; });
  for (auto& w : works) {
    const int dev = w.lane->device();
    const int64_t rows = w.shard.row_end - w.shard.row_begin;
    if (!b_resident) {
      SGEMM_ASSIGN_OR_RETURN(w.b, DeviceBuffer::allocate(dev, size_t(s.k * ldb) * kFloatBytes, w.lane->h2d()));
    }
    if (rows > 0) {
      SGEMM_ASSIGN_OR_RETURN(w.a, DeviceBuffer::allocate(dev, size_t(rows * lda) * kFloatBytes, w.lane->h2d()));
      SGEMM_ASSIGN_OR_RETURN(w.c, DeviceBuffer::allocate(dev, size_t(rows * ldc) * kFloatBytes, w.lane->h2d()));
    }
  }
  // B in K pieces; each piece in p slices, slice j over device j's host link,
  // then completed on every device by one broadcast per slice (one NCCL
  // group); ready[i][j]: piece i is on device j.
  const int64_t piece = b_piece_k(s.k, b_resident ? 1 : b_pieces(s.k, p));
  const int64_t pieces = ceil_div(s.k, piece);  // none empty
  std::vector<std::vector<cudaEvent_t>> ready(size_t(b_resident ? 0 : pieces), std::vector<cudaEvent_t>(size_t(p)));
  // The first rows of each device (early_rows) accumulate over the pieces as
  // they arrive, so the kernels start after one piece instead of all of B.
  std::vector<int64_t> early(size_t(p), 0);
  for (int j = 0; j < p; ++j) early[size_t(j)] = pieces > 1 ? early_rows(run, works[size_t(j)]) : 0;
  const float beta = has_c ? job.request.beta : 0.0f;
  Communicator* comm = run.comm();
  if (p > 1 && !b_resident && (!comm || comm->size() != p))
    return Internal("row split without a communicator over its devices");
  for (int64_t i = 0; i < pieces && !b_resident; ++i) {
    const int64_t k0 = i * piece, k1 = std::min(s.k, k0 + piece);
    SGEMM_RETURN_IF_ERROR(run.check_cancel());
    std::vector<int64_t> kb = split_range(k1 - k0, std::vector<double>(size_t(p), 1.0), 16);
    for (int64_t& v : kb) v += k0;
    std::vector<cudaEvent_t>& up = ready[size_t(i)];
    for (int j = 0; j < p; ++j) {
      ShardWork& w = works[size_t(j)];
      const int64_t r0 = kb[size_t(j)], r1 = kb[size_t(j) + 1];
      SGEMM_RETURN_IF_ERROR(run.feed_wait(MatrixId::kB, run.b_prefix(r1)));
      SGEMM_RETURN_IF_ERROR(run.timed(
          w, w.in, w.lane->h2d(),
          [&] {
            return run.h2d_op(w, op_b, w.b.floats() + r0 * ldb, ldb, w.b_src(job), w.b_src_ld(job), r0, r1, 0, s.n);
          },
          &up[size_t(j)], Step{.bytes = (r1 - r0) * s.n * int64_t(kFloatBytes), .k_begin = r0, .k_end = r1}));
    }
    if (p > 1) {
      std::vector<Span> spans;
      SGEMM_RETURN_IF_ERROR(run.begin_comm_spans(&spans, &up));
      {
        NcclGroup group;
        SGEMM_RETURN_IF_ERROR(group.start_status());
        for (int root = 0; root < p; ++root) {
          const int64_t r0 = kb[size_t(root)], r1 = kb[size_t(root) + 1];
          if (r1 <= r0) continue;
          for (int j = 0; j < p; ++j) {
            ShardWork& w = works[size_t(j)];
            float* slice = w.b.floats() + r0 * ldb;
            SGEMM_NCCL_TRY(ncclBroadcast(slice, slice, size_t((r1 - r0) * ldb), ncclFloat, root, comm->comm(w.rank),
                                         w.lane->comm()));
          }
        }
        SGEMM_RETURN_IF_ERROR(group.end());
      }
      // Each device receives the slices it did not copy in.
      std::vector<int64_t> received;
      received.reserve(std::size_t(p));
      for (int j = 0; j < p; ++j)
        received.push_back(((k1 - k0) - (kb[size_t(j) + 1] - kb[size_t(j)])) * s.n * int64_t(kFloatBytes));
      SGEMM_RETURN_IF_ERROR(run.end_comm_spans(spans, received));
      for (int j = 0; j < p; ++j) up[size_t(j)] = spans[size_t(j)].end;
    }
    // The early rows' share of this piece: A's columns [k0, k1) (and, with
    // the first piece, their rows of C), then a kernel over the piece.
    for (int j = 0; j < p; ++j) {
      ShardWork& w = works[size_t(j)];
      const int64_t r0 = w.shard.row_begin, e1 = r0 + early[size_t(j)];
      if (e1 == r0) continue;
      SGEMM_RETURN_IF_ERROR(run.feed_wait(MatrixId::kA, run.a_prefix(e1)));
      if (has_c && i == 0) SGEMM_RETURN_IF_ERROR(run.feed_wait(MatrixId::kC, e1 * s.n));
      cudaEvent_t in_done = nullptr, k_done = nullptr;
      SGEMM_RETURN_IF_ERROR(run.timed(
          w, w.in, w.lane->h2d(),
          [&]() -> Status {
            SGEMM_RETURN_IF_ERROR(
                run.h2d_op(w, op_a, w.a.floats() + k0, lda, w.a_src(job), w.a_src_ld(job), r0, e1, k0, k1));
            if (has_c && i == 0)
              SGEMM_RETURN_IF_ERROR(run.h2d_2d(w, w.c.floats(), ldc, job.c + r0 * hldc, hldc, s.n, e1 - r0));
            return Status::Ok();
          },
          &in_done,
          Step{.bytes = (e1 - r0) * ((k1 - k0) + (has_c && i == 0 ? s.n : 0)) * int64_t(kFloatBytes),
               .row_begin = r0,
               .row_end = e1,
               .k_begin = k0,
               .k_end = k1}));
      SGEMM_RETURN_IF_ERROR(run.wait_on(w, w.lane->compute(), in_done));
      SGEMM_RETURN_IF_ERROR(run.wait_on(w, w.lane->compute(), ready[size_t(i)][size_t(j)]));
      // C = alpha * A B + beta * C over the first piece, then + alpha * A B per piece.
      GemmArgs args{GemmShape{e1 - r0, s.n, k1 - k0},
                    job.request.alpha,
                    i == 0 ? beta : 1.0f,
                    w.a.floats() + k0,
                    lda,
                    w.b_rows(k0, ldb),
                    ldb,
                    w.c.floats(),
                    ldc};
      // The other rows' blocks read this piece too: the kernel prepares it once.
      if (w.shard.row_end > e1) SGEMM_RETURN_IF_ERROR(run.prepare_b(w, args));
      SGEMM_RETURN_IF_ERROR(run.timed(
          w, w.kernel, w.lane->compute(), [&] { return run.run_gemm(w, args); }, &k_done,
          Step{.row_begin = r0, .row_end = e1, .k_begin = k0, .k_end = k1}));
      if (i == pieces - 1) SGEMM_RETURN_IF_ERROR(run.copy_out(w, w.c.floats(), r0, ldc, r0, e1, k_done));
      SGEMM_RETURN_IF_ERROR(run.throttle(w, k_done));
    }
  }
  // The other rows read all of B: the last piece on a device means all of it
  // (each device's pieces arrive in order on one stream).
  for (int j = 0; j < p && !b_resident; ++j) {
    ShardWork& w = works[size_t(j)];
    SGEMM_RETURN_IF_ERROR(run.wait_on(w, w.lane->compute(), ready.back()[size_t(j)]));
  }
  // A (and C) by row blocks after the early rows.
  return issue_row_blocks(run, BlockInputs::kFromHost, early, pieces);
}

namespace {

Status issue(JobRun& run) {
  if (run.works().size() < 2) return Internal("row split given fewer than two shards");
  return issue_row_pipeline(run);
}

}  // namespace

const SplitExecutor kRowsExecutor{SplitMode::kRows, /*spans_pool=*/true, issue};

}  // namespace sgemm
