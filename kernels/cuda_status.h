// Turns CUDA runtime and cuBLAS results into sgemm::Status where the call is
// made: file:line and the call text go into the message, the sticky error of
// the runtime is cleared, and out-of-memory becomes RESOURCE_EXHAUSTED. Every
// request is validated before it reaches CUDA, so a value CUDA rejects
// (cudaErrorInvalidValue, ...) is our own bug: INTERNAL, never INVALID_ARGUMENT.
// Header-only; include it only from code that links CUDA::cudart.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "common/status.h"

namespace sgemm {

inline Status cuda_status(cudaError_t err, const char* what, const char* file, int line) {
  if (err == cudaSuccess) return Status::Ok();
  (void)cudaGetLastError();  // clear the non-sticky error so the next call starts clean
  std::string msg = std::string(what) + " failed: " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ") at " +
                    file + ":" + std::to_string(line);
  if (err == cudaErrorMemoryAllocation) return ResourceExhausted(std::move(msg));
  if (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver || err == cudaErrorDevicesUnavailable)
    return Unavailable(std::move(msg));
  return Internal(std::move(msg));
}

}  // namespace sgemm

#define SGEMM_CUDA_STATUS(expr) ::sgemm::cuda_status((expr), #expr, __FILE__, __LINE__)
#define SGEMM_CUDA_TRY(expr) SGEMM_RETURN_IF_ERROR(SGEMM_CUDA_STATUS(expr))
