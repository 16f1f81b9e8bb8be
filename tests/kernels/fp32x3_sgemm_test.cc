// Numerical tests of the fp32x3 (3xTF32 wgmma) SGEMM and of cuBLAS TF32, on the GPU.
// Every case draws fresh random inputs (seed printed on failure) and checks against
// the fp64 reference (common/reference_gemm.h, normalised per-element error): fp32x3's
// largest error must not exceed cuBLAS SGEMM's on the same inputs, except below a
// floor of 16 * 2^-24 (9.5e-7) in the normalised measure: 3xTF32 carries 22-23 bits of
// each operand (hi and lo of 11 bits each, the lo rounding error <= 2^-22 relative, and
// lo*lo dropped), i.e. up to 3 * 2^-22 per product, plus a few fp32 roundings. With
// short K or a wide exponent range (few dominant terms) that bound, not the
// accumulation, decides, and cuBLAS SGEMM (2^-24 per product) can be below it.
// Both errors are printed for every case. Variants without "promote" in their name
// accumulate all of K inside the tensor core (not round-to-nearest) and are held only
// to the fp32 tolerance (kSgemmTolerance).
// Data: uniform [-1, 1), or with a wide exponent range (u * 2^e, e in [-16, 16]).
// Outputs are poisoned with NaN when beta == 0, padding of A and B is NaN (reading it
// fails), padding of C must come back untouched. Also: every variant on edge shapes,
// K up to 65536, bitwise run-to-run identity.
// Without an sm_90 GPU the suite skips visibly.
#include "kernels/fp32x3_sgemm.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/reference_gemm.h"
#include "kernels/gemm_backend.h"
#include "tests/common/gpu_test.h"

namespace sgemm {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr double kErrorFloor = 16.0 / (1 << 24);
constexpr double kTf32Tolerance = 4e-3;

// kInfinities: small integers (exact in TF32, so their lo parts are 0) with a +inf, a -inf
// and a NaN placed in each operand: SGEMM's IEEE propagation is the reference.
// kInfinitiesInA / kInfinitiesInB: small integers, the infinities and the NaN in one operand.
enum class Data { kUniform, kWideExponent, kInfinities, kInfinitiesInA, kInfinitiesInB };

bool small_integers(Data d) { return d == Data::kInfinities || d == Data::kInfinitiesInA || d == Data::kInfinitiesInB; }

struct Case {
  int64_t m, n, k;
  float alpha = 1.0f, beta = 0.0f;
  int64_t lda_pad = 0, ldb_pad = 0, ldc_pad = 0;  // extra floats per row
  int64_t a_off = 0, b_off = 0, c_off = 0;        // pointer offsets in floats
  int variant = -1;                               // -1: the backend's own choice
  Data data = Data::kUniform;
  int64_t slices = 0;  // > 0: K cut into this many slices, not the rule's
};

std::string describe(const Case& c) {
  return std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k) +
         " alpha=" + std::to_string(c.alpha) + " beta=" + std::to_string(c.beta) + " pads=(" +
         std::to_string(c.lda_pad) + "," + std::to_string(c.ldb_pad) + "," + std::to_string(c.ldc_pad) + ") offs=(" +
         std::to_string(c.a_off) + "," + std::to_string(c.b_off) + "," + std::to_string(c.c_off) +
         ") variant=" + (c.variant < 0 ? std::string("auto") : std::string(fp32x3_variant_name(c.variant))) +
         (c.data == Data::kWideExponent ? " wide-exponent" : "") + (c.data == Data::kInfinities ? " infinities" : "") +
         (c.data == Data::kInfinitiesInA ? " infinities-in-a" : "") +
         (c.data == Data::kInfinitiesInB ? " infinities-in-b" : "") +
         (c.slices > 0 ? " slices=" + std::to_string(c.slices) : std::string());
}

struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(size_t bytes) { EXPECT_EQ(cudaMalloc(&p, bytes), cudaSuccess); }
  ~DeviceBuffer() { cudaFree(p); }
  float* f() const { return static_cast<float*>(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

uint64_t fresh_seed() {
  std::random_device rd;
  return (uint64_t(rd()) << 32) ^ rd();
}

// `infinities`: with small_integers(data), place the infinities and the NaN in this operand.
std::vector<float> strided_random(int64_t rows, int64_t cols, int64_t ld, uint64_t seed, Data data,
                                  bool infinities = false) {
  std::vector<float> dense(size_t(rows * cols));
  fill_random(dense, seed);
  if (data == Data::kWideExponent) {
    std::mt19937_64 gen(seed ^ 0x9e3779b97f4a7c15ull);
    std::uniform_int_distribution<int> e(-16, 16);
    for (float& v : dense) v = std::ldexp(v, e(gen));
  }
  if (small_integers(data)) {
    std::mt19937_64 gen(seed ^ 0x51ed27ull);
    std::uniform_int_distribution<int> small(-4, 4);
    for (float& v : dense) v = float(small(gen));
  }
  if (small_integers(data) && infinities) {
    const float inf = std::numeric_limits<float>::infinity();
    dense[size_t(std::min<int64_t>(1, rows - 1) * cols + std::min<int64_t>(2, cols - 1))] = inf;
    dense[size_t((rows / 2) * cols + cols / 2)] = -inf;
    dense[size_t((rows - 1) * cols + (cols - 1) / 3)] = kNaN;
  }
  std::vector<float> out(size_t(rows * ld), kNaN);
  for (int64_t r = 0; r < rows; ++r) std::memcpy(&out[r * ld], &dense[r * cols], cols * sizeof(float));
  return out;
}

std::vector<float> compact(const std::vector<float>& s, int64_t rows, int64_t cols, int64_t ld) {
  std::vector<float> d(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r) std::memcpy(&d[r * cols], &s[r * ld], cols * sizeof(float));
  return d;
}

struct Inputs {
  Case cs;
  int64_t lda, ldb, ldc;
  std::vector<float> a, b, c0;
  uint64_t seed;
};

Inputs make_inputs(const Case& cs) {
  Inputs in{cs, cs.k + cs.lda_pad, cs.n + cs.ldb_pad, cs.n + cs.ldc_pad, {}, {}, {}, fresh_seed()};
  in.a = strided_random(cs.m, cs.k, in.lda, in.seed, cs.data, cs.data != Data::kInfinitiesInB);
  in.b = strided_random(cs.k, cs.n, in.ldb, in.seed + 1, cs.data, cs.data != Data::kInfinitiesInA);
  in.c0 = strided_random(cs.m, cs.n, in.ldc, in.seed + 2, Data::kUniform);
  return in;
}

struct Outcome {
  VerifyResult verify;
  bool padding_intact = true;
  Status status;
  std::vector<float> c;  // the whole strided C
};

// Runs `backend` (or, for fp32x3 with cs.variant >= 0, that variant) and verifies; in
// `workspace` where given (large enough), else in a workspace of its own.
Outcome run_one(GemmBackend* backend, const Inputs& in, void* workspace = nullptr) {
  const Case& cs = in.cs;
  DeviceBuffer da((in.a.size() + cs.a_off) * 4), db((in.b.size() + cs.b_off) * 4), dc((in.c0.size() + cs.c_off) * 4);
  EXPECT_EQ(cudaMemcpy(da.f() + cs.a_off, in.a.data(), in.a.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(db.f() + cs.b_off, in.b.data(), in.b.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  std::vector<float> c_in = in.c0;
  if (cs.beta == 0.0f)
    for (int64_t r = 0; r < cs.m; ++r)
      for (int64_t j = 0; j < cs.n; ++j) c_in[r * in.ldc + j] = kNaN;
  EXPECT_EQ(cudaMemcpy(dc.f() + cs.c_off, c_in.data(), c_in.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);

  const GemmArgs g{{cs.m, cs.n, cs.k}, cs.alpha, cs.beta, da.f() + cs.a_off, in.lda, db.f() + cs.b_off, in.ldb,
                   dc.f() + cs.c_off,  in.ldc};
  Outcome out;
  if (cs.slices > 0 && backend->kind() == KernelKind::kFp32x3) {
    const size_t bytes = fp32x3_workspace_bytes(g.shape, cs.slices);
    DeviceBuffer ws(bytes);
    out.status = fp32x3_sgemm_sliced(g, cs.slices, ws.p, bytes, nullptr);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  } else if (cs.variant >= 0 && backend->kind() == KernelKind::kFp32x3) {
    const size_t bytes = fp32x3_workspace_bytes(g.shape);
    DeviceBuffer ws(bytes);
    out.status = fp32x3_sgemm_variant(g, cs.variant, ws.p, bytes, nullptr);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  } else {
    const size_t bytes = backend->workspace_bytes(g);  // the caller owns the scratch
    DeviceBuffer ws(workspace ? 0 : bytes);
    out.status = backend->run(g, workspace ? workspace : bytes ? ws.p : nullptr, bytes, nullptr);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  EXPECT_TRUE(out.status.ok()) << out.status.to_string();
  out.c.resize(c_in.size());
  EXPECT_EQ(cudaMemcpy(out.c.data(), dc.f() + cs.c_off, out.c.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  for (int64_t r = 0; r < cs.m; ++r)
    for (int64_t j = cs.n; j < in.ldc; ++j)
      if (std::memcmp(&out.c[r * in.ldc + j], &c_in[r * in.ldc + j], 4) != 0) out.padding_intact = false;
  const auto a = compact(in.a, cs.m, cs.k, in.lda), b = compact(in.b, cs.k, cs.n, in.ldb);
  const auto c0 = compact(in.c0, cs.m, cs.n, in.ldc), c = compact(out.c, cs.m, cs.n, in.ldc);
  std::vector<int64_t> rows = rows_to_verify(cs.m, cs.n, cs.k, in.seed, 48);
  if (small_integers(cs.data)) {  // the rows of A's infinities (strided_random) among them
    rows.push_back(std::min<int64_t>(1, cs.m - 1));
    rows.push_back(cs.m / 2);
    std::sort(rows.begin(), rows.end());
    rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  }
  out.verify = verify_gemm(cs.m, cs.n, cs.k, cs.alpha, a.data(), b.data(), cs.beta, c0.data(), c.data(), rows);
  return out;
}

bool have_sm90() {
  if (testing::cuda_device_count() < 1) return false;
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
  return major == 9 && minor == 0;
}

#define SGEMM_REQUIRE_SM90()                                                \
  do {                                                                      \
    SGEMM_REQUIRE_GPUS(1);                                                  \
    if (!have_sm90()) GTEST_SKIP() << "fp32x3 needs an sm_90 (Hopper) GPU"; \
  } while (0)

class Fp32x3Sgemm : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    SGEMM_REQUIRE_SM90();
    auto f = make_gemm_backend(KernelKind::kFp32x3);
    auto cb = make_gemm_backend(KernelKind::kCublas);
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    ASSERT_TRUE(cb.ok()) << cb.status().to_string();
    fp32x3_ = std::move(f).value();
    cublas_ = std::move(cb).value();
  }
  std::unique_ptr<GemmBackend> fp32x3_, cublas_;
};

TEST_P(Fp32x3Sgemm, NoWorseThanCublasSgemm) {
  const Case cs = GetParam();
  const Inputs in = make_inputs(cs);
  SCOPED_TRACE("case " + describe(cs) + " seed " + std::to_string(in.seed));
  ASSERT_TRUE(fp32x3_
                  ->can_implement({{cs.m, cs.n, cs.k},
                                   cs.alpha,
                                   cs.beta,
                                   reinterpret_cast<float*>(16),
                                   in.lda,
                                   reinterpret_cast<float*>(16),
                                   in.ldb,
                                   reinterpret_cast<float*>(16),
                                   in.ldc})
                  .ok());
  const Outcome f = run_one(fp32x3_.get(), in);
  const Outcome cb = run_one(cublas_.get(), in);
  std::printf("[ errors   ] %-70s fp32x3 %.3e  cublas-sgemm %.3e  (%lld elements)\n", describe(cs).c_str(),
              f.verify.max_rel_error, cb.verify.max_rel_error, (long long)f.verify.checked);
  RecordProperty("fp32x3_max_rel_error", std::to_string(f.verify.max_rel_error));
  RecordProperty("cublas_max_rel_error", std::to_string(cb.verify.max_rel_error));
  EXPECT_TRUE(f.padding_intact) << "fp32x3 wrote into C's padding";
  EXPECT_EQ(f.verify.mismatched_nonfinite, 0)
      << "non-finite output first at row " << f.verify.worst_row << " col " << f.verify.worst_col;
  EXPECT_TRUE(cb.verify.passed(kSgemmTolerance)) << "cuBLAS itself: " << cb.verify.max_rel_error;
  const bool promoted = cs.variant < 0 || fp32x3_variant_name(cs.variant).find("promote") != std::string_view::npos;
  if (!promoted) {
    EXPECT_TRUE(f.verify.passed(kSgemmTolerance)) << "fp32x3 error " << f.verify.max_rel_error;
    return;
  }
  EXPECT_LE(f.verify.max_rel_error, std::max(cb.verify.max_rel_error, kErrorFloor))
      << "fp32x3 error " << f.verify.max_rel_error << " at (" << f.verify.worst_row << "," << f.verify.worst_col
      << ") vs cuBLAS SGEMM " << cb.verify.max_rel_error;
}

std::vector<Case> square_cases() {
  std::vector<Case> v;
  for (int64_t s : {1, 2, 3, 7, 31, 64, 127, 128, 129, 255, 256, 257, 1000, 1024, 2048}) v.push_back({s, s, s});
  return v;
}

std::vector<Case> shape_cases() {
  return {{1, 1, 5000},   {1, 513, 77},     {513, 1, 77},      {300, 200, 1},     {1000, 1, 1},      {2, 130, 3},
          {129, 2, 17},   {5, 5, 9},        {1000, 37, 129},   {37, 1000, 300},   {2049, 1025, 513}, {8191, 40, 33},
          {40, 8193, 24}, {700, 900, 1100}, {4095, 4095, 257}, {1024, 1024, 4095}};
}

// Long K over few tiles: K is split into slices (fp32x3_k_slices > 1 for each, checked
// below), with an uneven last slice, alpha/beta, padded leading dimensions and unaligned
// pointers (both operands then go through the split pass).
std::vector<Case> long_k_cases() {
  return {{64, 64, 16384},
          {33, 17, 10000},
          {128, 256, 32768},
          {128, 128, 65536},
          {256, 64, 65536},
          {130, 129, 65533},
          {257, 259, 20001, -1.0f, 0.5f, 4, 1, 3},
          {300, 517, 9001, 0.5f, 2.0f, 1, 3, 5, 1, 2, 3},
          {1024, 1024, 16384}};
}

TEST(Fp32x3Slices, LongKOverFewTilesIsSplit) {
  SGEMM_REQUIRE_SM90();
  for (const Case& c : long_k_cases()) EXPECT_GT(fp32x3_k_slices({c.m, c.n, c.k}), 1) << describe(c);
  EXPECT_EQ(fp32x3_k_slices({8192, 8192, 8192}), 1);  // its tiles fill their waves already
  EXPECT_EQ(fp32x3_k_slices({128, 128, 255}), 1);     // too short to cut
}

std::vector<Case> alpha_beta_cases() {
  std::vector<Case> v;
  const float ab[][2] = {{1, 0}, {0.5f, 0}, {1, 1}, {-1.5f, 0.25f}, {0, 1}, {2, -1}, {0, 0}};
  for (auto [alpha, beta] : ab) {
    Case c{257, 129, 65};
    c.alpha = alpha;
    c.beta = beta;
    v.push_back(c);
    Case d{1024, 1024, 256};
    d.alpha = alpha;
    d.beta = beta;
    v.push_back(d);
  }
  return v;
}

std::vector<Case> unaligned_cases() {
  std::vector<Case> v;
  for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{129, 130, 131}, {1023, 257, 100}, {64, 64, 64}}) {
    Case ld{m, n, k, 1.0f, 0.5f, 1, 3, 1};
    Case ptr{m, n, k, 1.0f, 0.5f, 0, 0, 0, 1, 2, 3};
    Case both{m, n, k, -1.0f, 0.0f, 2, 1, 5, 3, 1, 1};
    Case c_only{m, n, k, 1.0f, 0.0f, 0, 0, 0, 0, 0, 1};
    v.insert(v.end(), {ld, ptr, both, c_only});
  }
  return v;
}

std::vector<Case> wide_exponent_cases() {
  std::vector<Case> v;
  for (Case c : {Case{256, 256, 256}, Case{1000, 1000, 1000}, Case{129, 131, 4097}, Case{64, 64, 65536},
                 Case{300, 200, 77, 1.0f, 0.5f, 1, 3, 1, 1, 2, 3}}) {
    c.data = Data::kWideExponent;
    v.push_back(c);
  }
  return v;
}

std::vector<Case> variant_cases() {
  std::vector<Case> v;
  for (int var = 0; var < fp32x3_variant_count(); ++var) {
    // Variants that read A in place need a TMA-describable A (16-byte aligned, lda % 4 == 0).
    const bool a_in_place = fp32x3_variant_name(var).find("splitA") != std::string_view::npos;
    for (Case c : {Case{129, 131, 37}, Case{129, 131, 36}, Case{300, 520, 301, 1.0f, 1.0f}, Case{7, 9, 5},
                   Case{1, 1, 1}, Case{65, 3, 4}, Case{257, 259, 100, -1.0f, 0.5f, 4, 1, 3, 4, 1, 1},
                   Case{257, 259, 33, 1.0f, 0.5f, 1, 1, 3, 1, 1, 1}, Case{257, 259, 33, 1.0f, 0.5f, 4, 1, 3, 0, 1, 1},
                   Case{600, 700, 2050}, Case{256, 256, 8192},
                   Case{1000, 1000, 1000, 1.0f, 0.0f, 0, 0, 0, 0, 0, 0, -1, Data::kWideExponent}}) {
      if (a_in_place && ((c.k + c.lda_pad) % 4 != 0 || c.a_off % 4 != 0)) continue;
      c.variant = var;
      v.push_back(c);
    }
  }
  return v;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k) + "_" + std::to_string(info.index);
}

INSTANTIATE_TEST_SUITE_P(Square, Fp32x3Sgemm, ::testing::ValuesIn(square_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Shapes, Fp32x3Sgemm, ::testing::ValuesIn(shape_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(LongK, Fp32x3Sgemm, ::testing::ValuesIn(long_k_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(AlphaBeta, Fp32x3Sgemm, ::testing::ValuesIn(alpha_beta_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Unaligned, Fp32x3Sgemm, ::testing::ValuesIn(unaligned_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(WideExponent, Fp32x3Sgemm, ::testing::ValuesIn(wide_exponent_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Variants, Fp32x3Sgemm, ::testing::ValuesIn(variant_cases()), case_name);

// Any cut of K (the rule's own or named) is within cuBLAS SGEMM's error; more slices than
// k-blocks are clamped.
std::vector<Case> slice_cases() {
  std::vector<Case> v;
  for (int64_t slices : {1, 2, 3, 7, 64, 1000}) {
    Case c{257, 130, 4099, -1.0f, 0.5f, 1, 3, 5};
    c.slices = slices;
    v.push_back(c);
  }
  Case wide{300, 300, 20000};
  wide.data = Data::kWideExponent;
  v.push_back(wide);
  return v;
}
INSTANTIATE_TEST_SUITE_P(Slices, Fp32x3Sgemm, ::testing::ValuesIn(slice_cases()), case_name);

// Infinities and NaNs propagate as in SGEMM (the FFMA fallback, fp32x3_sgemm.cuh): A split in
// the kernel and in the split pass (unaligned), K whole and cut into slices, alpha/beta and C.
std::vector<Case> infinity_cases() {
  std::vector<Case> v;
  for (Case c : {Case{300, 200, 77}, Case{257, 259, 20001, -1.0f, 0.5f}, Case{129, 131, 37, 1.0f, 0.5f, 1, 3, 1},
                 Case{64, 64, 16384}, Case{1024, 1024, 1024}, Case{7, 9, 5}}) {
    c.data = Data::kInfinities;
    v.push_back(c);
  }
  // One operand only: A (also where the GEMM kernel splits A itself, and then, with K split
  // and long, is the one to see A's infinities) or B.
  for (Data d : {Data::kInfinitiesInA, Data::kInfinitiesInB})
    for (Case c : {Case{1024, 1024, 1024}, Case{2048, 512, 4096, 1.0f, 0.5f}, Case{257, 259, 20001},
                   Case{257, 259, 20001, 1.0f, 0.5f}, Case{33, 65, 7}}) {
      c.data = d;
      v.push_back(c);
    }
  return v;
}
INSTANTIATE_TEST_SUITE_P(Infinities, Fp32x3Sgemm, ::testing::ValuesIn(infinity_cases()), case_name);

// One workspace for products with and without infinities, in turn: each is right (a mark
// left in the workspace by a product with infinities does not send the next one to the
// fallback, nor hide the next product's infinities). 257x259x20001 has K split and long, so
// the GEMM kernel looks at A itself and raises its own mark (InfMark).
TEST(Fp32x3Infinities, OneWorkspaceForProductsWithAndWithout) {
  SGEMM_REQUIRE_SM90();
  auto f = make_gemm_backend(KernelKind::kFp32x3);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  const Case shapes[] = {Case{1024, 1024, 1024}, Case{300, 200, 77, 1.0f, 0.5f}, Case{257, 259, 20001, 1.0f, 0.5f}};
  for (const Case& shape : shapes) {
    const GemmArgs probe{{shape.m, shape.n, shape.k}, 1.0f, 0.0f, nullptr, shape.k, nullptr, shape.n, nullptr, shape.n};
    DeviceBuffer ws(f.value()->workspace_bytes(probe));
    for (Data d : {Data::kInfinitiesInA, Data::kUniform, Data::kInfinitiesInB, Data::kInfinities, Data::kUniform}) {
      Case cs = shape;
      cs.data = d;
      const Inputs in = make_inputs(cs);
      SCOPED_TRACE(describe(cs) + " seed " + std::to_string(in.seed));
      const Outcome o = run_one(f.value().get(), in, ws.p);
      EXPECT_EQ(o.verify.mismatched_nonfinite, 0)
          << "non-finite output first at row " << o.verify.worst_row << " col " << o.verify.worst_col;
      EXPECT_TRUE(o.verify.passed(kSgemmTolerance)) << "error " << o.verify.max_rel_error;
    }
  }
}

// B prepared once (the engine's row blocks of one product): each block reading the
// prepared planes gives C bit for bit as the block splitting B itself, and C is right
// against the fp64 reference; infinities in the prepared B or in a block's A still send
// that block to the fallback. Blocks of uneven heights; K long enough for split-K slices.
TEST(Fp32x3PreparedB, RowBlocksOverOnePreparedBMatchTheirOwnSplitBitForBit) {
  SGEMM_REQUIRE_SM90();
  auto f = make_gemm_backend(KernelKind::kFp32x3);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  GemmBackend* be = f.value().get();
  const Data datas[] = {Data::kUniform, Data::kInfinitiesInB, Data::kInfinitiesInA, Data::kWideExponent};
  for (Case cs : {Case{301, 259, 1031, 1.0f, 0.5f, 1, 3, 5}, Case{200, 4096, 512}, Case{96, 64, 20001, -1.0f, 0.25f}}) {
    for (Data d : datas) {
      cs.data = d;
      const Inputs in = make_inputs(cs);
      SCOPED_TRACE(describe(cs) + " seed " + std::to_string(in.seed));
      DeviceBuffer da(in.a.size() * 4), db(in.b.size() * 4), dc(in.c0.size() * 4);
      ASSERT_EQ(cudaMemcpy(da.f(), in.a.data(), in.a.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(db.f(), in.b.data(), in.b.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
      // Blocks of rows: uneven, the last the shortest.
      const int64_t cuts[] = {0, cs.m / 2 + 1, cs.m - cs.m / 5, cs.m};
      const GemmArgs first{{cuts[1], cs.n, cs.k}, cs.alpha, cs.beta, da.f(), in.lda, db.f(), in.ldb, dc.f(), in.ldc};
      const size_t prep_bytes = be->prepared_b_bytes(first);
      ASSERT_GT(prep_bytes, 0u);
      DeviceBuffer prep(prep_bytes);
      ASSERT_TRUE(be->prepare_b(first, prep.p, prep_bytes, nullptr).ok());
      std::vector<float> with_prep(in.c0.size()), without(in.c0.size());
      for (std::vector<float>* out : {&with_prep, &without}) {
        ASSERT_EQ(cudaMemcpy(dc.f(), in.c0.data(), in.c0.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
        for (int blk = 0; blk < 3; ++blk) {
          const int64_t r0 = cuts[blk], r1 = cuts[blk + 1];
          GemmArgs g{{r1 - r0, cs.n, cs.k}, cs.alpha, cs.beta, da.f() + r0 * in.lda, in.lda, db.f(), in.ldb,
                     dc.f() + r0 * in.ldc,  in.ldc};
          if (out == &with_prep) g.b_prepared = prep.p;
          const size_t ws_bytes = be->workspace_bytes(g);
          DeviceBuffer ws(ws_bytes);
          const Status st = be->run(g, ws.p, ws_bytes, nullptr);
          ASSERT_TRUE(st.ok()) << st.to_string();
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        }
        ASSERT_EQ(cudaMemcpy(out->data(), dc.f(), out->size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      }
      EXPECT_EQ(std::memcmp(with_prep.data(), without.data(), with_prep.size() * 4), 0)
          << "a block over the prepared B differs from the same block splitting B itself";
      const auto a = compact(in.a, cs.m, cs.k, in.lda), b = compact(in.b, cs.k, cs.n, in.ldb);
      const auto c0 = compact(in.c0, cs.m, cs.n, in.ldc), c = compact(with_prep, cs.m, cs.n, in.ldc);
      std::vector<int64_t> rows = rows_to_verify(cs.m, cs.n, cs.k, in.seed, 48);
      rows.insert(rows.end(), {std::min<int64_t>(1, cs.m - 1), cs.m / 2});  // A's infinities (strided_random)
      std::sort(rows.begin(), rows.end());
      rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
      const VerifyResult v =
          verify_gemm(cs.m, cs.n, cs.k, cs.alpha, a.data(), b.data(), cs.beta, c0.data(), c.data(), rows);
      EXPECT_EQ(v.mismatched_nonfinite, 0)
          << "non-finite output first at row " << v.worst_row << " col " << v.worst_col;
      EXPECT_TRUE(v.passed(kSgemmTolerance)) << "error " << v.max_rel_error;
    }
  }
}

// x rounded to TF32, to nearest with ties away from zero (cvt.rna.tf32.f32), on finite x.
float tf32_rna(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  b = (b + 0x1000u) & 0xffffe000u;
  std::memcpy(&x, &b, 4);
  return x;
}

// Compares planes hi[rows][kp], lo[rows][kp] with the split of x (as `at(row, i)` for
// i < k); names the first element that differs.
template <typename At>
void expect_planes(const std::vector<float>& planes, int64_t rows, int64_t k, int64_t kp, At at) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < k; ++i) {
      const float x = at(r, i), hi = tf32_rna(x), lo = tf32_rna(x - hi);
      const float got_hi = planes[size_t(r * kp + i)], got_lo = planes[size_t((rows + r) * kp + i)];
      if (std::memcmp(&got_hi, &hi, 4) != 0 || std::memcmp(&got_lo, &lo, 4) != 0) {
        ADD_FAILURE() << "row " << r << " k " << i << ": x " << x << " hi " << got_hi << " (want " << hi << ") lo "
                      << got_lo << " (want " << lo << ")";
        return;
      }
    }
}

// The split pass writes each element's TF32 hi and lo, bit for bit, on odd and round
// shapes, with rows that are and are not 16-byte aligned (the pass reads aligned rows
// four elements at a time): B's planes transposed (prepare_b), A's as they are (where A
// is not split in the GEMM kernel).
TEST(Fp32x3Split, PlanesHoldEachElementsTf32HiAndLoBitForBit) {
  SGEMM_REQUIRE_SM90();
  // {m, n, k, alpha, beta, lda_pad, ldb_pad, ldc_pad, a_off, b_off}: lda and ldb multiples
  // of 4 or not, bases 16-byte aligned or one float off, ragged last tiles in both directions.
  for (Case cs : {Case{1, 1, 1}, Case{5, 3, 7}, Case{33, 130, 129}, Case{129, 257, 301, 1, 0, 3, 3},
                  Case{64, 128, 256, 1, 0, 1, 3}, Case{96, 256, 64, 1, 0, 0, 0, 0, 1, 1}, Case{300, 520, 1000}}) {
    for (Data d : {Data::kUniform, Data::kWideExponent}) {
      cs.data = d;
      const Inputs in = make_inputs(cs);
      SCOPED_TRACE(describe(cs) + " seed " + std::to_string(in.seed));
      const int64_t kp = (cs.k + 3) / 4 * 4;
      DeviceBuffer da((in.a.size() + cs.a_off) * 4), db((in.b.size() + cs.b_off) * 4), dc(in.c0.size() * 4);
      ASSERT_EQ(cudaMemcpy(da.f() + cs.a_off, in.a.data(), in.a.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(db.f() + cs.b_off, in.b.data(), in.b.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
      const GemmArgs g{
          {cs.m, cs.n, cs.k}, 1.0f, 0.0f, da.f() + cs.a_off, in.lda, db.f() + cs.b_off, in.ldb, dc.f(), in.ldc};
      const size_t prep_bytes = fp32x3_prepared_b_bytes(g.shape);
      DeviceBuffer prep(prep_bytes);
      ASSERT_TRUE(fp32x3_prepare_b(g, prep.p, prep_bytes, nullptr).ok());
      const size_t ws_bytes = fp32x3_workspace_bytes(g.shape);
      DeviceBuffer ws(ws_bytes);
      ASSERT_TRUE(fp32x3_split_operands(g, ws.p, ws_bytes, nullptr).ok());
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      std::vector<float> b_planes(size_t(2 * cs.n * kp)), a_planes(size_t(2 * cs.m * kp));
      ASSERT_EQ(cudaMemcpy(b_planes.data(), prep.p, b_planes.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(a_planes.data(), ws.p, a_planes.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      expect_planes(b_planes, cs.n, cs.k, kp, [&](int64_t col, int64_t i) { return in.b[size_t(i * in.ldb + col)]; });
      expect_planes(a_planes, cs.m, cs.k, kp, [&](int64_t row, int64_t i) { return in.a[size_t(row * in.lda + i)]; });
    }
  }
}

// The same inputs give bit-identical C run after run (no atomics, fixed order).
TEST(Fp32x3Determinism, RunToRunBitIdentical) {
  SGEMM_REQUIRE_SM90();
  auto f = make_gemm_backend(KernelKind::kFp32x3);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  for (Case cs : {Case{1000, 1000, 3000, 1.0f, 0.5f}, Case{131, 67, 4099, -1.0f, 0.25f, 1, 3, 5, 1, 2, 3},
                  Case{2048, 2048, 2048}, Case{257, 259, 40000, 1.0f, 0.5f}}) {
    SCOPED_TRACE(describe(cs));
    const Inputs in = make_inputs(cs);
    DeviceBuffer da((in.a.size() + cs.a_off) * 4), db((in.b.size() + cs.b_off) * 4), dc((in.c0.size() + cs.c_off) * 4);
    ASSERT_EQ(cudaMemcpy(da.f() + cs.a_off, in.a.data(), in.a.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(db.f() + cs.b_off, in.b.data(), in.b.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    const GemmArgs g{{cs.m, cs.n, cs.k}, cs.alpha, cs.beta, da.f() + cs.a_off, in.lda, db.f() + cs.b_off, in.ldb,
                     dc.f() + cs.c_off,  in.ldc};
    const size_t ws_bytes = f.value()->workspace_bytes(g);
    DeviceBuffer ws(ws_bytes);
    std::vector<float> first, got(in.c0.size());
    for (int run = 0; run < 4; ++run) {
      ASSERT_EQ(cudaMemcpy(dc.f() + cs.c_off, in.c0.data(), in.c0.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
      const Status st = f.value()->run(g, ws.p, ws_bytes, nullptr);
      ASSERT_TRUE(st.ok()) << st.to_string();
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(got.data(), dc.f() + cs.c_off, got.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      if (run == 0)
        first = got;
      else
        EXPECT_EQ(std::memcmp(first.data(), got.data(), got.size() * 4), 0) << "run " << run << " differs";
    }
  }
}

// cuBLAS TF32: within the tf32 tolerance (and, on these sizes, less accurate than SGEMM).
TEST(CublasTf32, WithinTf32Tolerance) {
  SGEMM_REQUIRE_GPUS(1);
  auto t = make_gemm_backend(KernelKind::kTf32);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  for (Case cs : {Case{257, 129, 65, 1.0f, 0.5f}, Case{1024, 1024, 1024}, Case{129, 130, 131, 1.0f, 0.5f, 1, 3, 1}}) {
    const Inputs in = make_inputs(cs);
    SCOPED_TRACE(describe(cs) + " seed " + std::to_string(in.seed));
    const Outcome o = run_one(t.value().get(), in);
    std::printf("[ errors   ] %-70s tf32 %.3e\n", describe(cs).c_str(), o.verify.max_rel_error);
    EXPECT_TRUE(o.padding_intact);
    EXPECT_TRUE(o.verify.passed(kTf32Tolerance)) << "max rel error " << o.verify.max_rel_error;
  }
}

TEST(Fp32x3Backend, RunRefusesInvalidArguments) {
  SGEMM_REQUIRE_SM90();
  auto f = make_gemm_backend(KernelKind::kFp32x3);
  ASSERT_TRUE(f.ok());
  GemmArgs g{{4, 4, 4}, 1.0f, 0.0f, nullptr, 4, nullptr, 4, nullptr, 4};
  EXPECT_EQ(f.value()->run(g, nullptr, 0, nullptr).code(), StatusCode::kInvalidArgument);
}

TEST(Fp32x3Backend, VariantRefusesShortWorkspace) {
  SGEMM_REQUIRE_SM90();
  DeviceBuffer a(64 * 4), b(64 * 4), c(64 * 4), ws(64);
  const GemmArgs g = dense_gemm_args({8, 8, 8}, 1.0f, a.f(), b.f(), 0.0f, c.f());
  EXPECT_EQ(fp32x3_sgemm(g, ws.p, 64, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(fp32x3_sgemm(g, nullptr, 0, nullptr).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sgemm
