// GemmBackend over the fp32x3 kernel (fp32x3_sgemm.h): fp32-accurate tensor-core
// SGEMM on Hopper (sm_90) only; the factory refuses other devices (UNAVAILABLE).
//
// Ownership: the backend owns the kernel's workspace (the split operands), one
// device buffer grown on demand and kept until the backend is destroyed, on the
// device current at construction. Not thread-safe (gemm_backend.h). Reuse is
// stream-ordered: run() records `last_use_` after enqueuing, and a later run on
// another stream waits for it first; growing the buffer waits for it on the host.
#include <cuda_runtime_api.h>

#include <memory>
#include <string>

#include "common/cuda_status.h"
#include "kernels/backend_factories.h"
#include "kernels/fp32x3_sgemm.h"

namespace sgemm {
namespace {

class Fp32x3Backend final : public GemmBackend {
 public:
  explicit Fp32x3Backend(cudaEvent_t last_use) : last_use_(last_use) {}
  ~Fp32x3Backend() override {
    if (workspace_ != nullptr) {
      cudaEventSynchronize(last_use_);
      cudaFree(workspace_);
    }
    cudaEventDestroy(last_use_);
  }
  Fp32x3Backend(const Fp32x3Backend&) = delete;
  Fp32x3Backend& operator=(const Fp32x3Backend&) = delete;

  KernelKind kind() const override { return KernelKind::kFp32x3; }
  Status can_implement(const GemmArgs& args) const override { return fp32x3_can_implement(args); }

  Status run(const GemmArgs& args, cudaStream_t stream) override {
    SGEMM_RETURN_IF_ERROR(fp32x3_can_implement(args));
    const std::size_t need = fp32x3_workspace_bytes(args.shape);
    if (need > capacity_) {
      if (workspace_ != nullptr) {
        SGEMM_CUDA_TRY(cudaEventSynchronize(last_use_));
        SGEMM_CUDA_TRY(cudaFree(workspace_));
        workspace_ = nullptr;
        capacity_ = 0;
      }
      SGEMM_CUDA_TRY(cudaMalloc(&workspace_, need));
      capacity_ = need;
    } else if (used_ && stream != last_stream_) {
      SGEMM_CUDA_TRY(cudaStreamWaitEvent(stream, last_use_, 0));
    }
    SGEMM_RETURN_IF_ERROR(fp32x3_sgemm(args, workspace_, capacity_, stream));
    SGEMM_CUDA_TRY(cudaEventRecord(last_use_, stream));
    last_stream_ = stream;
    used_ = true;
    return Status::Ok();
  }

 private:
  cudaEvent_t last_use_;  // owned; recorded after each run's work
  void* workspace_ = nullptr;  // owned, capacity_ bytes
  std::size_t capacity_ = 0;
  cudaStream_t last_stream_ = nullptr;
  bool used_ = false;
};

}  // namespace

StatusOr<std::unique_ptr<GemmBackend>> make_fp32x3_backend() {
  int device = 0, major = 0, minor = 0;
  SGEMM_CUDA_TRY(cudaGetDevice(&device));
  SGEMM_CUDA_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  SGEMM_CUDA_TRY(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  if (major != 9 || minor != 0)
    return Unavailable("fp32x3: needs an sm_90 (Hopper) GPU, CUDA device " + std::to_string(device) + " is sm_" +
                       std::to_string(major) + std::to_string(minor));
  cudaEvent_t ev = nullptr;
  SGEMM_CUDA_TRY(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  return std::unique_ptr<GemmBackend>(std::make_unique<Fp32x3Backend>(ev));
}

}  // namespace sgemm
