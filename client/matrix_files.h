// Matrices in files, for `sgemm-client submit --a FILE --b FILE [--c FILE] --out FILE`.
//
// Two formats:
//   - NumPy .npy (versions 1.0, 2.0, 3.0), 2-D, dtype little-endian float32
//     ('<f4') or float64 ('<f8', converted to float32 on read), C or Fortran
//     order (Fortran order is transposed into row-major on read). Detected by
//     the file's magic bytes, whatever its name.
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
  std::vector<float> values;  // rows x cols, row-major
};

enum class MatrixFileFormat { kNpy, kRaw };

// kNpy when `path` ends in ".npy", else kRaw.
MatrixFileFormat matrix_format_for_path(std::string_view path);

// True when `bytes` start with the .npy magic ("\x93NUMPY").
bool looks_like_npy(std::string_view bytes);

// Parses a whole .npy file held in memory. `name` only labels errors.
StatusOr<MatrixData> parse_npy(std::string_view bytes, std::string_view name = "npy");

// A .npy 1.0 file ('<f4', C order) holding `values` (rows x cols, row-major).
std::string encode_npy(const float* values, int64_t rows, int64_t cols);

// Reads `path`: .npy when it has the magic, else raw fp32 of `raw_shape`
// (rows, cols); a raw file without a shape is an error that says so.
StatusOr<MatrixData> read_matrix_file(const std::string& path,
                                      std::optional<std::pair<int64_t, int64_t>> raw_shape = std::nullopt);

// Writes rows x cols row-major values to `path` in `format` (replacing the file).
Status write_matrix_file(const std::string& path, const float* values, int64_t rows, int64_t cols,
                         MatrixFileFormat format);

// The inputs of one product: A (m x k), B (k x n) and, when `c_path` is not
// empty, C (m x n). The shape comes from the .npy files and from `m`, `n`, `k`
// (0 = not given); raw files need the dimensions they span given or implied by
// a .npy file, and every source must agree, else INVALID_ARGUMENT naming the
// file and the dimension.
struct GemmInputs {
  GemmShape shape;
  MatrixData a, b;
  std::optional<MatrixData> c;
};
StatusOr<GemmInputs> read_gemm_inputs(const std::string& a_path, const std::string& b_path, const std::string& c_path,
                                      int64_t m = 0, int64_t n = 0, int64_t k = 0);

}  // namespace sgemm
