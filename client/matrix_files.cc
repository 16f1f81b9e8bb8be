#include "client/matrix_files.h"

#include <bit>
#include <cctype>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>

namespace sgemm {
namespace {

static_assert(std::endian::native == std::endian::little,
              "matrix files are little-endian fp32; a big-endian host would need byte swaps here");

constexpr std::string_view kNpyMagic = "\x93NUMPY";

Status bad(std::string_view name, const std::string& what) { return InvalidArgument(std::string(name) + ": " + what); }

// The value of `key` in a .npy header dict ({'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }),
// as its literal text: a quoted string without quotes, True/False, or a parenthesised tuple.
std::optional<std::string> header_value(std::string_view header, std::string_view key) {
  for (const char quote : {'\'', '"'}) {
    const std::string k = std::string(1, quote) + std::string(key) + std::string(1, quote);
    std::size_t p = header.find(k);
    if (p == std::string_view::npos) continue;
    p = header.find(':', p + k.size());
    if (p == std::string_view::npos) return std::nullopt;
    ++p;
    while (p < header.size() && std::isspace(static_cast<unsigned char>(header[p]))) ++p;
    if (p >= header.size()) return std::nullopt;
    const char c = header[p];
    if (c == '\'' || c == '"') {
      const std::size_t e = header.find(c, p + 1);
      if (e == std::string_view::npos) return std::nullopt;
      return std::string(header.substr(p + 1, e - p - 1));
    }
    if (c == '(') {
      const std::size_t e = header.find(')', p);
      if (e == std::string_view::npos) return std::nullopt;
      return std::string(header.substr(p, e - p + 1));
    }
    std::size_t e = p;
    while (e < header.size() && (std::isalnum(static_cast<unsigned char>(header[e])) || header[e] == '_')) ++e;
    return std::string(header.substr(p, e - p));
  }
  return std::nullopt;
}

// "(3, 4)" -> {3, 4}; "(5,)" -> {5}; "()" -> {}.
std::optional<std::vector<int64_t>> parse_shape(const std::string& tuple) {
  std::vector<int64_t> dims;
  int64_t v = -1;
  for (std::size_t i = 1; i + 1 < tuple.size(); ++i) {
    const char c = tuple[i];
    if (std::isdigit(static_cast<unsigned char>(c))) {
      if (v < 0) v = 0;
      if (v > (std::numeric_limits<int64_t>::max() - 9) / 10) return std::nullopt;
      v = v * 10 + (c - '0');
    } else if (c == ',') {
      if (v < 0) return std::nullopt;
      dims.push_back(v);
      v = -1;
    } else if (c == 'L') {  // Python 2 long suffix, still found in old files
    } else if (!std::isspace(static_cast<unsigned char>(c))) {
      return std::nullopt;
    }
  }
  if (v >= 0) dims.push_back(v);
  return dims;
}

StatusOr<std::string> read_whole_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return FailedPrecondition(path + ": cannot open for reading");
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) return FailedPrecondition(path + ": read error");
  return bytes;
}

// Raw row-major little-endian fp32 of rows x cols; `what` labels the size error ("raw fp32 A").
StatusOr<MatrixData> parse_raw(std::string_view bytes, int64_t rows, int64_t cols, std::string_view name,
                               std::string_view what) {
  if (rows < 1 || cols < 1) return bad(name, "raw shape must be at least 1x1");
  if (rows > std::numeric_limits<int64_t>::max() / cols / int64_t(sizeof(float))) return bad(name, "shape too large");
  const auto want = static_cast<std::size_t>(rows * cols) * sizeof(float);
  if (bytes.size() != want) {
    return bad(name, std::string(what) + " of " + std::to_string(rows) + "x" + std::to_string(cols) + " needs " +
                         std::to_string(want) + " bytes, the file has " + std::to_string(bytes.size()));
  }
  MatrixData m;
  m.rows = rows;
  m.cols = cols;
  m.values.resize(static_cast<std::size_t>(rows * cols));
  std::memcpy(m.values.data(), bytes.data(), want);
  return m;
}

}  // namespace

MatrixFileFormat matrix_format_for_path(std::string_view path) {
  return path.size() >= 4 && path.substr(path.size() - 4) == ".npy" ? MatrixFileFormat::kNpy : MatrixFileFormat::kRaw;
}

bool looks_like_npy(std::string_view bytes) { return bytes.substr(0, kNpyMagic.size()) == kNpyMagic; }

