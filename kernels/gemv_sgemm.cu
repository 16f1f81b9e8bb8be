// Launchers of the GEMV-shaped SGEMM (kernels/gemv_sgemm.cuh): the only place
// its kernels are launched; each returns the launch's cudaGetLastError() as a Status.
#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>

#include "kernels/cuda_status.h"
#include "kernels/gemv_sgemm.cuh"
#include "kernels/gemv_sgemm.h"

namespace sgemm {
namespace {

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Blocks to aim for: 4 resident 256-thread blocks per SM keep enough 16-byte
// loads in flight to stream at full HBM bandwidth.
int64_t target_blocks(int sm_count) { return int64_t(std::max(sm_count, 1)) * 4; }

// 16-byte loads of B for a single-row product: B's rows 16-byte aligned and
// n % 4 == 0 (so no thread holds a partial group of 4 columns).
bool row_vectorizable(const GemmArgs& g) { return aligned16(g.b) && g.ldb % 4 == 0 && g.shape.n % 4 == 0; }

// K splits of a single-row product. Every block streams the same bytes, so the
// grid should be a whole number of blocks per SM: a grid of 576 blocks on 132 SMs
// leaves some SMs with 5 blocks and most with 4, and the last ones set the time
// (1x8192x8192 measured 87% of cuBLAS that way). Take the smallest split count
// (at most 64, each split keeping at least 64 rows of B) whose grid of at least
// 4 blocks per SM is within 5% of a multiple of the SM count; else the best one.
int row_splits(const GemmShape& s, int sm_count, bool vec, int warps) {
  const int64_t cols = vec ? 128 : 32;
  const int64_t col_blocks = (s.n + cols - 1) / cols;
  const int64_t sms = std::max(sm_count, 1);
  const int64_t target = target_blocks(sm_count) * 8 / warps;  // 4 blocks of 8 warps per SM, or 1 of 32
  if (col_blocks >= 2 * target) return 1;
  const int64_t max_splits = std::clamp<int64_t>(s.k / 64, 1, 64);
  int64_t best = 1;
  double best_eff = 0;
  for (int64_t splits = 1; splits <= max_splits; ++splits) {
    const int64_t per = (s.k + splits - 1) / splits;
    const int64_t real = (s.k + per - 1) / per;  // no empty split
    const int64_t blocks = col_blocks * real;
    const double eff = double(blocks) / double(sms * ((blocks + sms - 1) / sms));
    const bool enough = blocks >= target;
    if (enough && eff >= 0.95) return int(real);
    if ((enough ? 1.0 : 0.5) * eff > best_eff) {
      best_eff = (enough ? 1.0 : 0.5) * eff;
      best = real;
    }
  }
  return int(best);
}

int64_t row_ldw(const GemmShape& s) { return (s.n + 3) / 4 * 4; }

// The workspace rule must not depend on alignment (the caller asks before it
// knows the pointers): size for the scalar layout, which splits at least as much.
std::size_t row_workspace_bytes(const GemmShape& s, int sm_count, int warps) {
  const int splits = std::max(row_splits(s, sm_count, false, warps), row_splits(s, sm_count, true, warps));
  return splits > 1 ? std::size_t(splits) * std::size_t(row_ldw(s)) * sizeof(float) : 0;
}

template <int kWarps>
Status launch_row(const GemmArgs& g, int sm_count, void* workspace, std::size_t workspace_bytes, cudaStream_t stream) {
  const GemmShape& s = g.shape;
  const bool vec = row_vectorizable(g);
  const int splits = row_splits(s, sm_count, vec, kWarps);
  const int per = int((s.k + splits - 1) / splits);
  const int cols = vec ? 128 : 32;
  const dim3 grid{unsigned((s.n + cols - 1) / cols), unsigned(splits)};
  const int64_t ldw = row_ldw(s);
  float* w = nullptr;
  if (splits > 1) {
    const std::size_t need = std::size_t(splits) * std::size_t(ldw) * sizeof(float);
    if (workspace == nullptr || workspace_bytes < need)
      return InvalidArgument("workspace: the single-row product over " + std::to_string(splits) + " K splits needs " +
                             std::to_string(need) + " bytes, got " + std::to_string(workspace_bytes) +
                             " (ask gemv_workspace_bytes)");
    w = static_cast<float*>(workspace);
  }
  const int n = int(s.n), k = int(s.k);
  if (vec)
    gemv::gemv_row_kernel<true, kWarps>
        <<<grid, 32 * kWarps, 0, stream>>>(n, k, g.alpha, g.a, g.b, g.ldb, g.beta, g.c, per, w, ldw);
  else
    gemv::gemv_row_kernel<false, kWarps>
        <<<grid, 32 * kWarps, 0, stream>>>(n, k, g.alpha, g.a, g.b, g.ldb, g.beta, g.c, per, w, ldw);
  SGEMM_CUDA_TRY(cudaGetLastError());
  if (splits == 1) return Status::Ok();
  gemv::gemv_reduce_kernel<<<unsigned((s.n + gemv::kReduceThreads - 1) / gemv::kReduceThreads), gemv::kReduceThreads, 0,
                             stream>>>(n, splits, w, ldw, g.beta, g.c);
  return SGEMM_CUDA_STATUS(cudaGetLastError());
}

Status launch_col(const GemmArgs& g, int sm_count, cudaStream_t stream) {
  const GemmShape& s = g.shape;
  // Warps per row: 1 when there are rows enough to fill the device, more for few
  // rows, never more than k/128 (a warp's float4 sweep covers 128 of k).
  int wpr = 1;
  while (wpr < gemv::kWarps && (s.m * wpr + gemv::kWarps - 1) / gemv::kWarps < target_blocks(sm_count) &&
         s.k >= int64_t(wpr) * 256)
    wpr *= 2;
  const int64_t rows_per_block = gemv::kWarps / wpr;
  const unsigned blocks = unsigned((s.m + rows_per_block - 1) / rows_per_block);
  const bool vec = aligned16(g.a) && g.lda % 4 == 0 && aligned16(g.b) && g.ldb == 1;
  const int m = int(s.m), k = int(s.k);
  if (vec)
    gemv::gemv_col_kernel<true>
        <<<blocks, gemv::kThreads, 0, stream>>>(m, k, g.alpha, g.a, g.lda, g.b, g.ldb, g.beta, g.c, g.ldc, wpr);
  else
    gemv::gemv_col_kernel<false>
        <<<blocks, gemv::kThreads, 0, stream>>>(m, k, g.alpha, g.a, g.lda, g.b, g.ldb, g.beta, g.c, g.ldc, wpr);
  return SGEMM_CUDA_STATUS(cudaGetLastError());
}

}  // namespace

Status gemv_can_implement(const GemmArgs& g) {
  const GemmShape& s = g.shape;
  if (!one_row_or_column(s))
    return InvalidArgument("shape: the GEMV kernel needs m == 1 or n == 1, got " + std::to_string(s.m) + "x" +
                           std::to_string(s.n));
  return check_gemm_args(g);
}

std::size_t gemv_workspace_bytes(const GemmShape& s, int sm_count, GemvRowBlock block) {
  if (s.n == 1 || s.m != 1) return 0;  // the column kernel needs none
  return row_workspace_bytes(s, sm_count, block == GemvRowBlock::k32Warps ? 32 : 8);
}

Status gemv_sgemm(const GemmArgs& args, int sm_count, void* workspace, std::size_t workspace_bytes, cudaStream_t stream,
                  GemvRowBlock block) {
  SGEMM_RETURN_IF_ERROR(gemv_can_implement(args));
  if (args.shape.n == 1) return launch_col(args, sm_count, stream);
  if (block == GemvRowBlock::k32Warps) return launch_row<32>(args, sm_count, workspace, workspace_bytes, stream);
  return launch_row<8>(args, sm_count, workspace, workspace_bytes, stream);
}

}  // namespace sgemm
