// fp64 reference for checking SGEMM results, used by tests, benchmarks and
// `sgemm-client --verify`. Row-major, dense.
//
// The error measure is per element, normalised by the size of the terms that
// were summed:  |c - ref| / (|alpha| * sum_k |a_ik * b_kj| + |beta * c0_ij|).
// That is the quantity fp32 rounding bounds (about sqrt(k) * 2^-24 for random
// data), so one tolerance fits every shape, and it stays meaningful where the
// reference itself is near zero. NaN and Inf in the reference must be matched
// exactly (NaN by NaN, Inf by the same Inf).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace sgemm {

// Fills `v` with uniform values in [-1, 1) from a generator seeded with `seed`.
void fill_random(std::vector<float>& v, uint64_t seed);
void fill_random(float* data, int64_t count, uint64_t seed);

struct VerifyResult {
  double max_rel_error = 0;          // the largest normalised error seen
  int64_t checked = 0;               // elements compared
  int64_t mismatched_nonfinite = 0;  // NaN/Inf where the reference has none, or the reverse
  int64_t worst_row = -1, worst_col = -1;
  bool passed(double tolerance) const { return mismatched_nonfinite == 0 && max_rel_error <= tolerance; }
};

// Default tolerance for fp32 SGEMM against the fp64 reference under the
// normalised measure above.
constexpr double kSgemmTolerance = 1e-4;

// Compares rows `rows` of `c` (m x n result) against the fp64 reference
// alpha*A*B + beta*C0 (`c0` may be null: no C input). `rows` empty: every row.
VerifyResult verify_gemm(int64_t m, int64_t n, int64_t k, float alpha, const float* a, const float* b, float beta,
                         const float* c0, const float* c, const std::vector<int64_t>& rows = {});

// Rows to check for a large result: all rows when m * n * k is small enough to
// check cheaply, else `sample` distinct rows (first, last and random ones).
std::vector<int64_t> rows_to_verify(int64_t m, int64_t n, int64_t k, uint64_t seed, int64_t sample = 64);

}  // namespace sgemm
