#include "kernels/gemm_backend.h"

#include <string>

#include "kernels/backend_factories.h"

namespace sgemm {

Status GemmBackend::check_row(const KernelPick& pick) const {
  if (pick.row == nullptr) return InvalidArgument("kernel: no row given");
  if (pick.row->family != kind())
    return InvalidArgument("kernel: row '" + std::string(pick.row->name) + "' is not of the " +
                           std::string(kernel_kind_name(kind())) + " family");
  return Status::Ok();
}

Status GemmBackend::prepare_b(const GemmArgs& /*args*/, void* /*prepared*/, std::size_t /*bytes*/,
                              cudaStream_t /*stream*/) {
  return FailedPrecondition("kernel '" + std::string(name()) + "' reads B as it is: there is nothing to prepare");
}

// A family with one row (cuBLAS) runs it as run() does.
std::size_t GemmBackend::row_workspace_bytes(const KernelPick& /*pick*/, const GemmArgs& args) const {
  return workspace_bytes(args);
}

Status GemmBackend::run_row(const KernelPick& pick, const GemmArgs& args, void* workspace, std::size_t workspace_bytes,
                            cudaStream_t stream) {
  SGEMM_RETURN_IF_ERROR(check_row(pick));
  return run(args, workspace, workspace_bytes, stream);
}

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
