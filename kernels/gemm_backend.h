// One small interface for every GPU SGEMM implementation (our ping-pong kernel,
// cuBLAS, and later an fp32-accurate tensor-core mode). Adding a backend is
// adding a file that implements GemmBackend and one line in make_gemm_backend.
//
// Ownership and threads: a GemmBackend is made for one device and holds that
// device's per-backend state (a cuBLAS handle, for instance). It is NOT
// thread-safe: each engine lane (one stream) owns its own instance. Call every
// method with the backend's device current.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/gemm_types.h"
#include "common/kernel_registry.h"
#include "common/status.h"
#include "kernels/gemm_args.h"

namespace sgemm {

class GemmBackend {
 public:
  virtual ~GemmBackend() = default;
  virtual KernelKind kind() const = 0;
  std::string_view name() const { return kernel_kind_name(kind()); }

  // Pure: whether this backend supports the problem (shape, alignment, leading
  // dimensions). INVALID_ARGUMENT naming the offending field when it does not.
  virtual Status can_implement(const GemmArgs& args) const = 0;

  // Device scratch run() needs for `args` (the caller owns it, as in CUTLASS's
  // get_workspace_size); 0 when none.
  virtual std::size_t workspace_bytes(const GemmArgs& /*args*/) const { return 0; }

  // Enqueues the product on `stream`; returns once it is enqueued. `workspace`
  // holds at least workspace_bytes(args) bytes on this device (null when 0) and
  // must stay valid until the work on `stream` is done.
  virtual Status run(const GemmArgs& args, void* workspace, std::size_t workspace_bytes, cudaStream_t stream) = 0;

  // B prepared once for several products that share it (the row blocks of a job):
  // the bytes of B's prepared form for `args`' B, or 0 (the default) where the
  // backend reads B as it is. prepare_b enqueues it into `prepared` on `stream`;
  // a run whose args.b_prepared points there, stream-ordered after it, skips
  // that work, with the same result bit for bit.
  virtual std::size_t prepared_b_bytes(const GemmArgs& /*args*/) const { return 0; }
  virtual Status prepare_b(const GemmArgs& args, void* prepared, std::size_t bytes, cudaStream_t stream);

  // Pure: the kernel registry's row run() launches for `args` on this backend's
  // device (common/kernel_registry.h, select_kernel_row_of: the choice the planner's
  // select_kernel_row makes for the engine's layout).
  virtual KernelPick row(const GemmArgs& args) const = 0;

  // Pure: the name of that row, saying what it is: the arithmetic, the data path and
  // the tile ("simt_tma_128x256x32_w64x64_t8x16_s4", "simt_cpasync_64x128x16_...",
  // "gemv", "fp32x3_wgmma_coop_128x128_s4_promote1_splitA_group16_splitk4",
  // "cublas_sgemm", "cublas_tf32"). Summaries, timings.jsonl and traces name it.
  std::string kernel_name(const GemmArgs& args) const { return row(args).name(); }

  // The scratch and the launch of a given row of this backend's family (the planner's
  // select_kernel_row, say) in place of the backend's own choice. INVALID_ARGUMENT
  // naming `kernel` when `pick` is not a row of kind().
  virtual std::size_t row_workspace_bytes(const KernelPick& pick, const GemmArgs& args) const;
  virtual Status run_row(const KernelPick& pick, const GemmArgs& args, void* workspace, std::size_t workspace_bytes,
                         cudaStream_t stream);

 protected:
  // OK when `pick` is a row of this backend's family.
  Status check_row(const KernelPick& pick) const;
};

// Makes a backend for the current device.
StatusOr<std::unique_ptr<GemmBackend>> make_gemm_backend(KernelKind kind);

}  // namespace sgemm
