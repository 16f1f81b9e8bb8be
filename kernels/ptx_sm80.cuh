// PTX wrappers for sm_80 and later: shared-memory addresses, cp.async copies and their
// groups, and named barriers. Thin, no state; every kernel of kernels/ that issues these
// instructions takes them from here (the sm_90a ones are in ptx_sm90.cuh).
//   cp.async   4- and 16-byte copies global -> shared, zero-filled past src-size; commit
//              and wait on groups (the multistage SIMT kernels) or an mbarrier arrive
//              that fires once the thread's copies have landed (the producer warps of
//              the TMA-fed kernel);
//   loads      one float from a 32-bit shared address;
//   warps      named barriers (bar.sync / bar.arrive with a thread count).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace sgemm::ptx {

// The 32-bit shared-state-space address of a pointer into shared memory.
__device__ __forceinline__ uint32_t smem_u32(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }

// Whether a cp.async carries a "memory" clobber. kMemory keeps the copy in program order
// with the thread's other memory accesses (the producer warps that signal copies through an
// mbarrier); kNone lets the compiler schedule loads and stores across it, for kernels whose
// cp.async.wait_group and __syncthreads already order every access to the copied stage (the
// multistage SIMT kernels). The two compile to different schedules: keep each kernel's kind.
enum class CpAsyncFence { kMemory, kNone };

// A 4-byte cp.async of global `src` into shared `dst`; the src_bytes form reads src_bytes
// (4 or 0) and zero-fills the rest (0: nothing is read).
__device__ __forceinline__ void cp_async_4(uint32_t dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(dst), "l"(src) : "memory");
}
template <CpAsyncFence kFence = CpAsyncFence::kMemory, class T>
__device__ __forceinline__ void cp_async_4(uint32_t dst, const T* src, uint32_t src_bytes) {
  if constexpr (kFence == CpAsyncFence::kMemory)
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src), "r"(src_bytes));
}
// A 16-byte cp.async bypassing L1 (.cg); reads src_bytes (0..16) and zero-fills the rest.
template <CpAsyncFence kFence = CpAsyncFence::kMemory, class T>
__device__ __forceinline__ void cp_async_16(uint32_t dst, const T* src, uint32_t src_bytes) {
  if constexpr (kFence == CpAsyncFence::kMemory)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
  else
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(src_bytes));
}
// Closes the thread's cp.async issued so far into one group.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most N of the thread's groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
// Arrives on the mbarrier once all of this thread's earlier cp.async have completed; .noinc:
// the arrival is one of the barrier's expected count (init the barrier with the number of
// threads that signal it this way).
__device__ __forceinline__ void cp_async_mbar_arrive_noinc(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
}

// One float from the shared-state-space address `addr` (an LDS where the address is a
// 32-bit shared address, as the swizzled layouts compute it).
__device__ __forceinline__ float lds_f32(uint32_t addr) {
  float v;
  asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"(addr));
  return v;
}

__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace sgemm::ptx
