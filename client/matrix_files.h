// Matrices in files, for `sgemm-client submit --a FILE --b FILE [--c FILE] --out FILE`.
//
// Two formats:
//   - NumPy .npy (versions 1.0, 2.0, 3.0), 2-D, dtype little-endian float32
//     ('<f4') or float64 ('<f8', converted to float32 on read), C or Fortran
//     order. Fortran order is transposed into row-major on read, except for
//     the operands of a product (read_gemm_inputs), which keep the file's
//     column-major values as they are and are sent as the transpose of their
//     row-major view (op = t, GemmHeader.op_a): no transposing copy. Detected
//     by the file's magic bytes, whatever its name.
//   - raw: row-major little-endian fp32 with no header; the caller names its
//     shape (the CLI's --m/--n/--k), and the file must hold exactly that many bytes.
// Written files are .npy 1.0 ('<f4', C order) when the path ends in ".npy", raw otherwise.
//
// Pure functions over bytes and files; no gRPC, no global state. Errors name
// the file: INVALID_ARGUMENT for bad content, FAILED_PRECONDITION when a file
// cannot be opened, read or written.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/gemm_types.h"
#include "common/status.h"

namespace sgemm {

struct MatrixData {
  int64_t rows = 0, cols = 0;
  // rows x cols row-major; when `transposed`, the cols x rows row-major
  // transpose instead (a Fortran-order .npy's values as the file holds them).
  std::vector<float> values;
  bool transposed = false;
};

enum class MatrixFileFormat { kNpy, kRaw };

// kNpy when `path` ends in ".npy", else kRaw.
MatrixFileFormat matrix_format_for_path(std::string_view path);

// True when `bytes` start with the .npy magic ("\x93NUMPY").
bool looks_like_npy(std::string_view bytes);

// Parses a whole .npy file held in memory. `name` only labels errors.
// `keep_fortran`: a Fortran-order file's values stay column-major
// (MatrixData::transposed) instead of being transposed into row-major.
StatusOr<MatrixData> parse_npy(std::string_view bytes, std::string_view name = "npy", bool keep_fortran = false);

// A .npy 1.0 file ('<f4', C order) holding `values` (rows x cols, row-major).
std::string encode_npy(const float* values, int64_t rows, int64_t cols);

// Reads `path`: .npy when it has the magic, else raw fp32 of `raw_shape`
// (rows, cols); a raw file without a shape is an error that says so.
StatusOr<MatrixData> read_matrix_file(const std::string& path,
                                      std::optional<std::pair<int64_t, int64_t>> raw_shape = std::nullopt);

// Writes rows x cols row-major values to `path` in `format` (replacing the file).
Status write_matrix_file(const std::string& path, const float* values, int64_t rows, int64_t cols,
                         MatrixFileFormat format);

// The inputs of one product C = op(A) op(B) (+ C): A is the file's matrix,
// m x k (k x m when op_a is kT: the product uses its transpose), B k x n (n x k
// under op_b = kT) and, when `c_path` is not empty, C (m x n). The shape comes
// from the .npy files and from `m`, `n`, `k` (0 = not given); raw files need
// the dimensions they span given or implied by a .npy file, and every source
// must agree, else INVALID_ARGUMENT naming the file and the dimension.
// A Fortran-order A or B is kept as the file holds it: its values are the
// row-major transpose, so the op to send flips (GemmInputs::op_a / op_b).
struct GemmInputs {
  GemmShape shape;
  MatrixData a, b;  // a.values / b.values: A and B as stored for op_a / op_b below
  std::optional<MatrixData> c;
  Op op_a = Op::kN;  // what to send: the requested op, flipped for a Fortran-order file
  Op op_b = Op::kN;
};
StatusOr<GemmInputs> read_gemm_inputs(const std::string& a_path, const std::string& b_path, const std::string& c_path,
                                      int64_t m = 0, int64_t n = 0, int64_t k = 0, Op op_a = Op::kN, Op op_b = Op::kN);

}  // namespace sgemm
