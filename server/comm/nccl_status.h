// NCCL results as sgemm::Status, made where the call is: file:line and the
// call text in the message, NCCL's last error string appended. A host
// out-of-memory is RESOURCE_EXHAUSTED; everything else, bad arguments and usage
// included (requests are validated before NCCL sees them), is INTERNAL: our bug
// or a broken communicator.
#pragma once

#include <nccl.h>

#include <string>

#include "common/status.h"

namespace sgemm {

inline Status nccl_status(ncclResult_t r, ncclComm_t comm, const char* what, const char* file, int line) {
  if (r == ncclSuccess) return Status::Ok();
  std::string msg = std::string(what) + " failed: " + ncclGetErrorString(r);
  if (const char* last = ncclGetLastError(comm); last && *last) msg += std::string(" (") + last + ")";
  msg += std::string(" at ") + file + ":" + std::to_string(line);
  if (r == ncclSystemError && msg.find("out of memory") != std::string::npos) return ResourceExhausted(std::move(msg));
  return Internal(std::move(msg));
}

}  // namespace sgemm

#define SGEMM_NCCL_STATUS(expr) ::sgemm::nccl_status((expr), nullptr, #expr, __FILE__, __LINE__)
#define SGEMM_NCCL_TRY(expr) SGEMM_RETURN_IF_ERROR(SGEMM_NCCL_STATUS(expr))
