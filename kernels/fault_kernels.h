// Kernels that fail on purpose: test hooks for the engine's fault handling
// (SGEMM_FAULT_INJECT, server/devices/device_health.h), never launched otherwise.
#pragma once

#include <cuda_runtime_api.h>

namespace sgemm {

// One thread executes a trap: the launch fails with cudaErrorLaunchFailure, a
// sticky error that leaves the device's context unusable, like a real fault.
cudaError_t launch_trap_kernel(cudaStream_t stream);

// One thread spins until `*release` (host-mapped memory) is non-zero, holding
// back everything queued after it on `stream`: a collective left waiting.
cudaError_t launch_spin_kernel(const volatile int* release, cudaStream_t stream);

}  // namespace sgemm
