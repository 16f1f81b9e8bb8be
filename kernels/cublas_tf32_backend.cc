// cuBLAS on TF32 tensor cores behind the GemmBackend interface: fp32 operands and
// result, CUBLAS_COMPUTE_32F_FAST_TF32 (inputs rounded to tf32, ~2^-11 relative per
// product, fp32 accumulation). The fast, inaccurate point of comparison for fp32x3.
// Row-major through the same column-major trick as cublas_sgemm.cc (C^T = B^T A^T).
//
// Ownership: the backend owns one cuBLAS handle made on the device current at
// construction. Not thread-safe (gemm_backend.h); run() binds the handle to the
// caller's stream each time.
#include <cublas_v2.h>

#include <memory>
#include <string>

#include "kernels/cuda_status.h"
#include "kernels/backend_factories.h"

namespace sgemm {
namespace {

Status tf32_cublas_status(cublasStatus_t st, const char* what, const char* file, int line) {
  if (st == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  (void)cudaGetLastError();  // leave no sticky runtime error behind
  std::string msg = std::string(what) + " failed: " + cublasGetStatusName(st) + " (" + cublasGetStatusString(st) +
                    ") at " + file + ":" + std::to_string(line);
  switch (st) {
    case CUBLAS_STATUS_ALLOC_FAILED: return ResourceExhausted(std::move(msg));
    case CUBLAS_STATUS_INVALID_VALUE: return InvalidArgument(std::move(msg));
    case CUBLAS_STATUS_NOT_INITIALIZED:
    case CUBLAS_STATUS_ARCH_MISMATCH: return Unavailable(std::move(msg));
    default: return Internal(std::move(msg));
  }
}

#define SGEMM_TF32_CUBLAS_TRY(expr) \
  SGEMM_RETURN_IF_ERROR(tf32_cublas_status((expr), #expr, __FILE__, __LINE__))

class CublasTf32Backend final : public GemmBackend {
 public:
  explicit CublasTf32Backend(cublasHandle_t handle) : handle_(handle) {}
  ~CublasTf32Backend() override { cublasDestroy(handle_); }
  CublasTf32Backend(const CublasTf32Backend&) = delete;
  CublasTf32Backend& operator=(const CublasTf32Backend&) = delete;

  KernelKind kind() const override { return KernelKind::kTf32; }
  // Same limits as cuBLAS SGEMM (32-bit int sizes).
  Status can_implement(const GemmArgs& args) const override { return cublas_can_implement(args); }

  Status run(const GemmArgs& g, void* /*workspace*/, std::size_t /*workspace_bytes*/, cudaStream_t stream) override {
    SGEMM_RETURN_IF_ERROR(cublas_can_implement(g));
    SGEMM_TF32_CUBLAS_TRY(cublasSetStream(handle_, stream));
    SGEMM_TF32_CUBLAS_TRY(cublasGemmEx(handle_, CUBLAS_OP_N, CUBLAS_OP_N, int(g.shape.n), int(g.shape.m),
                                       int(g.shape.k), &g.alpha, g.b, CUDA_R_32F, int(g.ldb), g.a, CUDA_R_32F,
                                       int(g.lda), &g.beta, g.c, CUDA_R_32F, int(g.ldc),
                                       CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT));
    return Status::Ok();
  }

 private:
  cublasHandle_t handle_;  // owned
};

}  // namespace

StatusOr<std::unique_ptr<GemmBackend>> make_cublas_tf32_backend() {
  cublasHandle_t handle = nullptr;
  SGEMM_TF32_CUBLAS_TRY(cublasCreate(&handle));
  return std::unique_ptr<GemmBackend>(std::make_unique<CublasTf32Backend>(handle));
}

}  // namespace sgemm
