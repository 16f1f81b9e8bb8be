// cuBLAS behind the GemmBackend interface, in two kinds that differ only in
// the compute type: kCublas (CUBLAS_COMPUTE_32F, the default math mode, no
// TF32: the reference our kernels are measured against) and kTf32
// (CUBLAS_COMPUTE_32F_FAST_TF32: inputs rounded to tf32, ~2^-11 relative per
// product, fp32 accumulation; the fast, less accurate point of comparison for
// fp32x3).
//
// Row-major through the column-major trick: a row-major m x n C with leading
// dimension ldc is the column-major n x m matrix C^T, and C^T = B^T A^T, so we
// ask cuBLAS for the (n, m, k) product of B (as B^T, ld ldb) and A (as A^T, ld
// lda), no transposes. cuBLAS does not read C when beta == 0.
//
// Ownership: the backend owns one cuBLAS handle made on the device current at
// construction. Not thread-safe (gemm_backend.h): one backend per stream/lane;
// run() binds the handle to the caller's stream each time.
#include <cublas_v2.h>

#include <climits>
#include <memory>
#include <string>

#include "common/kernel_registry.h"
#include "kernels/backend_factories.h"
#include "kernels/cublas_status.h"
#include "kernels/cuda_status.h"

namespace sgemm {
namespace {

class CublasBackend final : public GemmBackend {
 public:
  CublasBackend(cublasHandle_t handle, KernelKind kind, cublasComputeType_t compute)
      : handle_(handle), kind_(kind), compute_(compute) {}
  ~CublasBackend() override { cublasDestroy(handle_); }
  CublasBackend(const CublasBackend&) = delete;
  CublasBackend& operator=(const CublasBackend&) = delete;

  KernelKind kind() const override { return kind_; }
  Status can_implement(const GemmArgs& args) const override { return cublas_can_implement(args); }

  Status run(const GemmArgs& g, void* /*workspace*/, std::size_t /*workspace_bytes*/, cudaStream_t stream) override {
    SGEMM_RETURN_IF_ERROR(cublas_can_implement(g));
    SGEMM_CUBLAS_TRY(cublasSetStream(handle_, stream));
    SGEMM_CUBLAS_TRY(cublasGemmEx(handle_, CUBLAS_OP_N, CUBLAS_OP_N, int(g.shape.n), int(g.shape.m), int(g.shape.k),
                                  &g.alpha, g.b, CUDA_R_32F, int(g.ldb), g.a, CUDA_R_32F, int(g.lda), &g.beta, g.c,
                                  CUDA_R_32F, int(g.ldc), compute_, CUBLAS_GEMM_DEFAULT));
    return Status::Ok();
  }
  KernelPick row(const GemmArgs& args) const override {
    return select_kernel_row_of(kind_, args.shape, kernel_layout(args), 0);  // one row per kind
  }

 private:
  cublasHandle_t handle_;  // owned
  const KernelKind kind_;
  const cublasComputeType_t compute_;
};

StatusOr<std::unique_ptr<GemmBackend>> make_backend(KernelKind kind, cublasComputeType_t compute) {
  SGEMM_ASSIGN_OR_RETURN(cublasHandle_t handle, make_cublas_handle());
  return std::unique_ptr<GemmBackend>(std::make_unique<CublasBackend>(handle, kind, compute));
}

}  // namespace

Status cublas_can_implement(const GemmArgs& g) { return check_gemm_args(g, {.max_ld = INT_MAX}); }

StatusOr<std::unique_ptr<GemmBackend>> make_cublas_backend() {
  return make_backend(KernelKind::kCublas, CUBLAS_COMPUTE_32F);
}

StatusOr<std::unique_ptr<GemmBackend>> make_cublas_tf32_backend() {
  return make_backend(KernelKind::kTf32, CUBLAS_COMPUTE_32F_FAST_TF32);
}

}  // namespace sgemm
