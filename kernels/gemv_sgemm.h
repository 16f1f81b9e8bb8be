// Host API of the GEMV-shaped SGEMM (device code: gemv_sgemm.cuh, launchers:
// gemv_sgemm.cu): C = alpha*A*B + beta*C when C is one row (m == 1) or one
// column (n == 1), a memory-bound product that a tiled GEMM wastes most of its
// tile on. Plain functions, no state; the caller owns the scratch memory
// (gemv_workspace_bytes), as for the ping-pong kernel. The ping-pong backend
// runs these through its variant table (pingpong_sgemm.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "common/status.h"
#include "kernels/gemm_args.h"

namespace sgemm {

// Pure: OK when the GEMV kernels can run `args`: m == 1 or n == 1, every size in
// [1, 2^31), lda >= k, ldb >= n, ldc >= n, non-null pointers, any alignment.
// INVALID_ARGUMENT naming the offending field otherwise.
Status gemv_can_implement(const GemmArgs& args);

// Block size of the single-row kernel: 8 warps per block splitting K 8 ways
// inside the block (more K splits across blocks), or 32 (fewer, smaller slices).
enum class GemvRowBlock { k8Warps, k32Warps };

// Device bytes of scratch gemv_sgemm() needs for `shape` on a device with
// `sm_count` SMs (the K-split slices of a single-row product; 0 otherwise).
std::size_t gemv_workspace_bytes(const GemmShape& shape, int sm_count, GemvRowBlock block = GemvRowBlock::k8Warps);

// Enqueues the product on `stream`. `workspace` (device memory, stream-ordered
// with `stream`) must hold gemv_workspace_bytes(args.shape, sm_count, block) bytes.
Status gemv_sgemm(const GemmArgs& args, int sm_count, void* workspace, std::size_t workspace_bytes, cudaStream_t stream,
                  GemvRowBlock block = GemvRowBlock::k8Warps);

}  // namespace sgemm
