// Tensor-map helpers (kernels/tensor_map.h).
#include "kernels/tensor_map.h"

#include <cuda_runtime_api.h>

#include <mutex>
#include <string>

namespace sgemm {

StatusOr<PFN_cuTensorMapEncodeTiled_v12000> tensor_map_encode_fn() {
  static std::once_flag once;
  static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
  static cudaError_t err = cudaSuccess;
  std::call_once(once, [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    err = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q);
    if (err == cudaSuccess && q == cudaDriverEntryPointSuccess)
      fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  });
  if (fn == nullptr) {
    (void)cudaGetLastError();
    return Unavailable(std::string("cuTensorMapEncodeTiled: driver entry point not found (") + cudaGetErrorName(err) +
                       ")");
  }
  return fn;
}

Status make_tensor_map_2d(CUtensorMap* map, const float* base, int64_t rows, int64_t cols, int64_t ld, int box_rows,
                          int box_cols, CUtensorMapSwizzle swizzle, const char* what) {
  SGEMM_ASSIGN_OR_RETURN(auto encode, tensor_map_encode_fn());
  const cuuint64_t dims[2] = {cuuint64_t(cols), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(ld * 4)};
  const cuuint32_t box[2] = {cuuint32_t(box_cols), cuuint32_t(box_rows)};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, const_cast<float*>(base), dims, strides, box,
                            elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    return Internal(std::string("cuTensorMapEncodeTiled (") + what + ") failed with CUresult " +
                    std::to_string(int(r)) + " (" + std::to_string(rows) + " x " + std::to_string(cols) + ", ld " +
                    std::to_string(ld) + ")");
  return Status::Ok();
}

}  // namespace sgemm
