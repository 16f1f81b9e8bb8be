#include "kernels/gemm_backend.h"

#include <string>

#include "kernels/backend_factories.h"

namespace sgemm {

StatusOr<std::unique_ptr<GemmBackend>> make_gemm_backend(KernelKind kind) {
  switch (kind) {
    case KernelKind::kPingpong:
      return make_pingpong_backend();
    case KernelKind::kCublas:
      return make_cublas_backend();
    case KernelKind::kTf32:
      return make_cublas_tf32_backend();
    case KernelKind::kFp32x3:
      return make_fp32x3_backend();
    case KernelKind::kOpenblas:
      break;  // the CPU engine's, no GPU backend
  }
  return InvalidArgument("kind: unknown kernel kind " + std::to_string(int(kind)));
}

}  // namespace sgemm
