// cuBLAS's batched launches for many row-major products at once
// (server/engine/batch.h): a strided batch (one shape, operands at a fixed
// stride: cublasGemmStridedBatchedEx; A or B may be one matrix every product
// reads, stride 0, with a leading dimension of its own) and a group (each product its own shape:
// cublasSgemmGroupedBatched in fp32, cublasGemmGroupedBatchedEx with the TF32
// compute type; cuBLAS >= 12.5; products of one shape share a group). Row-major through the column-major trick of
// cublas_sgemm.cc: C^T = op(B)^T op(A)^T, so cuBLAS is asked for the (n, m, k) product of B and A, each with its stored
// width as leading dimension and transposed as stored.
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
#include <optional>
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
  // The first product's operands; product i's start i * (its element count)
  // further, unless a stride below says otherwise. C is always dense.
  const float* a = nullptr;
  const float* b = nullptr;
  float* c = nullptr;
  // Leading dimensions of the stored A and B in elements; 0: dense (the
  // stored width, k or m for A, n or k for B). At least the width.
  int64_t lda = 0, ldb = 0;
  // Elements from one product's A (B) to the next's; nullopt: one stored
  // matrix after another (its rows times its leading dimension). 0: every
  // product reads the same matrix (a matrix shared by the batch).
  std::optional<int64_t> stride_a, stride_b;
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

  // Pure (reads no operand): INVALID_ARGUMENT naming the field when cuBLAS's
  // int arguments cannot hold a dimension, a leading dimension or the count,
  // or a leading dimension is under its operand's width or a stride negative.
  static Status can_implement_strided(const StridedBatchArgs& args);
  static Status can_implement_group(const std::vector<GemmShape>& shapes);

  // One launch of args.count products, enqueued on `stream`.
  Status strided(const StridedBatchArgs& args, cudaStream_t stream);

  // Device bytes a group of `count` products needs (the A, B and C pointer arrays).
  static std::size_t grouped_workspace_bytes(std::size_t count);

  // A group's launch in two steps. stage_group() forms cuBLAS's groups
  // (products of one shape share one) and copies the device pointer arrays
  // into `workspace` (grouped_workspace_bytes(products.size()) on this
  // device, valid until the launch has run) on `stream`; that copy is from
  // pageable memory, so it first waits for the stream's earlier work: stage
  // before queuing the operands' copies. grouped() then enqueues the one
  // launch on the same stream, after whatever was queued between.
  struct GroupLaunch {
    std::size_t count = 0;  // products
    Op op_a = Op::kN, op_b = Op::kN;
    std::vector<int> m, n, k, lda, ldb, ldc, size;  // per group, as cuBLAS is asked (C^T = op(B)^T op(A)^T)
    const void* const* pointers = nullptr;          // device: B's, then A's, then C's, group by group
    std::vector<const void*> host_pointers;         // the same, on the host
  };
  static StatusOr<GroupLaunch> stage_group(const std::vector<BatchedProduct>& products, Op op_a, Op op_b,
                                           void* workspace, cudaStream_t stream);
  Status grouped(const GroupLaunch& group, float alpha, float beta, BatchedArithmetic arithmetic, cudaStream_t stream);

 private:
  explicit CublasBatchedGemm(void* handle) : handle_(handle) {}
  void* handle_;  // cublasHandle_t, owned
};

}  // namespace sgemm
