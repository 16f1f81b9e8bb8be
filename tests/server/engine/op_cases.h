// Transposed operands and submatrices on any engine: every combination of
// op(A), op(B) in {n, t}, three layouts (dense host matrices, host matrices
// with leading dimensions wider than the stored width, resident submatrices
// of larger matrices) and alpha/beta/C, against the fp64 reference computed
// on the logical op(A), op(B). The CPU suite and the CUDA suites run the same
// cases (only the engine and the split differ).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "common/reference_gemm.h"
#include "server/engine/engine.h"
#include "tests/server/engine/resident_test_util.h"

namespace sgemm::testing {

enum class OperandLayout { kDense, kStrided, kResidentBlock };

inline const char* layout_name(OperandLayout l) {
  switch (l) {
    case OperandLayout::kDense:
      return "dense";
    case OperandLayout::kStrided:
      return "strided";
    case OperandLayout::kResidentBlock:
      return "resident-block";
  }
  return "?";
}

// The stored form of a logical rows x cols matrix `x` under `op` (its
// transpose under kT), written at (row0, col0) of a `total_rows` x `ld`
// row-major buffer whose other elements are NaN (so a read outside the
// operand shows in the result).
inline void store_operand(const std::vector<float>& x, int64_t rows, int64_t cols, Op op, float* buffer,
                          int64_t total_rows, int64_t ld, int64_t row0, int64_t col0) {
  std::fill_n(buffer, total_rows * ld, std::nanf(""));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      const int64_t sr = op == Op::kN ? i : j, sc = op == Op::kN ? j : i;
      buffer[(row0 + sr) * ld + col0 + sc] = x[std::size_t(i * cols + j)];
    }
}

struct OpCase {
  GemmShape shape;
  Op op_a = Op::kN, op_b = Op::kN;
  OperandLayout layout = OperandLayout::kDense;
  float alpha = 1.0f, beta = 0.0f;
  bool has_c = false;
  std::string name() const {
    return gemm_shape_text(shape) + " op_a=" + std::string(op_name(op_a)) + " op_b=" + std::string(op_name(op_b)) +
           " " + layout_name(layout) + " alpha=" + std::to_string(alpha) + " beta=" + std::to_string(beta) +
           (has_c ? " C" : "");
  }
};

// Allocates a buffer of `count` floats from the engine (pinned on CUDA).
inline HostBuffer engine_buffer(Engine& e, int64_t count) {
  auto b = e.host_allocator().allocate(std::size_t(std::max<int64_t>(count, 1)) * sizeof(float));
  EXPECT_TRUE(b.ok()) << b.status().to_string();
  return std::move(b).value();
}

