// Test helpers for GPU suites: skip visibly when the machine lacks the GPUs.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

namespace sgemm::testing {

inline int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

}  // namespace sgemm::testing

// Skips the current test with a message that says why, when fewer than `n`
// CUDA devices are visible. CTest reports such tests as "Skipped".
#define SGEMM_REQUIRE_GPUS(n)                                                                \
  do {                                                                                       \
    const int sgemm_have_ = ::sgemm::testing::cuda_device_count();                          \
    if (sgemm_have_ < (n))                                                                   \
      GTEST_SKIP() << "needs " << (n) << " CUDA device(s), found " << sgemm_have_            \
                   << ": run this suite on the GPU machine (scripts/gpu-check.sh)";          \
  } while (0)
