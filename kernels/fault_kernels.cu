#include "kernels/fault_kernels.h"

namespace sgemm {
namespace {

__global__ void trap_kernel() { __trap(); }

__global__ void spin_kernel(const volatile int* release) {
  while (*release == 0) __nanosleep(1000);
}

}  // namespace

cudaError_t launch_trap_kernel(cudaStream_t stream) {
  trap_kernel<<<1, 1, 0, stream>>>();
  return cudaGetLastError();
}

cudaError_t launch_spin_kernel(const volatile int* release, cudaStream_t stream) {
  spin_kernel<<<1, 1, 0, stream>>>(release);
  return cudaGetLastError();
}

}  // namespace sgemm
