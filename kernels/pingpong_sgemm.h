// Host API of the ping-pong SGEMM kernel (device code: pingpong_sgemm.cuh,
// launchers: pingpong_sgemm.cu). Plain functions; no state beyond a per-device
// "shared-memory limit raised" flag per kernel instantiation.
//
// The kernel comes in several tile configurations ("variants"); pingpong_sgemm()
// picks one per class of shape (see pingpong_pick_variant), and benchmarks may
// run any variant by index to measure them against each other.
#pragma once

#include <cuda_runtime_api.h>

#include <string_view>

#include "common/status.h"
#include "kernels/gemm_args.h"

namespace sgemm {

// Pure: OK when the ping-pong kernel can run `args` (any M, N, K >= 1 up to 2^31-1,
// lda >= k, ldb >= n, ldc >= n, non-null pointers; alignment only changes the
// variant). INVALID_ARGUMENT naming the offending field otherwise.
Status pingpong_can_implement(const GemmArgs& args);

// Enqueues C = alpha*A*B + beta*C on `stream` with the variant chosen for the shape.
Status pingpong_sgemm(const GemmArgs& args, cudaStream_t stream);

// Tile-configuration variants, for tuning and benchmarks.
int pingpong_variant_count();
std::string_view pingpong_variant_name(int variant);
// The variant pingpong_sgemm() uses for `shape` on a device with `sm_count` SMs.
int pingpong_pick_variant(const GemmShape& shape, int sm_count);
// Enqueues the product with one given variant (0 <= variant < pingpong_variant_count()).
Status pingpong_sgemm_variant(const GemmArgs& args, int variant, cudaStream_t stream);

}  // namespace sgemm
