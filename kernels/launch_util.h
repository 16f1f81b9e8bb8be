// Host-side helpers the kernels' launchers share (private to kernels/).
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>

#include "common/status.h"
#include "kernels/cuda_status.h"

namespace sgemm {

// Raises `kernel`'s dynamic shared-memory limit to `bytes` once per device
// (devices 0-63 remembered in `done_mask`, one mask per kernel instantiation);
// nothing to do at or below the 48 KiB default.
template <class Kernel>
Status ensure_smem_limit(Kernel kernel, int bytes, std::atomic<uint64_t>& done_mask) {
  if (bytes <= 48 * 1024) return Status::Ok();
  int device = 0;
  SGEMM_CUDA_TRY(cudaGetDevice(&device));
  const uint64_t bit = device < 64 ? (uint64_t{1} << device) : 0;
  if (bit != 0 && (done_mask.load(std::memory_order_acquire) & bit)) return Status::Ok();
  SGEMM_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  done_mask.fetch_or(bit, std::memory_order_acq_rel);
  return Status::Ok();
}

}  // namespace sgemm
