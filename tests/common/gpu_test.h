// Test helpers for GPU suites: skip visibly when the machine lacks the GPUs.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

namespace sgemm::testing {

inline int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

// GPU counts a multi-GPU suite compares: SGEMM_TEST_GPUS="2,4" when set,
// else 2, 4, 8 up to the visible count, and the visible count itself (each
// count c means devices 0..c-1). Counts above what is visible are dropped.
inline std::vector<int> test_gpu_counts() {
  const int have = cuda_device_count();
  std::vector<int> out;
  if (const char* env = std::getenv("SGEMM_TEST_GPUS"); env && *env) {
    std::string list = env;
    for (size_t pos = 0; pos <= list.size();) {
      const size_t end = std::min(list.find(',', pos), list.size());
      const int c = std::atoi(list.substr(pos, end - pos).c_str());
      if (c >= 1 && c <= have) out.push_back(c);
      pos = end + 1;
    }
    return out;
  }
  for (int c = 2; c <= have; c *= 2) out.push_back(c);
  if (have >= 2 && std::find(out.begin(), out.end(), have) == out.end()) out.push_back(have);
  return out;
}

// Devices 0..count-1.
inline std::vector<int> first_gpus(int count) {
  std::vector<int> d;
  for (int i = 0; i < count; ++i) d.push_back(i);
  return d;
}

}  // namespace sgemm::testing

// Skips the current test with a message that says why, when fewer than `n`
// CUDA devices are visible. CTest reports such tests as "Skipped".
#define SGEMM_REQUIRE_GPUS(n)                                                       \
  do {                                                                              \
    const int sgemm_have_ = ::sgemm::testing::cuda_device_count();                  \
    if (sgemm_have_ < (n))                                                          \
      GTEST_SKIP() << "needs " << (n) << " CUDA device(s), found " << sgemm_have_   \
                   << ": run this suite on the GPU machine (scripts/gpu-check.sh)"; \
  } while (0)
