// GemmBackend over the fp32x3 kernel (fp32x3_sgemm.h): fp32-accurate tensor-core
// SGEMM on Hopper (sm_90) only; the factory refuses other devices (UNAVAILABLE).
// Stateless: the workspace (the split operands, fp32x3_workspace_bytes) is the
// caller's, as for every backend (gemm_backend.h); the engine's lane owns it.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "common/kernel_registry.h"
#include "kernels/backend_factories.h"
#include "kernels/cuda_status.h"
#include "kernels/fp32x3_sgemm.h"

namespace sgemm {
namespace {

class Fp32x3Backend final : public GemmBackend {
 public:
  explicit Fp32x3Backend(int sm_count) : sm_count_(sm_count) {}
  KernelKind kind() const override { return KernelKind::kFp32x3; }
  Status can_implement(const GemmArgs& args) const override { return fp32x3_can_implement(args); }
  std::size_t workspace_bytes(const GemmArgs& args) const override {
    return fp32x3_workspace_bytes(args.shape, fp32x3_k_slices(args.shape), args.b_prepared != nullptr);
  }
  Status run(const GemmArgs& args, void* workspace, std::size_t workspace_bytes, cudaStream_t stream) override {
    return fp32x3_sgemm(args, workspace, workspace_bytes, stream);
  }
  // The registry row fp32x3_sgemm runs and its cut of K (the name's "_splitkN").
  KernelPick row(const GemmArgs& args) const override {
    return select_kernel_row_of(KernelKind::kFp32x3, args.shape, kernel_layout(args), sm_count_);
  }
  std::size_t row_workspace_bytes(const KernelPick& pick, const GemmArgs& args) const override {
    return fp32x3_workspace_bytes(args.shape, std::max<int64_t>(pick.k_slices, 1), args.b_prepared != nullptr);
  }
  // The split of B into tf32 planes, once for the products that share it.
  std::size_t prepared_b_bytes(const GemmArgs& args) const override { return fp32x3_prepared_b_bytes(args.shape); }
  Status prepare_b(const GemmArgs& args, void* prepared, std::size_t bytes, cudaStream_t stream) override {
    return fp32x3_prepare_b(args, prepared, bytes, stream);
  }
  Status run_row(const KernelPick& pick, const GemmArgs& args, void* workspace, std::size_t workspace_bytes,
                 cudaStream_t stream) override {
    SGEMM_RETURN_IF_ERROR(check_row(pick));
    return fp32x3_sgemm_variant_sliced(args, pick.row->variant, pick.k_slices, workspace, workspace_bytes, stream);
  }

 private:
  const int sm_count_;
};

}  // namespace

StatusOr<std::unique_ptr<GemmBackend>> make_fp32x3_backend() {
  int device = 0, major = 0, minor = 0, sm_count = 0;
  SGEMM_CUDA_TRY(cudaGetDevice(&device));
  SGEMM_CUDA_TRY(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device));
  SGEMM_CUDA_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  SGEMM_CUDA_TRY(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  if (major != 9 || minor != 0)
    return Unavailable("fp32x3: needs an sm_90 (Hopper) GPU, CUDA device " + std::to_string(device) + " is sm_" +
                       std::to_string(major) + std::to_string(minor));
  return std::unique_ptr<GemmBackend>(std::make_unique<Fp32x3Backend>(sm_count));
}

}  // namespace sgemm