StatusOr<MatrixData> parse_npy(std::string_view bytes, std::string_view name, bool keep_fortran) {
  if (!looks_like_npy(bytes)) return bad(name, "not a .npy file (no \\x93NUMPY magic)");
  if (bytes.size() < 10) return bad(name, "truncated .npy preamble");
  const int major = static_cast<unsigned char>(bytes[6]);
  std::size_t header_len = 0, header_start = 0;
  if (major == 1) {
    header_len = static_cast<unsigned char>(bytes[8]) | (std::size_t(static_cast<unsigned char>(bytes[9])) << 8);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) return bad(name, "truncated .npy preamble");
    for (int i = 0; i < 4; ++i) header_len |= std::size_t(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
    header_start = 12;
  } else {
    return bad(name, ".npy version " + std::to_string(major) + " is not supported (1, 2 or 3)");
  }
  if (bytes.size() < header_start + header_len) return bad(name, "truncated .npy header");
  const std::string_view header = bytes.substr(header_start, header_len);
  const auto descr = header_value(header, "descr");
  const auto fortran = header_value(header, "fortran_order");
  const auto shape_text = header_value(header, "shape");
  if (!descr || !fortran || !shape_text) return bad(name, "the .npy header lacks descr, fortran_order or shape");
  int elem_bytes = 0;
  if (*descr == "<f4") {
    elem_bytes = 4;
  } else if (*descr == "<f8") {
    elem_bytes = 8;
  } else {
    return bad(name, "dtype '" + *descr + "' is not supported: save float32 ('<f4') or float64 ('<f8')");
  }
  if (*fortran != "True" && *fortran != "False") return bad(name, "fortran_order is '" + *fortran + "'");
  const auto dims = parse_shape(*shape_text);
  if (!dims) return bad(name, "cannot parse shape " + *shape_text);
  if (dims->size() != 2) {
    return bad(name, "shape " + *shape_text + " is not a matrix: give a 2-D array (reshape a vector to (n, 1))");
  }
  const int64_t rows = (*dims)[0], cols = (*dims)[1];
  if (rows < 1 || cols < 1) return bad(name, "shape " + *shape_text + " has an empty dimension");
  if (rows > std::numeric_limits<int64_t>::max() / cols / elem_bytes) return bad(name, "shape too large");
  const std::string_view payload = bytes.substr(header_start + header_len);
  const auto want = static_cast<std::size_t>(rows * cols * elem_bytes);
  if (payload.size() != want) {
    return bad(name, "shape " + *shape_text + " needs " + std::to_string(want) + " data bytes, the file has " +
                         std::to_string(payload.size()));
  }
  MatrixData m;
  m.rows = rows;
  m.cols = cols;
  m.values.resize(static_cast<std::size_t>(rows * cols));
  const bool transpose = *fortran == "True" && !keep_fortran;
  m.transposed = *fortran == "True" && keep_fortran;
  for (int64_t i = 0; i < rows * cols; ++i) {
    float v;
    if (elem_bytes == 4) {
      std::memcpy(&v, payload.data() + i * 4, 4);
    } else {
      double d;
      std::memcpy(&d, payload.data() + i * 8, 8);
      v = static_cast<float>(d);
    }
    // Fortran order stores column after column: element i is (i % rows, i / rows).
    const int64_t dst = transpose ? (i % rows) * cols + i / rows : i;
    m.values[static_cast<std::size_t>(dst)] = v;
  }
  return m;
}

std::string encode_npy(const float* values, int64_t rows, int64_t cols) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(rows) + ", " +
                       std::to_string(cols) + "), }";
  // Magic (6) + version (2) + length (2) + header + '\n' is a multiple of 64.
  const std::size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  std::string out(kNpyMagic);
  out.push_back('\x01');
  out.push_back('\x00');
  out.push_back(static_cast<char>(header.size() & 0xff));
  out.push_back(static_cast<char>(header.size() >> 8));
  out += header;
  out.append(reinterpret_cast<const char*>(values), static_cast<std::size_t>(rows * cols) * sizeof(float));
  return out;
}

StatusOr<MatrixData> read_matrix_file(const std::string& path, std::optional<std::pair<int64_t, int64_t>> raw_shape) {
  SGEMM_ASSIGN_OR_RETURN(std::string bytes, read_whole_file(path));
  if (looks_like_npy(bytes)) return parse_npy(bytes, path);
  if (!raw_shape) {
    return bad(path, "not a .npy file; for raw little-endian fp32 give its shape (--m, --n, --k)");
  }
  return parse_raw(bytes, raw_shape->first, raw_shape->second, path, "raw fp32");
}

