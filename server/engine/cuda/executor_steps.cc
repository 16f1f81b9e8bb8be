#include "server/engine/cuda/executor_steps.h"

#include <algorithm>
#include <string>

#include "kernels/cuda_status.h"
#include "server/comm/nccl_comm.h"
#include "server/planner/plan.h"

namespace sgemm {
namespace {

// K per block of a K slice of `kc` (server/planner/plan.h): 1/pipeline_chunks
// of the slice, at least 2048. When C is small (m*n <= 4 Mi elements) each
// block's product is too small to fill the GPU and A's strided 2-D copy moves
// short rows, so blocks are at least 16384 deep there (2xH200 sweep at
// 1024x1024x65536, docs/engine.md: kernel plus reduce 1.49x with 4096-deep
// blocks, 1.92x with 16384).
int64_t k_block(const JobRun& run, int64_t kc) {
  const JobSettings& set = run.settings();
  return pipeline_k_block(run.shape(), kc, set.chunk_k, set.pipeline_chunks);
}

}  // namespace

Status issue_row_blocks(JobRun& run, BlockInputs inputs, const std::vector<int64_t>& skip, int64_t b_pieces) {
  const GemmJob& job = run.job();
  const GemmShape& s = run.shape();
  auto& works = run.works();
  const int p = int(works.size());
  const int64_t lda = pad4(s.k), ldb = pad4(s.n), ldc = ldb;
  const int64_t hldc = job.c_ld();  // the host C's stride (A's: ShardWork::a_src_ld)
  const bool has_c = job.request.has_c;
  const bool from_host = inputs == BlockInputs::kFromHost;
  const float beta = has_c ? job.request.beta : 0.0f;
  const int64_t piece = b_piece_k(s.k, b_pieces);
  // Each device's blocks (pipeline_row_bounds: with C copied out, a large
  // last block is split so that the copy no kernel hides is short).
  std::vector<std::vector<int64_t>> bounds;
  bounds.reserve(size_t(p));
  for (int j = 0; j < p; ++j) {
    const Shard& sh = works[size_t(j)].shard;
    bounds.push_back(pipeline_row_bounds(sh.row_begin + skip[size_t(j)], sh.row_end,
                                         run.row_block(sh.row_end - sh.row_begin), from_host ? s.n : 0));
  }
  // Every block of a device reads all of B: where the kernel transforms B
  // first (fp32x3 splits it into tf32 planes, about 1 ms a block at 16384^2),
  // that is done once per device with two blocks or more, not once per block
  // (B in pieces: the caller prepares each piece).
  for (int j = 0; j < p && b_pieces == 1; ++j) {
    ShardWork& w = works[size_t(j)];
    const std::vector<int64_t>& b = bounds[size_t(j)];
    if (b.size() <= 2) continue;
    SGEMM_RETURN_IF_ERROR(run.prepare_b(w, GemmArgs{GemmShape{b[1] - b[0], s.n, s.k}, job.request.alpha, beta,
                                                    w.a.floats(), lda, w.b_rows(0, ldb), ldb, w.c.floats(), ldc}));
  }
  // Copy in, kernels, copy out, each on its stream; block i on every device,
  // then block i+1.
  for (size_t i = 0;; ++i) {
    bool issued = false;
    for (int j = 0; j < p; ++j) {
      ShardWork& w = works[size_t(j)];
      const int64_t r0 = w.shard.row_begin;
      if (i + 1 >= bounds[size_t(j)].size()) continue;
      issued = true;
      const int64_t c0 = bounds[size_t(j)][i], c1 = bounds[size_t(j)][i + 1];
      SGEMM_RETURN_IF_ERROR(run.check_cancel());
      float* da = w.a.floats() + (c0 - r0) * lda;
      float* dc = w.c.floats() + (c0 - r0) * ldc;
      if (from_host) {
        SGEMM_RETURN_IF_ERROR(run.feed_wait(MatrixId::kA, run.a_prefix(c1)));
        if (has_c) SGEMM_RETURN_IF_ERROR(run.feed_wait(MatrixId::kC, c1 * s.n));
        cudaEvent_t in_done = nullptr;
        SGEMM_RETURN_IF_ERROR(run.timed(
            w, w.in, w.lane->h2d(),
            [&]() -> Status {
              SGEMM_RETURN_IF_ERROR(
                  run.h2d_op(w, job.request.op_a, da, lda, w.a_src(job), w.a_src_ld(job), c0, c1, 0, s.k));
              if (has_c) SGEMM_RETURN_IF_ERROR(run.h2d_2d(w, dc, ldc, job.c + c0 * hldc, hldc, s.n, c1 - c0));
              return Status::Ok();
            },
            &in_done,
            Step{.bytes = (c1 - c0) * (s.k + (has_c ? s.n : 0)) * int64_t(kFloatBytes),
                 .row_begin = c0,
                 .row_end = c1,
                 .k_begin = 0,
                 .k_end = s.k}));
        SGEMM_RETURN_IF_ERROR(run.wait_on(w, w.lane->compute(), in_done));
      }
      // One kernel per piece of B, each reading that piece as prepared.
      cudaEvent_t k_done = nullptr;
      for (int64_t q = 0; q < b_pieces; ++q) {
        const int64_t k0 = q * piece, k1 = std::min(s.k, k0 + piece);
        if (k1 <= k0) break;
        GemmArgs args{GemmShape{c1 - c0, s.n, k1 - k0},
                      job.request.alpha,
                      q == 0 ? beta : 1.0f,
                      da + k0,
                      lda,
                      w.b_rows(k0, ldb),
                      ldb,
                      dc,
                      ldc};
        SGEMM_RETURN_IF_ERROR(run.timed(
            w, w.kernel, w.lane->compute(), [&] { return run.run_gemm(w, args); }, &k_done,
            Step{.row_begin = c0, .row_end = c1, .k_begin = k0, .k_end = k1}));
      }
      if (from_host) SGEMM_RETURN_IF_ERROR(run.copy_out(w, w.c.floats(), r0, ldc, c0, c1, k_done));
      SGEMM_RETURN_IF_ERROR(run.throttle(w, k_done));
    }
    if (!issued) break;
  }
  return Status::Ok();
}

Status issue_k_blocks(JobRun& run, BlockInputs inputs) {
  const GemmJob& job = run.job();
  const GemmShape& s = run.shape();
  const int64_t ldb = pad4(s.n), ldc = ldb;
  const bool has_c = job.request.has_c;
  const bool from_host = inputs == BlockInputs::kFromHost;
  for (int64_t i = 0;; ++i) {
    bool issued = false;
    for (auto& w : run.works()) {
      const int64_t k0 = w.shard.k_begin, k1 = w.shard.k_end, kc = k1 - k0;
      const int64_t step = k_block(run, kc);
      const int64_t s0 = k0 + i * step;
      if (s0 >= k1) continue;
      issued = true;
      const int64_t s1 = std::min(k1, s0 + step);
      const int64_t lda = pad4(kc);
      const bool owns_c = w.rank == 0 && has_c;
      SGEMM_RETURN_IF_ERROR(run.check_cancel());
      float* da = w.a.floats() + (s0 - k0);
      const float* db = w.b_resident ? w.b_rows(s0, ldb) : w.b.floats() + (s0 - k0) * ldb;
      if (from_host) {
        SGEMM_RETURN_IF_ERROR(run.feed_wait(MatrixId::kB, run.b_prefix(s1)));
        cudaEvent_t in_done = nullptr;
        SGEMM_RETURN_IF_ERROR(run.timed(
            w, w.in, w.lane->h2d(),
            [&]() -> Status {
              // Columns [s0, s1) of op(A) and rows [s0, s1) of op(B): stored
              // blocks, transposed on the device under op = t (JobRun::h2d_op).
              SGEMM_RETURN_IF_ERROR(
                  run.h2d_op(w, job.request.op_a, da, lda, w.a_src(job), w.a_src_ld(job), 0, s.m, s0, s1));
              if (w.b_resident) return Status::Ok();
              return run.h2d_op(w, job.request.op_b, w.b.floats() + (s0 - k0) * ldb, ldb, w.b_src(job), w.b_src_ld(job),
                                s0, s1, 0, s.n);
            },
            &in_done,
            Step{.bytes = (s1 - s0) * (s.m + (w.b_resident ? 0 : s.n)) * int64_t(kFloatBytes),
                 .row_begin = 0,
                 .row_end = s.m,
                 .k_begin = s0,
                 .k_end = s1}));
        SGEMM_RETURN_IF_ERROR(run.wait_on(w, w.lane->compute(), in_done));
      }
      const float beta = i == 0 ? (owns_c ? job.request.beta : 0.0f) : 1.0f;
      cudaEvent_t k_done = nullptr;
      GemmArgs args{GemmShape{s.m, s.n, s1 - s0}, job.request.alpha, beta, da, lda, db, ldb, w.c.floats(), ldc};
      SGEMM_RETURN_IF_ERROR(run.timed(
          w, w.kernel, w.lane->compute(), [&] { return run.run_gemm(w, args); }, &k_done,
          Step{.row_begin = 0, .row_end = s.m, .k_begin = s0, .k_end = s1}));
      SGEMM_RETURN_IF_ERROR(run.throttle(w, k_done));
    }
    if (!issued) break;
  }
  // The sum starts after each device's kernels and its h2d work (which is all
  // there is when its slice is empty).
  for (auto& w : run.works()) {
    SGEMM_RETURN_IF_ERROR(run.order_after(w, w.lane->comm(), w.lane->h2d()));
    SGEMM_RETURN_IF_ERROR(run.order_after(w, w.lane->comm(), w.lane->compute()));
  }
  return Status::Ok();
}

Status partial_c_in(JobRun& run, ShardWork& w, const std::function<Status()>& enqueue) {
  const GemmShape& s = run.shape();
  const bool owns_c = w.rank == 0 && run.job().request.has_c;
  return run.timed(w, w.in, w.lane->h2d(), enqueue, nullptr,
                   Step{.bytes = owns_c ? s.m * s.n * int64_t(kFloatBytes) : 0,
                        .row_begin = 0,
                        .row_end = s.m,
                        .k_begin = w.shard.k_begin,
                        .k_end = w.shard.k_end});
}

StatusOr<ClusterRanks> cluster_ranks(JobRun& run, const char* split) {
  const Communicator* comm = run.comm();
  const std::vector<Shard>& shards = run.rank_shards();
  if (!comm || run.works().empty() || int(shards.size()) != comm->size() ||
      int(run.works().size()) != comm->local_size())
    return Internal(std::string(split) + " without a shard for every rank");
  ClusterRanks ranks;
  ranks.shards = &shards;
  ranks.nlocal = comm->local_size();
  ranks.nranks = comm->size();
  ranks.root = comm->first_rank() == 0;
  const GemmJob& job = run.job();
  if (ranks.root && (!job.a || !job.b || !job.c)) return Internal("rank 0 without the request's matrices");
  return ranks;
}

Status cluster_group(JobRun& run, std::vector<Span>* spans, const std::vector<int64_t>& received,
                     const RankCalls& calls) {
  SGEMM_RETURN_IF_ERROR(run.begin_comm_spans(spans));
  {
    NcclGroup group;
    SGEMM_RETURN_IF_ERROR(group.start_status());
    for (auto& w : run.works()) SGEMM_RETURN_IF_ERROR(calls(w, run.comm()->comm(w.rank), w.lane->comm()));
    SGEMM_RETURN_IF_ERROR(run.end_group(group));
  }
  return run.end_comm_spans(*spans, received);
}

}  // namespace sgemm
