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

#include <memory>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "kernels/gemm_args.h"

namespace sgemm {

enum class KernelKind {
  kPingpong,  // our double-buffered shared-memory SIMT kernel (kernels/pingpong_sgemm.cuh)
  kCublas,    // cublasSgemm with CUBLAS_COMPUTE_32F, the reference
  kTf32,      // cuBLAS with CUBLAS_COMPUTE_32F_FAST_TF32: tensor cores, tf32 inputs (~1e-3 relative)
  kFp32x3,    // our 3xTF32 wgmma kernel (kernels/fp32x3_sgemm.cuh): tensor cores, fp32 accuracy, sm_90 only
};

std::string_view kernel_kind_name(KernelKind kind);
// Parses "pingpong" / "cublas" / "tf32" / "fp32x3"; returns false for anything else.
bool parse_kernel_kind(std::string_view text, KernelKind* out);
std::vector<KernelKind> all_kernel_kinds();

class GemmBackend {
 public:
  virtual ~GemmBackend() = default;
  virtual KernelKind kind() const = 0;
  std::string_view name() const { return kernel_kind_name(kind()); }

  // Pure: whether this backend supports the problem (shape, alignment, leading
  // dimensions). INVALID_ARGUMENT naming the offending field when it does not.
  virtual Status can_implement(const GemmArgs& args) const = 0;

  // Enqueues the product on `stream`; returns once it is enqueued.
  virtual Status run(const GemmArgs& args, cudaStream_t stream) = 0;
};

// Makes a backend for the current device.
StatusOr<std::unique_ptr<GemmBackend>> make_gemm_backend(KernelKind kind);

}  // namespace sgemm
