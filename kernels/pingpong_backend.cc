// GemmBackend over the ping-pong kernel (pingpong_sgemm.h). Stateless apart
// from the device it was made on; not thread-safe by contract (gemm_backend.h).
#include <memory>

#include "kernels/backend_factories.h"
#include "kernels/pingpong_sgemm.h"

namespace sgemm {
namespace {

class PingpongBackend final : public GemmBackend {
 public:
  KernelKind kind() const override { return KernelKind::kPingpong; }
  Status can_implement(const GemmArgs& args) const override { return pingpong_can_implement(args); }
  std::size_t workspace_bytes(const GemmArgs& args) const override { return pingpong_workspace_bytes(args); }
  Status run(const GemmArgs& args, void* workspace, std::size_t workspace_bytes, cudaStream_t stream) override {
    return pingpong_sgemm(args, workspace, workspace_bytes, stream);
  }
};

}  // namespace

StatusOr<std::unique_ptr<GemmBackend>> make_pingpong_backend() {
  return std::unique_ptr<GemmBackend>(std::make_unique<PingpongBackend>());
}

}  // namespace sgemm
