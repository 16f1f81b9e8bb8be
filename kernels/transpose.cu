#include <algorithm>

#include "kernels/transpose.h"

namespace sgemm {
namespace {

constexpr int kTile = 32;        // a tile is kTile x kTile elements
constexpr int kRowsPerPass = 8;  // a block of kTile x kRowsPerPass threads moves a tile in kTile / kRowsPerPass passes
constexpr int64_t kMaxGridY = 65535;
static_assert(kTile % kRowsPerPass == 0, "a tile's rows must split evenly over the block's thread rows");

// Block (x, y) moves tile rows r0.. (stepping over the grid's y extent, which
// is capped at 65535) and columns c0 = x * kTile.. of src. The +1 column of
// the shared tile keeps the transposed reads free of bank conflicts.
__global__ void transpose_kernel(const float* __restrict__ src, int64_t rows, int64_t cols, int64_t lds,
                                 float* __restrict__ dst, int64_t ldd) {
  __shared__ float tile[kTile][kTile + 1];
  const int64_t c0 = int64_t(blockIdx.x) * kTile;
  for (int64_t r0 = int64_t(blockIdx.y) * kTile; r0 < rows; r0 += int64_t(gridDim.y) * kTile) {
    for (int i = int(threadIdx.y); i < kTile; i += kRowsPerPass) {
      const int64_t r = r0 + i, c = c0 + threadIdx.x;
      if (r < rows && c < cols) tile[i][threadIdx.x] = src[r * lds + c];
    }
    __syncthreads();
    // Row c0 + i of dst is column c0 + i of src; its element r0 + x is src[r0 + x][c0 + i] = tile[x][i].
    for (int i = int(threadIdx.y); i < kTile; i += kRowsPerPass) {
      const int64_t dr = c0 + i, dc = r0 + threadIdx.x;
      if (dr < cols && dc < rows) dst[dr * ldd + dc] = tile[threadIdx.x][i];
    }
    __syncthreads();
  }
}

}  // namespace

cudaError_t launch_transpose(const float* src, int64_t rows, int64_t cols, int64_t lds, float* dst, int64_t ldd,
                             cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  if (lds < cols || ldd < rows || !src || !dst) return cudaErrorInvalidValue;
  const dim3 grid(unsigned((cols + kTile - 1) / kTile),
                  unsigned(std::min<int64_t>((rows + kTile - 1) / kTile, kMaxGridY)));
  transpose_kernel<<<grid, dim3(kTile, kRowsPerPass), 0, stream>>>(src, rows, cols, lds, dst, ldd);
  return cudaGetLastError();
}

}  // namespace sgemm
