// GemmBackend over the ping-pong kernel (pingpong_sgemm.h). Stateless apart
// from the device it was made on; not thread-safe by contract (gemm_backend.h).
#include <cuda_runtime_api.h>

#include <memory>
#include <string>

#include "common/kernel_registry.h"
#include "kernels/backend_factories.h"
#include "kernels/cuda_status.h"
#include "kernels/pingpong_sgemm.h"

namespace sgemm {
namespace {

class PingpongBackend final : public GemmBackend {
 public:
  explicit PingpongBackend(int sm_count) : sm_count_(sm_count) {}
  KernelKind kind() const override { return KernelKind::kPingpong; }
  Status can_implement(const GemmArgs& args) const override { return pingpong_can_implement(args); }
  std::size_t workspace_bytes(const GemmArgs& args) const override { return pingpong_workspace_bytes(args); }
  Status run(const GemmArgs& args, void* workspace, std::size_t workspace_bytes, cudaStream_t stream) override {
    return pingpong_sgemm(args, workspace, workspace_bytes, stream);
  }
  // The registry row pingpong_sgemm runs (common/kernel_registry.h): "simt_tma_..." for
  // the TMA-fed kernels (which take the cp.async tile where TMA cannot read A or B),
  // "simt_cpasync_..." for the multistage cp.async tiles, "gemv" for one row or column.
  KernelPick row(const GemmArgs& args) const override {
    return select_kernel_row_of(KernelKind::kPingpong, args.shape, kernel_layout(args), sm_count_);
  }
  std::size_t row_workspace_bytes(const KernelPick& pick, const GemmArgs& args) const override {
    if (!check_row(pick).ok()) return 0;
    return pingpong_variant_workspace_bytes(args.shape, pick.row->variant);
  }
  Status run_row(const KernelPick& pick, const GemmArgs& args, void* workspace, std::size_t workspace_bytes,
                 cudaStream_t stream) override {
    SGEMM_RETURN_IF_ERROR(check_row(pick));
    return pingpong_sgemm_variant(args, pick.row->variant, workspace, workspace_bytes, stream);
  }

 private:
  const int sm_count_;
};

}  // namespace

StatusOr<std::unique_ptr<GemmBackend>> make_pingpong_backend() {
  int device = 0, sm_count = 0;
  SGEMM_CUDA_TRY(cudaGetDevice(&device));
  SGEMM_CUDA_TRY(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device));
  return std::unique_ptr<GemmBackend>(std::make_unique<PingpongBackend>(sm_count));
}

}  // namespace sgemm
