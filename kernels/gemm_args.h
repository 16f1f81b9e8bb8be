// The problem every SGEMM backend in kernels/ solves:
//   C = alpha * A * B + beta * C
// fp32 operands, fp32 accumulation, row-major storage with leading dimensions
// (lda >= k, ldb >= n, ldc >= n). All pointers are device pointers on the
// current device. C is read only when beta != 0 (BLAS semantics: with beta == 0
// the old C is never read, so NaN in it does not propagate).
#pragma once

#include <climits>
#include <cstdint>

#include "common/gemm_types.h"
#include "common/kernel_registry.h"
#include "common/status.h"

namespace sgemm {

struct GemmArgs {
  GemmShape shape;
  float alpha = 1.0f;
  float beta = 0.0f;
  const float* a = nullptr;  // m x k, row-major, leading dimension lda
  int64_t lda = 0;
  const float* b = nullptr;  // k x n, row-major, leading dimension ldb
  int64_t ldb = 0;
  float* c = nullptr;  // m x n, row-major, leading dimension ldc
  int64_t ldc = 0;
  // B as the running backend's prepare_b left it for this b, ldb, k and n
  // (GemmBackend::prepared_b_bytes); null: none. A backend with nothing to
  // prepare ignores it.
  const void* b_prepared = nullptr;
};

// Convenience: a densely packed problem (lda = k, ldb = n, ldc = n).
inline GemmArgs dense_gemm_args(GemmShape s, float alpha, const float* a, const float* b, float beta, float* c) {
  return GemmArgs{s, alpha, beta, a, s.k, b, s.n, c, s.n};
}

// What a backend can index: its largest k, and its largest leading dimension
// (cuBLAS takes int). Every dimension is at least 1 and m, n below 2^31.
struct GemmArgBounds {
  int64_t max_k = INT_MAX;
  int64_t max_ld = INT64_MAX;
};

// The check every backend's can_implement starts with: the shape within
// `bounds`, no null pointer, leading dimensions of at least a row. The message
// names the field that is wrong. A backend adds only what is its own (tiles,
// TMA strides, GEMV shapes).
Status check_gemm_shape(const GemmShape& s, GemmArgBounds bounds = {});
Status check_gemm_args(const GemmArgs& g, GemmArgBounds bounds = {});

// What the registry's row choice (common/kernel_registry.h) reads of `args`' layout.
inline KernelLayout kernel_layout(const GemmArgs& args) {
  return {.a_16byte_aligned = (reinterpret_cast<uintptr_t>(args.a) & 15u) == 0, .lda = args.lda};
}

}  // namespace sgemm
