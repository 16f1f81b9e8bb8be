// cuBLAS results as our Status, converted where the call is made (file and
// line in the message, the sticky runtime error cleared). Private to kernels/.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <string>

#include "common/status.h"

namespace sgemm {

inline Status cublas_status(cublasStatus_t st, const char* what, const char* file, int line) {
  if (st == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  (void)cudaGetLastError();  // leave no sticky runtime error behind for the next call
  std::string msg = std::string(what) + " failed: " + cublasGetStatusName(st) + " (" + cublasGetStatusString(st) +
                    ") at " + file + ":" + std::to_string(line);
  switch (st) {
    case CUBLAS_STATUS_ALLOC_FAILED:
      return ResourceExhausted(std::move(msg));
    // Requests are validated before they reach cuBLAS: a rejected value is our bug.
    case CUBLAS_STATUS_INVALID_VALUE:
      return Internal(std::move(msg));
    case CUBLAS_STATUS_NOT_INITIALIZED:
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return Unavailable(std::move(msg));
    default:
      return Internal(std::move(msg));
  }
}

// A new handle in the default math mode: TF32 comes only from a call's compute
// type, whatever NVIDIA_TF32_OVERRIDE says elsewhere.
inline StatusOr<cublasHandle_t> make_cublas_handle() {
  cublasHandle_t handle = nullptr;
  SGEMM_RETURN_IF_ERROR(cublas_status(cublasCreate(&handle), "cublasCreate", __FILE__, __LINE__));
  const Status st =
      cublas_status(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH), "cublasSetMathMode", __FILE__, __LINE__);
  if (!st.ok()) {
    cublasDestroy(handle);
    return st;
  }
  return handle;
}

}  // namespace sgemm

#define SGEMM_CUBLAS_TRY(expr) SGEMM_RETURN_IF_ERROR(::sgemm::cublas_status((expr), #expr, __FILE__, __LINE__))
