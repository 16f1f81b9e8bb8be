// client/matrix_files: .npy and raw fp32 round trips, NumPy's header variants,
// and errors that name the file and what is wrong.
#include "client/matrix_files.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>

namespace sgemm {
namespace {

std::string npy_with_header(const std::string& dict, const std::string& payload, int major = 1) {
  std::string h = dict;
  const std::size_t pre = major == 1 ? 10 : 12;
  h.append((64 - (pre + h.size() + 1) % 64) % 64, ' ');
  h.push_back('\n');
  std::string out = "\x93NUMPY";
  out.push_back(char(major));
  out.push_back('\0');
  const std::size_t len = h.size();
  for (std::size_t i = 0; i < (major == 1 ? 2u : 4u); ++i) out.push_back(char((len >> (8 * i)) & 0xff));
  return out + h + payload;
}

template <typename T>
std::string bytes_of(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

class MatrixFilesOnDisk : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("sgemm-matrix-files-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  void write(const std::string& name, const std::string& bytes) const {
    std::ofstream(path(name), std::ios::binary) << bytes;
  }
  std::filesystem::path dir_;
};

TEST(MatrixFiles, EncodeThenParseRoundTrips) {
  std::vector<float> v(3 * 5);
  std::iota(v.begin(), v.end(), -7.5f);
  const std::string bytes = encode_npy(v.data(), 3, 5);
  EXPECT_TRUE(looks_like_npy(bytes));
  EXPECT_EQ((bytes.size() - v.size() * 4) % 64, 0u) << "NumPy aligns the data to 64 bytes";
  auto m = parse_npy(bytes);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->rows, 3);
  EXPECT_EQ(m->cols, 5);
  EXPECT_EQ(m->values, v);
}

TEST(MatrixFiles, ParsesFloat64AndFortranOrderAndVersion2) {
  // [[1, 2, 3], [4, 5, 6]] stored column by column, as float64, in a 2.0 file.
  const std::vector<double> fortran = {1, 4, 2, 5, 3, 6};
  auto m =
      parse_npy(npy_with_header("{'descr': '<f8', 'fortran_order': True, 'shape': (2, 3), }", bytes_of(fortran), 2));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->rows, 2);
  EXPECT_EQ(m->cols, 3);
  EXPECT_EQ(m->values, (std::vector<float>{1, 2, 3, 4, 5, 6}));
}

TEST(MatrixFiles, RejectsWhatItCannotMultiplyNamingTheProblem) {
  const std::vector<float> six(6, 1.0f);
  struct Case {
    std::string dict, payload, expect;
  } cases[] = {
      {"{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }", bytes_of(six), "dtype '<i4'"},
      {"{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }", bytes_of(six), "dtype '>f4'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (6,), }", bytes_of(six), "not a matrix"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3, 1), }", bytes_of(six), "not a matrix"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (0, 3), }", "", "empty dimension"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (3, 3), }", bytes_of(six), "needs 36 data bytes"},
      {"{'descr': '<f4', 'shape': (2, 3), }", bytes_of(six), "lacks"},
  };
  for (const auto& c : cases) {
    auto m = parse_npy(npy_with_header(c.dict, c.payload), "x.npy");
    ASSERT_FALSE(m.ok()) << c.dict;
    EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(m.status().message().find("x.npy"), std::string::npos) << m.status().message();
    EXPECT_NE(m.status().message().find(c.expect), std::string::npos) << m.status().message();
  }
  EXPECT_FALSE(parse_npy("\x93NUMPY\x01").ok());
  EXPECT_FALSE(parse_npy("plain text").ok());
}

TEST(MatrixFiles, FormatFollowsTheFileName) {
  EXPECT_EQ(matrix_format_for_path("out.npy"), MatrixFileFormat::kNpy);
  EXPECT_EQ(matrix_format_for_path("out.f32"), MatrixFileFormat::kRaw);
  EXPECT_EQ(matrix_format_for_path("npy"), MatrixFileFormat::kRaw);
}

