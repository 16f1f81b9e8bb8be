// The batched rows of the kernel choice (kernel_choice.h, "Batched and grouped
// products"): cuBLAS's strided-batched and grouped launches in the two
// arithmetics a batch may ask for.
#include <algorithm>
#include <string>

#include "server/planner/kernel_choice.h"

namespace sgemm {
namespace {

constexpr BatchKernelRow kBatchRows[] = {
    {"cublas_sgemm_strided_batched", BatchLaunch::kStridedBatched, ArithmeticClass::kFfma, KernelKind::kCublas},
    {"cublas_sgemm_grouped", BatchLaunch::kGrouped, ArithmeticClass::kFfma, KernelKind::kCublas},
    {"cublas_tf32_strided_batched", BatchLaunch::kStridedBatched, ArithmeticClass::kTf32, KernelKind::kTf32},
    // A TF32 group runs one cublasGemmEx per product (kernels/cublas_batched_sgemm.cc says why).
    {"cublas_tf32_per_product", BatchLaunch::kGrouped, ArithmeticClass::kTf32, KernelKind::kTf32},
};

bool has(const std::vector<KernelKind>& v, KernelKind k) { return std::find(v.begin(), v.end(), k) != v.end(); }

}  // namespace

std::span<const BatchKernelRow> batch_kernel_table() { return kBatchRows; }

StatusOr<BatchKernelSelection> select_batch_kernel(const BatchKernelQuery& q) {
  const std::string precision(precision_name(q.precision));
  ArithmeticClass arithmetic = ArithmeticClass::kFfma;
  std::string reason;
  switch (q.precision) {
    case Precision::kFp32x3:
      return FailedPrecondition(
          "precision fp32x3 has no batched kernel (its 3xTF32 kernel runs one product per launch); send the products "
          "as single requests, or ask for fp32 (error no larger than cuBLAS SGEMM's)");
    case Precision::kTf32:
      if (q.named && *q.named != KernelKind::kTf32)
        return InvalidArgument("kernel: '" + std::string(kernel_kind_name(*q.named)) +
                               "' computes fp32 FFMA; precision tf32 runs its own kernel (leave kernel unset)");
      arithmetic = ArithmeticClass::kTf32;
      reason = "; precision tf32: cuBLAS with the TF32 compute type";
      break;
    case Precision::kFp32:
    case Precision::kFp32Ffma:
      if (q.named && *q.named != KernelKind::kCublas)
        return InvalidArgument("kernel: '" + std::string(kernel_kind_name(*q.named)) +
                               "' has no batched launch; a batch runs cuBLAS's batched SGEMM (leave kernel unset or "
                               "name cublas)");
      reason = "; precision " + precision +
               ": cuBLAS SGEMM's arithmetic (CUBLAS_COMPUTE_32F, fp32 FMAs), the fp32 contract's own reference";
      break;
  }
  for (const BatchKernelRow& row : kBatchRows) {
    if (row.launch != q.launch || row.arithmetic != arithmetic) continue;
    if (!has(q.available, row.family))
      return FailedPrecondition("a batch in precision " + precision + " runs " + row.name + ", which needs kernel '" +
                                std::string(kernel_kind_name(row.family)) +
                                "' on these GPUs (available: " + kernel_kind_list(q.available) + ")");
    return BatchKernelSelection{&row, reason};
  }
  return Internal("no batched kernel row for precision " + precision);
}

}  // namespace sgemm