Status write_matrix_file(const std::string& path, const float* values, int64_t rows, int64_t cols,
                         MatrixFileFormat format) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) return FailedPrecondition(path + ": cannot open for writing");
  if (format == MatrixFileFormat::kNpy) {
    const std::string bytes = encode_npy(values, rows, cols);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  } else {
    f.write(reinterpret_cast<const char*>(values), static_cast<std::streamsize>(rows * cols * sizeof(float)));
  }
  f.close();
  if (!f) return FailedPrecondition(path + ": write error");
  return Status::Ok();
}

StatusOr<GemmInputs> read_gemm_inputs(const std::string& a_path, const std::string& b_path, const std::string& c_path,
                                      int64_t m, int64_t n, int64_t k, Op op_a, Op op_b) {
  struct Source {
    const char* role;  // "A", "B", "C"
    const std::string* path;
    int64_t* rows;  // the shape's dimensions this matrix spans
    int64_t* cols;
    const char* row_dim;
    const char* col_dim;
    std::string bytes;
    std::optional<MatrixData> data;
  };
  int64_t dims[3] = {m, n, k};  // m, n, k; 0 = unknown yet
  // A file holds the stored matrix: under op = t its rows span op(X)'s columns.
  std::vector<Source> sources = {op_a == Op::kN ? Source{"A", &a_path, &dims[0], &dims[2], "m", "k", {}, {}}
                                                : Source{"A", &a_path, &dims[2], &dims[0], "k", "m", {}, {}},
                                 op_b == Op::kN ? Source{"B", &b_path, &dims[2], &dims[1], "k", "n", {}, {}}
                                                : Source{"B", &b_path, &dims[1], &dims[2], "n", "k", {}, {}}};
  if (!c_path.empty()) sources.push_back({"C", &c_path, &dims[0], &dims[1], "m", "n", {}, {}});
  auto agree = [](Source& s, int64_t* dim, const char* dim_name, int64_t got) -> Status {
    if (*dim == 0) {
      *dim = got;
    } else if (*dim != got) {
      return bad(*s.path, std::string(s.role) + " has " + std::to_string(got) + " " +
                              (dim == s.rows ? "rows" : "columns") + " but " + dim_name + " is " +
                              std::to_string(*dim));
    }
    return Status::Ok();
  };
  // .npy files first: they carry their shape, which then sizes the raw ones.
  for (auto& s : sources) {
    SGEMM_ASSIGN_OR_RETURN(s.bytes, read_whole_file(*s.path));
    if (!looks_like_npy(s.bytes)) continue;
    // A and B keep a Fortran-order file's values (sent transposed); C is read row-major.
    const bool operand = s.role[0] != 'C';
    SGEMM_ASSIGN_OR_RETURN(MatrixData d, parse_npy(s.bytes, *s.path, /*keep_fortran=*/operand));
    SGEMM_RETURN_IF_ERROR(agree(s, s.rows, s.row_dim, d.rows));
    SGEMM_RETURN_IF_ERROR(agree(s, s.cols, s.col_dim, d.cols));
    s.data = std::move(d);
    s.bytes.clear();
  }
  for (auto& s : sources) {
    if (s.data) continue;
    if (*s.rows == 0 || *s.cols == 0) {
      return bad(*s.path, std::string("raw fp32 ") + s.role + " needs its shape: give --" +
                              (*s.rows == 0 ? s.row_dim : s.col_dim) + " (or a .npy file that implies it)");
    }
    SGEMM_ASSIGN_OR_RETURN(s.data, parse_raw(s.bytes, *s.rows, *s.cols, *s.path, std::string("raw fp32 ") + s.role));
  }
  GemmInputs in;
  in.shape = {dims[0], dims[1], dims[2]};
  in.a = std::move(*sources[0].data);
  in.b = std::move(*sources[1].data);
  auto flip = [](Op op, bool transposed) { return transposed ? (op == Op::kN ? Op::kT : Op::kN) : op; };
  in.op_a = flip(op_a, in.a.transposed);
  in.op_b = flip(op_b, in.b.transposed);
  if (sources.size() == 3) in.c = std::move(*sources[2].data);
  return in;
}

}  // namespace sgemm
