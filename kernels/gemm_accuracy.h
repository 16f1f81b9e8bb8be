// The fp32 contract's yardstick: the componentwise error of a device SGEMM
// result against an fp64 product of the same fp32 inputs,
//   cw = max_ij |c_ij - ref_ij| / (|A||B|)_ij,
// the scale of the classical GEMM error bound. ref and |A||B| are computed on
// the device by cuBLAS DGEMM (IEEE fp64), so the measure costs two fp64
// products, not a CPU reference. Used by the contract tests and sgemm-bench.
//
// Ownership: a GemmAccuracyProbe holds one cuBLAS handle and the fp64 copies of
// one input pair; not thread-safe. Call with its device current.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"
#include "kernels/gemm_args.h"

namespace sgemm {

// Input distributions of the accuracy tests (host, fp32, row-major, seeded).
enum class InputDistribution {
  kUniform,       // U(-1, 1)
  kWideExponent,  // (U - 0.5) * exp(4 N(0,1)): magnitudes over about 14 decades
  kCancelling,    // A = [X X], B = [Y; -Y]: every exact product is 0
};
const char* input_distribution_name(InputDistribution d);
// Fills A (m x k) and B (k x n) with `d` (kCancelling needs an even k).
void fill_inputs(InputDistribution d, int64_t m, int64_t n, int64_t k, uint64_t seed, std::vector<float>& a,
                 std::vector<float>& b);

class GemmAccuracyProbe {
 public:
  // Keeps fp64 copies of A (m x k) and B (k x n), dense row-major host arrays,
  // on the current device and computes ref = A*B and |A||B| there.
  static StatusOr<std::unique_ptr<GemmAccuracyProbe>> create(const GemmShape& shape, const float* a_host,
                                                             const float* b_host);
  ~GemmAccuracyProbe();
  GemmAccuracyProbe(const GemmAccuracyProbe&) = delete;
  GemmAccuracyProbe& operator=(const GemmAccuracyProbe&) = delete;

  // cw of `c_host` (m x n dense, C = A*B with alpha 1, beta 0). Elements whose
  // |A||B| is 0 must be exactly 0; a non-finite element gives +infinity.
  double componentwise_error(const float* c_host) const;

 private:
  GemmAccuracyProbe() = default;
  GemmShape shape_;
  std::vector<double> ref_, mag_;  // host copies of A*B and |A||B|
};

}  // namespace sgemm
