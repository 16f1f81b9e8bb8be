#include "kernels/gemm_args.h"

#include <string>

namespace sgemm {
namespace {

// "2^31" for INT_MAX, "2^31 - 3" for INT_MAX - 3: the first value out of range.
std::string bound_text(int64_t max) {
  const int64_t below = int64_t{INT_MAX} - max;
  return below == 0 ? std::string("2^31") : "2^31 - " + std::to_string(below);
}

Status check_dim(const char* field, int64_t v, int64_t max) {
  if (v < 1 || v > max)
    return InvalidArgument(std::string(field) + ": must be in [1, " + bound_text(max) + "), got " + std::to_string(v));
  return Status::Ok();
}

Status check_ld(const char* field, int64_t ld, const char* dim, int64_t row, int64_t max) {
  if (ld >= row && ld <= max) return Status::Ok();
  const std::string range = max == INT64_MAX ? std::string(">= ") + dim + " (" + std::to_string(row) + ")"
                                             : std::string("in [") + dim + ", " + bound_text(max) + ")";
  return InvalidArgument(std::string(field) + ": must be " + range + ", got " + std::to_string(ld));
}

}  // namespace

Status check_gemm_shape(const GemmShape& s, GemmArgBounds bounds) {
  SGEMM_RETURN_IF_ERROR(check_dim("shape.m", s.m, INT_MAX));
  SGEMM_RETURN_IF_ERROR(check_dim("shape.n", s.n, INT_MAX));
  return check_dim("shape.k", s.k, bounds.max_k);
}

Status check_gemm_args(const GemmArgs& g, GemmArgBounds bounds) {
  SGEMM_RETURN_IF_ERROR(check_gemm_shape(g.shape, bounds));
  if (g.a == nullptr) return InvalidArgument("a: null pointer");
  if (g.b == nullptr) return InvalidArgument("b: null pointer");
  if (g.c == nullptr) return InvalidArgument("c: null pointer");
  SGEMM_RETURN_IF_ERROR(check_ld("lda", g.lda, "k", g.shape.k, bounds.max_ld));
  SGEMM_RETURN_IF_ERROR(check_ld("ldb", g.ldb, "n", g.shape.n, bounds.max_ld));
  return check_ld("ldc", g.ldc, "n", g.shape.n, bounds.max_ld);
}

}  // namespace sgemm