TEST_F(MatrixFilesOnDisk, WritesAndReadsBothFormats) {
  std::vector<float> v(4 * 2);
  std::iota(v.begin(), v.end(), 0.25f);
  ASSERT_TRUE(write_matrix_file(path("m.npy"), v.data(), 4, 2, MatrixFileFormat::kNpy).ok());
  ASSERT_TRUE(write_matrix_file(path("m.raw"), v.data(), 4, 2, MatrixFileFormat::kRaw).ok());
  EXPECT_EQ(std::filesystem::file_size(path("m.raw")), v.size() * 4);
  auto npy = read_matrix_file(path("m.npy"));
  ASSERT_TRUE(npy.ok()) << npy.status().to_string();
  EXPECT_EQ(npy->values, v);
  auto raw = read_matrix_file(path("m.raw"), std::pair<int64_t, int64_t>{4, 2});
  ASSERT_TRUE(raw.ok()) << raw.status().to_string();
  EXPECT_EQ(raw->values, v);
  auto no_shape = read_matrix_file(path("m.raw"));
  ASSERT_FALSE(no_shape.ok());
  EXPECT_NE(no_shape.status().message().find("--m"), std::string::npos) << no_shape.status().message();
  auto wrong = read_matrix_file(path("m.raw"), std::pair<int64_t, int64_t>{3, 2});
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("needs 24 bytes, the file has 32"), std::string::npos);
  auto missing = read_matrix_file(path("absent.npy"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_FALSE(write_matrix_file(path("no/such/dir.npy"), v.data(), 4, 2, MatrixFileFormat::kNpy).ok());
}

TEST_F(MatrixFilesOnDisk, GemmInputsTakeTheirShapeFromNpyAndSizeRawFromIt) {
  const std::vector<float> a(3 * 4, 1.0f), b(4 * 5, 2.0f), c(3 * 5, 3.0f);
  write("a.npy", encode_npy(a.data(), 3, 4));
  write("b.raw", bytes_of(b));  // k comes from A, n must be given
  write("c.npy", encode_npy(c.data(), 3, 5));
  auto in = read_gemm_inputs(path("a.npy"), path("b.raw"), path("c.npy"));
  ASSERT_TRUE(in.ok()) << in.status().to_string();  // n comes from C
  EXPECT_EQ(in->shape.m, 3);
  EXPECT_EQ(in->shape.n, 5);
  EXPECT_EQ(in->shape.k, 4);
  EXPECT_EQ(in->b.values, b);
  ASSERT_TRUE(in->c.has_value());
  EXPECT_EQ(in->c->values, c);

  auto no_n = read_gemm_inputs(path("a.npy"), path("b.raw"), "");
  ASSERT_FALSE(no_n.ok());
  EXPECT_NE(no_n.status().message().find("give --n"), std::string::npos) << no_n.status().message();
  auto with_n = read_gemm_inputs(path("a.npy"), path("b.raw"), "", 0, 5, 0);
  ASSERT_TRUE(with_n.ok()) << with_n.status().to_string();
  EXPECT_FALSE(with_n->c.has_value());

  write("b_bad.npy", encode_npy(b.data(), 5, 4));  // 5 rows, but k = 4
  auto mismatch = read_gemm_inputs(path("a.npy"), path("b_bad.npy"), "");
  ASSERT_FALSE(mismatch.ok());
  EXPECT_EQ(mismatch.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(mismatch.status().message().find("b_bad.npy"), std::string::npos) << mismatch.status().message();
  EXPECT_NE(mismatch.status().message().find("k is 4"), std::string::npos) << mismatch.status().message();
}

// Stored operands under op = t, and a Fortran-order A or B kept as the file
// holds it (no transposing copy) with its op flipped; C is still read row-major.
TEST_F(MatrixFilesOnDisk, TransposedOperandsAndFortranOrderKeepTheFilesValues) {
  // [[1, 2, 3], [4, 5, 6]] in Fortran order: the file holds 1 4 2 5 3 6.
  const std::vector<float> fortran = {1, 4, 2, 5, 3, 6};
  write("a_f.npy", npy_with_header("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", bytes_of(fortran)));
  const std::vector<float> b(3 * 4, 1.0f);
  write("b.npy", encode_npy(b.data(), 3, 4));
  // A is 2 x 3 (m = 2, k = 3): sent as its row-major 3 x 2 transpose with op_a = t.
  auto in = read_gemm_inputs(path("a_f.npy"), path("b.npy"), "");
  ASSERT_TRUE(in.ok()) << in.status().to_string();
  EXPECT_EQ(in->shape, (GemmShape{2, 4, 3}));
  EXPECT_TRUE(in->a.transposed);
  EXPECT_EQ(in->a.values, fortran);
  EXPECT_EQ(in->op_a, Op::kT);
  EXPECT_EQ(in->op_b, Op::kN);
  // --op-a t on the same file: op(A) = the file's matrix transposed, 3 x 2; the
  // file's column-major values are then op(A) row-major: sent with op_a = n.
  const std::vector<float> b2(2 * 4, 1.0f);
  write("b2.npy", encode_npy(b2.data(), 2, 4));
  auto flipped = read_gemm_inputs(path("a_f.npy"), path("b2.npy"), "", 0, 0, 0, Op::kT, Op::kN);
  ASSERT_TRUE(flipped.ok()) << flipped.status().to_string();
  EXPECT_EQ(flipped->shape, (GemmShape{3, 4, 2}));
  EXPECT_EQ(flipped->op_a, Op::kN);
  // op_b = t: B stored n x k, so a 4 x 3 B file gives n = 4, k = 3.
  const std::vector<float> bt(4 * 3, 1.0f);
  write("bt.npy", encode_npy(bt.data(), 4, 3));
  auto bt_in = read_gemm_inputs(path("a_f.npy"), path("bt.npy"), "", 0, 0, 0, Op::kN, Op::kT);
  ASSERT_TRUE(bt_in.ok()) << bt_in.status().to_string();
  EXPECT_EQ(bt_in->shape, (GemmShape{2, 4, 3}));
  EXPECT_EQ(bt_in->op_b, Op::kT);
  // A file whose stored shape disagrees under op_b = t names the dimension.
  auto bad = read_gemm_inputs(path("a_f.npy"), path("b.npy"), "", 0, 0, 0, Op::kN, Op::kT);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("b.npy"), std::string::npos) << bad.status().message();
}

}  // namespace
}  // namespace sgemm
