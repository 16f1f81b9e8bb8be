// K split. Device i gets columns [k0, k1) of A (strided on the host: 2-D
// copies) and rows [k0, k1) of B, by K blocks, and accumulates its partial C
// over them. Shard 0 alone starts from C (so beta*C is added exactly once);
// the others start from zero. The partial Cs are summed by reduce-scatter
// (each device then copies out its own block of rows) or reduce to device 0.
#include <algorithm>

#include "server/engine/cuda/executor_steps.h"
#include "server/engine/cuda/job_run.h"
#include "server/engine/cuda/split_executor.h"

namespace sgemm {
namespace {

Status issue(JobRun& run) {
  const GemmJob& job = run.job();
  const GemmShape& s = run.shape();
  auto& works = run.works();
  const int p = int(works.size());
  Communicator* comm = run.comm();
  if (p < 2 || !comm || comm->size() != p) return Internal("K split without a communicator over its devices");
  const bool scatter = run.settings().k_reduce == KReduce::kReduceScatter;
  const int64_t m_pad = scatter ? round_up(s.m, p) : s.m;
  const int64_t ldb = pad4(s.n), ldc = ldb;
  const bool has_c = job.request.has_c;
  SGEMM_RETURN_IF_ERROR(run.feed_wait(MatrixId::kA, s.m * s.k));  // a column slice needs every row
  if (has_c) SGEMM_RETURN_IF_ERROR(run.feed_wait(MatrixId::kC, s.m * s.n));
  for (auto& w : works) {
    const int dev = w.lane->device();
    const int64_t kc = w.shard.k_end - w.shard.k_begin;
    const int64_t lda = pad4(kc);
    const bool owns_c = w.rank == 0 && has_c;
    SGEMM_ASSIGN_OR_RETURN(w.c, DeviceBuffer::allocate(dev, size_t(m_pad * ldc) * kFloatBytes, w.lane->h2d()));
    if (kc > 0) {
      SGEMM_ASSIGN_OR_RETURN(w.a, DeviceBuffer::allocate(dev, size_t(s.m * lda) * kFloatBytes, w.lane->h2d()));
      if (!w.b_resident) {  // a resident B's K slice is read where it is (docs/resident.md)
        SGEMM_ASSIGN_OR_RETURN(w.b, DeviceBuffer::allocate(dev, size_t(kc * ldb) * kFloatBytes, w.lane->h2d()));
      }
    }
    SGEMM_RETURN_IF_ERROR(partial_c_in(run, w, [&]() -> Status {
      if (owns_c) SGEMM_RETURN_IF_ERROR(run.h2d_2d(w, w.c.floats(), ldc, job.c, job.c_ld(), s.n, s.m));
      const int64_t zero_from = (kc > 0 || owns_c) ? s.m : 0;  // padding rows, or all when no kernel runs
      if (m_pad > zero_from)
        SGEMM_CUDA_TRY(cudaMemsetAsync(w.c.floats() + zero_from * ldc, 0,
                                       size_t((m_pad - zero_from) * ldc) * kFloatBytes, w.lane->h2d()));
      return Status::Ok();
    }));
  }
  // K blocks, block i on every device before block i+1 on any; then each
  // device's comm stream waits for its kernels and h2d work.
  SGEMM_RETURN_IF_ERROR(issue_k_blocks(run, BlockInputs::kFromHost));
  SGEMM_RETURN_IF_ERROR(run.check_cancel());
  std::vector<Span> spans;
  SGEMM_RETURN_IF_ERROR(run.begin_comm_spans(&spans));
  const int64_t block_rows = m_pad / p;
  {
    NcclGroup group;
    SGEMM_RETURN_IF_ERROR(group.start_status());
    for (auto& w : works) {
      float* part = w.c.floats();
      if (scatter) {
        const size_t count = size_t(block_rows * ldc);
        SGEMM_NCCL_TRY(ncclReduceScatter(part, part + size_t(w.rank) * count, count, ncclFloat, ncclSum,
                                         comm->comm(w.rank), w.lane->comm()));
      } else {
        SGEMM_NCCL_TRY(
            ncclReduce(part, part, size_t(s.m * ldc), ncclFloat, ncclSum, 0, comm->comm(w.rank), w.lane->comm()));
      }
    }
    SGEMM_RETURN_IF_ERROR(group.end());
  }
  // What each device receives of its peers' partial Cs (its block, or all of C at the root).
  std::vector<int64_t> received;
  received.reserve(works.size());
  for (auto& w : works)
    received.push_back((scatter ? block_rows : (w.rank == 0 ? s.m : 0)) * s.n * (p - 1) * int64_t(kFloatBytes));
  SGEMM_RETURN_IF_ERROR(run.end_comm_spans(spans, received));
  if (scatter) {
    for (int r = 0; r < p; ++r) {
      ShardWork& w = works[size_t(r)];
      const int64_t b0 = std::min(s.m, w.rank * block_rows), b1 = std::min(s.m, b0 + block_rows);
      if (b1 > b0) SGEMM_RETURN_IF_ERROR(run.copy_out(w, w.c.floats(), 0, ldc, b0, b1, spans[size_t(r)].end));
    }
  } else {
    ShardWork& root = works[0];
    const int64_t step = run.row_block(s.m);
    for (int64_t c0 = 0; c0 < s.m; c0 += step)
      SGEMM_RETURN_IF_ERROR(run.copy_out(root, root.c.floats(), 0, ldc, c0, std::min(s.m, c0 + step), spans[0].end));
  }
  return Status::Ok();
}

}  // namespace

const SplitExecutor kKExecutor{SplitMode::kK, /*spans_pool=*/true, issue};

}  // namespace sgemm
