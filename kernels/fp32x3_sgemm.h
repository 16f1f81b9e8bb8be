// Host API of the fp32x3 SGEMM: fp32-accurate products on Hopper tensor cores by
// the 3xTF32 scheme (device code: fp32x3_sgemm.cuh; launchers: fp32x3_sgemm.cu,
// built for sm_90a only). Plain functions; no state beyond a per-device "shared-memory
// limit raised" flag per kernel instantiation and the driver entry point of
// cuTensorMapEncodeTiled, looked up once.
//
// Scratch memory is the caller's: fp32x3_workspace_bytes(shape) bytes (the tf32 hi/lo
// planes of A and of B transposed: 2 * (m + n) * round_up(k, 4) floats, plus the
// partial products where K is split, plus a flag word and alignment), passed to
// fp32x3_sgemm. Inputs holding an infinity are multiplied by an FFMA fallback kernel on
// the same stream (3xTF32 would turn a TF32-exact value times infinity into NaN;
// fp32x3_sgemm.cuh), so infinities and NaNs propagate as in SGEMM. The workspace may be reused as soon as
// the enqueued work is done (stream order).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/status.h"
#include "kernels/gemm_args.h"

namespace sgemm {

// Pure: OK when fp32x3 can run `args` (m, n, k in [1, 2^31), lda >= k, ldb >= n,
// ldc >= n, non-null pointers; any alignment). INVALID_ARGUMENT naming the field
// otherwise. Says nothing about the device: fp32x3_sgemm answers FAILED_PRECONDITION
// on a GPU that is not sm_90.
Status fp32x3_can_implement(const GemmArgs& args);

// Bytes of workspace fp32x3_sgemm needs for `shape`: the split operands and, where K is
// split, the slices' partial products.
std::size_t fp32x3_workspace_bytes(const GemmShape& shape);

// ... for K cut into `slices` (fp32x3_sgemm_sliced).
std::size_t fp32x3_workspace_bytes(const GemmShape& shape, int64_t slices);

// How many slices fp32x3 cuts K into for `shape` on the current device (1: none): the
// rule of common/fp32x3_slices.h. Each slice's partial product goes to the workspace;
// the slices are summed in a fixed order (results identical run to run), then alpha and
// beta applied.
int64_t fp32x3_k_slices(const GemmShape& shape);

// B split once for many products that share it (the row blocks of one job): its planes
// and an infinity flag, fp32x3_prepared_b_bytes(shape) bytes (shape.k and shape.n count).
// fp32x3_prepare_b enqueues the split of args.b into `prepared`; a product whose
// args.b_prepared points there (same b, ldb, k, n; stream-ordered after it) reads the
// planes instead of splitting B again, and needs fp32x3_workspace_bytes(shape, slices,
// true) bytes of workspace. Results are the same bit for bit. The buffer starts with B's
// planes, B transposed: hi[n][kp] then lo[n][kp], kp = k rounded up to a multiple of 4,
// hi = x rounded to TF32 (nearest, ties away), lo = (x - hi) rounded the same way.
std::size_t fp32x3_prepared_b_bytes(const GemmShape& shape);
Status fp32x3_prepare_b(const GemmArgs& args, void* prepared, std::size_t bytes, cudaStream_t stream);
std::size_t fp32x3_workspace_bytes(const GemmShape& shape, int64_t slices, bool b_prepared);

// Enqueues C = alpha*A*B + beta*C on `stream` with the variant chosen for the shape.
// `workspace` must hold fp32x3_workspace_bytes(args.shape) bytes of device memory.
Status fp32x3_sgemm(const GemmArgs& args, void* workspace, std::size_t workspace_bytes, cudaStream_t stream);

// Schedule/tile variants, for tuning, tests and benchmarks.
// Only the first kernel (the split into tf32 hi/lo planes), for timing its share and
// for tests: the workspace then starts with A's planes, hi[m][kp] then lo[m][kp] (as B's
// above, not transposed).
Status fp32x3_split_operands(const GemmArgs& args, void* workspace, std::size_t workspace_bytes, cudaStream_t stream);

// The picked variant with K cut into `slices` instead of the rule's count (for tuning
// the rule); the workspace must hold fp32x3_workspace_bytes(shape, slices) bytes.
Status fp32x3_sgemm_sliced(const GemmArgs& args, int64_t slices, void* workspace, std::size_t workspace_bytes,
                           cudaStream_t stream);

int fp32x3_variant_count();
std::string_view fp32x3_variant_name(int variant);
// The variant fp32x3_sgemm() uses for `args` (its shape and the alignment of A): the
// registry row's (common/kernel_registry.h, select_kernel_row_of).
int fp32x3_pick_variant(const GemmArgs& args);
Status fp32x3_sgemm_variant(const GemmArgs& args, int variant, void* workspace, std::size_t workspace_bytes,
                            cudaStream_t stream);
// One variant with K cut into `slices` (a registry row and its cut, as the planner chose
// them); the workspace must hold fp32x3_workspace_bytes(shape, slices) bytes.
Status fp32x3_sgemm_variant_sliced(const GemmArgs& args, int variant, int64_t slices, void* workspace,
                                   std::size_t workspace_bytes, cudaStream_t stream);

}  // namespace sgemm
