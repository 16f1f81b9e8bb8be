#include "kernels/gemm_backend.h"

#include <string>

#include "kernels/backend_factories.h"

namespace sgemm {

std::string_view kernel_kind_name(KernelKind kind) {
  switch (kind) {
    case KernelKind::kPingpong: return "pingpong";
    case KernelKind::kCublas: return "cublas";
    case KernelKind::kTf32: return "tf32";
    case KernelKind::kFp32x3: return "fp32x3";
  }
  return "unknown";
}

bool parse_kernel_kind(std::string_view text, KernelKind* out) {
  for (KernelKind k : all_kernel_kinds()) {
    if (text == kernel_kind_name(k)) {
      *out = k;
      return true;
    }
  }
  return false;
}

std::vector<KernelKind> all_kernel_kinds() {
  return {KernelKind::kPingpong, KernelKind::kCublas, KernelKind::kTf32, KernelKind::kFp32x3};
}

StatusOr<std::unique_ptr<GemmBackend>> make_gemm_backend(KernelKind kind) {
  switch (kind) {
    case KernelKind::kPingpong: return make_pingpong_backend();
    case KernelKind::kCublas: return make_cublas_backend();
    case KernelKind::kTf32: return make_cublas_tf32_backend();
    case KernelKind::kFp32x3: return make_fp32x3_backend();
  }
  return InvalidArgument("kind: unknown kernel kind " + std::to_string(int(kind)));
}

}  // namespace sgemm
