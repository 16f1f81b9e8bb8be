// Host API of the ping-pong SGEMM kernel (device code: pingpong_sgemm.cuh,
// launchers: pingpong_sgemm.cu). Plain functions; no state beyond a per-device
// "shared-memory limit raised" flag per kernel instantiation. Scratch memory
// belongs to the caller (CUTLASS's get_workspace_size / initialize): ask
// pingpong_workspace_bytes(args) and pass that many bytes of device memory.
//
// The kernel comes in tile configurations ("variants"); each production variant
// is a row of the kernel registry (common/kernel_registry.h), whose one choice
// (select_kernel_row_of) pingpong_sgemm() asks. -DSGEMM_KERNEL_TUNING=ON adds
// the measured alternatives (docs/kernels.md) for benchmarks to run by index.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string_view>

#include "common/status.h"
#include "kernels/gemm_args.h"

namespace sgemm {

// Pure: OK when the ping-pong kernel can run `args` (any M, N, K >= 1 up to 2^31-1,
// lda >= k, ldb >= n, ldc >= n, non-null pointers; alignment only changes the
// variant). INVALID_ARGUMENT naming the offending field otherwise.
Status pingpong_can_implement(const GemmArgs& args);

// Device bytes of scratch pingpong_sgemm() needs for `args` on the current
// device (deterministic split-K slices); 0 for most shapes.
std::size_t pingpong_workspace_bytes(const GemmArgs& args);

// Enqueues C = alpha*A*B + beta*C on `stream` with the variant chosen for the
// shape. `workspace` (device memory on the current device, stream-ordered with
// `stream`) must hold pingpong_workspace_bytes(args) bytes; it may be null when
// that is 0. INVALID_ARGUMENT naming `workspace` when it is too small.
Status pingpong_sgemm(const GemmArgs& args, void* workspace, std::size_t workspace_bytes, cudaStream_t stream);

// Tile-configuration variants, for tuning and benchmarks.
int pingpong_variant_count();
std::string_view pingpong_variant_name(int variant);
// The variant pingpong_sgemm() uses for `shape` on a device with `sm_count` SMs: the
// registry row's (select_kernel_row_of; the SIMT choice reads no layout).
int pingpong_pick_variant(const GemmShape& shape, int sm_count);
// Whether `variant` runs `shape` at all (the GEMV variant needs m == 1 or n == 1;
// every tile variant runs every shape). Pure.
bool pingpong_variant_accepts(const GemmShape& shape, int variant);
// Scratch bytes of one variant for `shape` on the current device.
std::size_t pingpong_variant_workspace_bytes(const GemmShape& shape, int variant);
// Enqueues the product with one given variant (0 <= variant < pingpong_variant_count()),
// e.g. the `variant` of the registry row the planner chose.
Status pingpong_sgemm_variant(const GemmArgs& args, int variant, void* workspace, std::size_t workspace_bytes,
                              cudaStream_t stream);

}  // namespace sgemm
