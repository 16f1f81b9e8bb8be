// The device transpose the CUDA engine applies to transposed operands
// (kernels/transpose.h), on the GPU (label gpu; skips visibly without one):
// every element lands in its mirrored place, exactly (it only moves bits), for
// shapes around the 32 x 32 tile, single rows and columns, leading dimensions
// wider than the matrices, and more tile rows than the grid's y extent holds.
#include "kernels/transpose.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "tests/common/gpu_test.h"

namespace sgemm {
namespace {

struct Case {
  int64_t rows, cols, lds_pad, ldd_pad;
};

void check(const Case& c) {
  SCOPED_TRACE(std::to_string(c.rows) + " x " + std::to_string(c.cols) + " pads " + std::to_string(c.lds_pad) + "/" +
               std::to_string(c.ldd_pad));
  const int64_t lds = c.cols + c.lds_pad, ldd = c.rows + c.ldd_pad;
  std::vector<float> src(std::size_t(c.rows * lds)), dst(std::size_t(c.cols * ldd), std::nanf(""));
  for (int64_t i = 0; i < c.rows; ++i)
    for (int64_t j = 0; j < lds; ++j) src[std::size_t(i * lds + j)] = j < c.cols ? float(i * 100003 + j) : -1.0f;
  float *d_src = nullptr, *d_dst = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d_src), src.size() * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d_dst), dst.size() * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_src, src.data(), src.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_dst, dst.data(), dst.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(launch_transpose(d_src, c.rows, c.cols, lds, d_dst, ldd, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dst.data(), d_dst, dst.size() * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(d_src);
  cudaFree(d_dst);
  for (int64_t r = 0; r < c.cols; ++r)
    for (int64_t q = 0; q < ldd; ++q) {
      const float got = dst[std::size_t(r * ldd + q)];
      if (q < c.rows) {
        ASSERT_EQ(got, float(q * 100003 + r)) << "dst(" << r << ", " << q << ")";
      } else {
        ASSERT_TRUE(std::isnan(got)) << "padding dst(" << r << ", " << q << ") was written";
      }
    }
}

TEST(TransposeGpu, EveryElementLandsMirroredAndPaddingIsUntouched) {
  SGEMM_REQUIRE_GPUS(1);
  for (const Case& c : {Case{1, 1, 0, 0}, Case{1, 77, 3, 0}, Case{77, 1, 0, 5}, Case{31, 33, 0, 0}, Case{32, 32, 0, 0},
                        Case{33, 65, 7, 2}, Case{129, 257, 4, 4}, Case{1000, 37, 1, 3}})
    check(c);
}

TEST(TransposeGpu, MoreTileRowsThanTheGridHolds) {
  SGEMM_REQUIRE_GPUS(1);
  check(Case{65535 * 32 + 70, 3, 0, 1});  // the y extent is capped at 65535 blocks: blocks loop over tile rows
}

TEST(TransposeGpu, RefusesLeadingDimensionsNarrowerThanTheMatrix) {
  SGEMM_REQUIRE_GPUS(1);
  float* p = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&p), 64 * sizeof(float)), cudaSuccess);
  EXPECT_EQ(launch_transpose(p, 4, 8, 7, p + 32, 4, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(launch_transpose(p, 4, 8, 8, p + 32, 3, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(launch_transpose(p, 0, 8, 8, p + 32, 3, nullptr), cudaSuccess);  // empty: nothing to do
  cudaFree(p);
}

}  // namespace
}  // namespace sgemm
