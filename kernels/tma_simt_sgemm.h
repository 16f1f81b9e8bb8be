// Host API of the TMA-fed SIMT SGEMM (device code: tma_simt_sgemm.cuh; launchers:
// tma_simt_sgemm.cu, built for sm_90a). Private to kernels/: the ping-pong variant
// table (pingpong_sgemm.cu) reaches it, falling back to its own tiles where it cannot run.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string_view>

#include "common/status.h"
#include "kernels/gemm_args.h"

namespace sgemm {

// The tile configurations (tma_simt_sgemm.cu has their constants).
enum class TmaSimtTile {
  // Production (rows of the kernel registry, common/kernel_registry.h):
  k128x256T8x16,  // 8 consumer warps of 64x64 (8x16 per thread, 2 x 4 warps), 4 stages
  k192x128T8x8,   // 12 consumer warps of 64x32 (8x8 per thread, 3 x 4 warps), 5 stages
  // Picked where the 128x256 tile fills the last wave less well:
  kRings2x128x128T8x16,  // 2 consumer warp groups, each its own 128x128 tile and 3-stage ring
  // Measured alternatives (-DSGEMM_KERNEL_TUNING=ON builds only):
  k128x192T8x8,           // k192x128T8x8's warps 2 x 6
  k256x128T8x16,          // k128x256T8x16's warps 4 x 2
  k128x256T8x16W32x128,   // 8 consumer warps of 32x128 (8x16 per thread, 4 x 8 lanes), 4 x 2 warps
  k192x128T8x8W32x64,     // 12 consumer warps of 32x64 (8x8 per thread, 4 x 8 lanes), 6 x 2 warps
  k128x256T8x16U2,        // k128x256T8x16 with 8 k per loop iteration instead of an unrolled stage
  k192x128T8x8U2,         // k192x128T8x8 likewise
  k256x128T8x8W16,        // 16 consumer warps of 64x32 (8x8 per thread), 8-byte loads of A, 112 registers
  k256x128T8x8W16W32x64,  // 16 consumer warps of 32x64 (8x8 per thread, 4 x 8 lanes), likewise
};

// Pure but for the device query: whether tma_simt_sgemm() can run `args` on the current
// device: an sm_90 GPU, A and B 16-byte aligned with lda % 4 == 0 and ldb % 4 == 0 (the
// strides a tensor map can describe). Shapes and C are unrestricted.
bool tma_simt_can_run(const GemmArgs& args);

// Rows and columns of C one work unit of `tile` covers (its block tile).
struct TmaSimtTileShape {
  int bm = 0, bn = 0;
};
TmaSimtTileShape tma_simt_tile_shape(TmaSimtTile tile);

// Enqueues C = alpha*A*B + beta*C on `stream` with tile `tile` (splits == 1; no workspace),
// or, with splits > 1, the split-K partials only: split s of K (runs of
// ceil(ceil(k/32)/splits) k-blocks) stores alpha * its partial product into
// workspace[s * m * ldw ...] (ldw = n rounded up to 4, `workspace` 16-byte aligned, holding
// splits * m * ldw floats); the caller then reduces the slices into C.
// FAILED_PRECONDITION when !tma_simt_can_run(args).
Status tma_simt_sgemm(const GemmArgs& args, TmaSimtTile tile, int splits, float* workspace, cudaStream_t stream);

// The same kernel with its stages filled by cp.async from the producer warp group instead of
// TMA, whole tiles only, tiles kRings2x128x128T8x16 (every feed) and
// k192x128T8x8 (k4Byte). FAILED_PRECONDITION without an sm_90 GPU or where `feed` needs a
// layout that args lacks.
enum class CpAsyncFeed {
  k4Byte,                // A and B by 4-byte copies: any alignment and leading dimension
  k16Byte,               // 16-byte copies (.cg): A and B as TMA needs them (a measured alternative)
  kTmaA4ByteB,           // A by TMA (16-byte aligned, lda % 4 == 0), B by 4-byte copies
  k4ByteOneWarpPerRing,  // k4Byte by one producer warp per ring (a measured alternative)
};
Status tma_simt_sgemm_cp_async(const GemmArgs& args, TmaSimtTile tile, CpAsyncFeed feed, cudaStream_t stream);

// Stream-K (docs/kernels.md): whole waves of tiles, then the last
// partial wave's tiles: their first k-blocks on one persistent CTA each, their remaining
// k-blocks cut evenly over the other CTAs; the pieces meet through `workspace` in a fixed order
// (bitwise reproducible run to run). Whole tiles when that wave is more than 60% full (measured
// slower there). Bytes of workspace it needs on a device with `sm_count` SMs (0 when whole
// tiles run).
std::size_t tma_simt_stream_k_workspace_bytes(const GemmShape& shape, TmaSimtTile tile, int sm_count);
// Enqueues C = alpha*A*B + beta*C with stream-K on the current device; INVALID_ARGUMENT when
// `workspace` (16-byte aligned) is smaller than tma_simt_stream_k_workspace_bytes() asks for.
Status tma_simt_sgemm_stream_k(const GemmArgs& args, TmaSimtTile tile, void* workspace, std::size_t workspace_bytes,
                               cudaStream_t stream);

}  // namespace sgemm