// Runs one case on `engine` (split `split`) and checks C against the fp64
// reference. Returns the report for split-specific checks.
inline StatusOr<GemmReport> run_op_case(Engine& engine, const OpCase& c, SplitMode split, uint64_t seed,
                                        Precision precision = Precision::kFp32) {
  SCOPED_TRACE(c.name() + " split " + std::string(split_mode_name(split)) + " precision " +
               std::string(precision_name(precision)));
  const GemmShape s = c.shape;
  std::vector<float> a(std::size_t(s.m * s.k)), b(std::size_t(s.k * s.n)), c0;
  fill_random(a, seed);
  fill_random(b, seed + 1);
  if (c.has_c) {
    c0.resize(std::size_t(s.m * s.n));
    fill_random(c0, seed + 2);
  }
  GemmJob j;
  j.request.shape = s;
  j.request.alpha = c.alpha;
  j.request.beta = c.beta;
  j.request.has_c = c.has_c;
  j.request.op_a = c.op_a;
  j.request.op_b = c.op_b;
  j.request.options.split = split;
  j.request.options.precision = precision;
  if (Status v = engine.validate(j.request); !v.ok()) return v;
  const MatrixDims ad = j.request.a_dims(), bd = j.request.b_dims();
  // Strided: 3 more columns than the stored width; a resident block sits at
  // (2, 5) of a matrix 4 rows and 7 columns larger than the operand.
  const bool strided = c.layout == OperandLayout::kStrided;
  const bool resident = c.layout == OperandLayout::kResidentBlock;
  const int64_t extra_cols = strided ? 3 : resident ? 7 : 0, extra_rows = resident ? 4 : 0;
  const int64_t r0 = resident ? 2 : 0, c0_col = resident ? 5 : 0;
  HostBuffer ha = engine_buffer(engine, (ad.rows + extra_rows) * (ad.cols + extra_cols));
  HostBuffer hb = engine_buffer(engine, (bd.rows + extra_rows) * (bd.cols + extra_cols));
  store_operand(a, s.m, s.k, c.op_a, ha.floats(), ad.rows + extra_rows, ad.cols + extra_cols, r0, c0_col);
  store_operand(b, s.k, s.n, c.op_b, hb.floats(), bd.rows + extra_rows, bd.cols + extra_cols, r0, c0_col);
  const int64_t ldc = s.n + (strided ? 5 : 0);
  HostBuffer hc = engine_buffer(engine, s.m * ldc);
  std::fill_n(hc.floats(), s.m * ldc, std::nanf(""));
  ResidentStore::Lease la, lb, lc;
  if (resident) {
    la = put_resident(engine, ha.floats(), ad.rows + extra_rows, ad.cols + extra_cols);
    lb = put_resident(engine, hb.floats(), bd.rows + extra_rows, bd.cols + extra_cols);
    if (!la || !lb) return Internal("put_resident failed");
    j.a_resident = la.get();
    j.b_resident = lb.get();
    j.a_at = j.b_at = MatrixOffset{r0, c0_col};
    if (c.has_c) {  // C too: the m x n block at (1, 3) of a larger resident matrix, NaN around it
      std::vector<float> big(std::size_t((s.m + 2) * (s.n + 4)), std::nanf(""));
      for (int64_t i = 0; i < s.m; ++i)
        std::memcpy(&big[std::size_t((i + 1) * (s.n + 4) + 3)], &c0[std::size_t(i * s.n)],
                    std::size_t(s.n) * sizeof(float));
      lc = put_resident(engine, big.data(), s.m + 2, s.n + 4);
      if (!lc) return Internal("put_resident failed");
      j.c_resident = lc.get();
      j.c_at = MatrixOffset{1, 3};
    }
  } else {
    j.a = ha.floats();
    j.b = hb.floats();
    if (strided) {
      j.lda = ad.cols + extra_cols;
      j.ldb = bd.cols + extra_cols;
      j.ldc = ldc;
    }
    if (c.has_c)
      for (int64_t i = 0; i < s.m; ++i)
        std::memcpy(hc.floats() + i * ldc, &c0[std::size_t(i * s.n)], std::size_t(s.n) * sizeof(float));
  }
  j.c = hc.floats();
  StatusOr<GemmReport> r = engine.run(j);
  if (!r.ok()) return r;
  std::vector<float> out(std::size_t(s.m * s.n));
  for (int64_t i = 0; i < s.m; ++i)
    std::memcpy(&out[std::size_t(i * s.n)], hc.floats() + i * ldc, std::size_t(s.n) * sizeof(float));
  const VerifyResult v =
      verify_gemm(s.m, s.n, s.k, c.alpha, a.data(), b.data(), c.beta, c.has_c ? c0.data() : nullptr, out.data());
  EXPECT_TRUE(v.passed(kSgemmTolerance)) << c.name() << ": max rel error " << v.max_rel_error << " at (" << v.worst_row
                                         << ", " << v.worst_col << "), nonfinite mismatches " << v.mismatched_nonfinite;
  if (strided)  // the columns between n and ldc are never written
    for (int64_t i = 0; i < s.m; ++i)
      for (int64_t jj = s.n; jj < ldc; ++jj)
        if (!std::isnan(hc.floats()[i * ldc + jj])) {
          ADD_FAILURE() << c.name() << ": C's padding at (" << i << ", " << jj << ") was written";
          return r;
        }
  return r;
}

// Every op x op x layout x (alpha, beta, C) combination over `shapes`.
inline std::vector<OpCase> all_op_cases(const std::vector<GemmShape>& shapes) {
  std::vector<OpCase> out;
  struct Scalars {
    float alpha, beta;
    bool has_c;
  };
  const Scalars scalars[] = {{1.0f, 0.0f, false}, {-1.5f, 0.75f, true}, {0.5f, 0.0f, true}};
  for (const GemmShape& s : shapes)
    for (Op op_a : {Op::kN, Op::kT})
      for (Op op_b : {Op::kN, Op::kT})
        for (OperandLayout l : {OperandLayout::kDense, OperandLayout::kStrided, OperandLayout::kResidentBlock})
          for (const Scalars& sc : scalars) out.push_back(OpCase{s, op_a, op_b, l, sc.alpha, sc.beta, sc.has_c});
  return out;
}

// Odd shapes, a single row, a single column, K = 1, and a round one.
inline std::vector<GemmShape> op_test_shapes() {
  return {GemmShape{37, 53, 29}, GemmShape{1, 67, 45}, GemmShape{61, 1, 33}, GemmShape{19, 23, 1},
          GemmShape{64, 128, 96}};
}

}  // namespace sgemm::testing
