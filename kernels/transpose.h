// Out-of-place transpose of a row-major fp32 matrix on the device. The CUDA
// engine turns a transposed operand (GemmHeader op_a / op_b = t) into the
// N,N row-major layout every GEMM kernel takes, block by block as it copies
// the operand in, so each kernel keeps its accuracy contract unchanged.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace sgemm {

// dst (cols x rows, leading dimension ldd >= rows) = src^T, where src is rows
// x cols with leading dimension lds >= cols; both on the current device, not
// overlapping. Tiles of 32 x 32 through shared memory, so reads and writes
// are both coalesced; any rows, cols >= 0 (nothing is launched for an empty
// matrix). Returns the launch's error (cudaGetLastError()).
cudaError_t launch_transpose(const float* src, int64_t rows, int64_t cols, int64_t lds, float* dst, int64_t ldd,
                             cudaStream_t stream);

}  // namespace sgemm
