// cuBLAS's batched launches for many row-major products at once
// (server/engine/batch.h): a strided batch (one shape, operands at a fixed
// stride: cublasGemmStridedBatchedEx) and a group (each product its own shape:
// cublasGemmGroupedBatchedEx, cuBLAS >= 12.5, products of one shape sharing a
// group). Row-major through the column-major trick of cublas_sgemm.cc: C^T =
// op(B)^T op(A)^T, so cuBLAS is asked for the (n, m, k) product of B and A,
// each with its stored width as leading dimension and transposed as stored.
//
// The arithmetic is the compute type: kFp32 is CUBLAS_COMPUTE_32F in the
// default math mode (cuBLAS SGEMM's fp32 FMAs; NVIDIA_TF32_OVERRIDE aside, no
// TF32), kTf32 is CUBLAS_COMPUTE_32F_FAST_TF32.
//
// Ownership and threads: a CublasBatchedGemm owns one cuBLAS handle made on the
// device current at create(); not thread-safe (one user at a time; the caller
// serialises), every call with that device current. The caller owns the
// workspace (grouped_workspace_bytes): the device arrays of pointers cuBLAS reads.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/gemm_types.h"
#include "common/status.h"

namespace sgemm {

enum class BatchedArithmetic { kFp32, kTf32 };

// One product of a group, its operands in device memory, dense row-major as
// stored (A m x k, or k x m under op_a = kT; B k x n, or n x k; C m x n).
struct BatchedProduct {
  GemmShape shape;
  const float* a = nullptr;
  const float* b = nullptr;
  float* c = nullptr;
};

struct StridedBatchArgs {
  GemmShape shape;  // every product's
  int64_t count = 0;
  // The first product's operands; product i's start i * (its element count) further.
  const float* a = nullptr;
  const float* b = nullptr;
  float* c = nullptr;
  float alpha = 1.0f, beta = 0.0f;  // beta 0: C is not read
  Op op_a = Op::kN, op_b = Op::kN;
  BatchedArithmetic arithmetic = BatchedArithmetic::kFp32;
};

class CublasBatchedGemm {
 public:
  static StatusOr<std::unique_ptr<CublasBatchedGemm>> create();
  ~CublasBatchedGemm();
  CublasBatchedGemm(const CublasBatchedGemm&) = delete;
  CublasBatchedGemm& operator=(const CublasBatchedGemm&) = delete;

  // Pure: INVALID_ARGUMENT naming the field when cuBLAS's int arguments cannot
  // hold a dimension, a stride or the count.
  static Status can_implement_strided(const GemmShape& shape, int64_t count);
  static Status can_implement_group(const std::vector<GemmShape>& shapes);

  // One launch of args.count products, enqueued on `stream`.
  Status strided(const StridedBatchArgs& args, cudaStream_t stream);

  // Device bytes grouped() needs for `count` products (the A, B and C pointer arrays).
  static std::size_t grouped_workspace_bytes(std::size_t count);
  // One launch of every product of `products`, enqueued on `stream`;
  // `workspace` holds grouped_workspace_bytes(products.size()) on this device
  // and must stay valid until the launch has run. The pointer arrays are copied
  // from host memory here, so they cost one pageable copy (the call returns once
  // cuBLAS has the host arrays it reads).
  Status grouped(const std::vector<BatchedProduct>& products, float alpha, float beta, Op op_a, Op op_b,
                 BatchedArithmetic arithmetic, void* workspace, cudaStream_t stream);

 private:
  explicit CublasBatchedGemm(void* handle) : handle_(handle) {}
  void* handle_;  // cublasHandle_t, owned
};

}  // namespace sgemm
