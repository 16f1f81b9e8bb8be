// Numerical tests of the ping-pong SGEMM (and of cuBLAS as our yardstick) on
// the GPU: every case draws fresh random inputs (seed printed on failure),
// checks against the fp64 reference (common/reference_gemm.h) and checks that
// the ping-pong kernel's largest error stays within 2x cuBLAS's own error on
// the same inputs, plus a floor of a few fp32 roundings.
//
// Outputs are poisoned with NaN before runs with beta == 0, so an element the
// kernel forgets to write fails; padding of A and B (past k / n in each row) is
// NaN too, so reading it fails; padding of C must come back untouched.
#include "kernels/pingpong_sgemm.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "common/reference_gemm.h"
#include "kernels/gemm_backend.h"
#include "tests/common/gpu_test.h"

namespace sgemm {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
// Floor of the "within 2x cuBLAS" check: 8 fp32 roundings in the normalised measure.
constexpr double kErrorFloor = 8.0 / (1 << 24);

struct Case {
  int64_t m, n, k;
  float alpha = 1.0f, beta = 0.0f;
  int64_t lda_pad = 0, ldb_pad = 0, ldc_pad = 0;  // extra floats per row
  int64_t a_off = 0, b_off = 0, c_off = 0;        // pointer offsets in floats (unaligned when % 4 != 0)
  int variant = -1;                               // -1: the backend's own choice
};

std::string describe(const Case& c) {
  return std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k) +
         " alpha=" + std::to_string(c.alpha) + " beta=" + std::to_string(c.beta) + " pads=(" +
         std::to_string(c.lda_pad) + "," + std::to_string(c.ldb_pad) + "," + std::to_string(c.ldc_pad) + ") offs=(" +
         std::to_string(c.a_off) + "," + std::to_string(c.b_off) + "," + std::to_string(c.c_off) +
         ") variant=" + (c.variant < 0 ? std::string("auto") : std::string(pingpong_variant_name(c.variant)));
}

struct DeviceBuffer {
  float* p = nullptr;
  explicit DeviceBuffer(size_t count) {
    if (count) {
      EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&p), count * sizeof(float)), cudaSuccess);
    }
  }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

uint64_t fresh_seed() {
  std::random_device rd;
  return (uint64_t(rd()) << 32) ^ rd();
}

// Strided host matrix: rows x cols in a rows x ld array, padding NaN.
std::vector<float> strided_random(int64_t rows, int64_t cols, int64_t ld, uint64_t seed) {
  std::vector<float> dense(size_t(rows * cols));
  fill_random(dense, seed);
  std::vector<float> out(size_t(rows * ld), kNaN);
  for (int64_t r = 0; r < rows; ++r) std::memcpy(&out[r * ld], &dense[r * cols], cols * sizeof(float));
  return out;
}

std::vector<float> compact(const std::vector<float>& s, int64_t rows, int64_t cols, int64_t ld) {
  std::vector<float> d(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r) std::memcpy(&d[r * cols], &s[r * ld], cols * sizeof(float));
  return d;
}

struct Outcome {
  VerifyResult verify;
  bool padding_intact = true;
};

// Runs one backend (or one ping-pong variant) on the inputs and verifies.
Outcome run_one(GemmBackend* backend, const Case& cs, const std::vector<float>& ha, const std::vector<float>& hb,
                const std::vector<float>& hc0, uint64_t seed) {
  const int64_t lda = cs.k + cs.lda_pad, ldb = cs.n + cs.ldb_pad, ldc = cs.n + cs.ldc_pad;
  DeviceBuffer da(ha.size() + cs.a_off), db(hb.size() + cs.b_off), dc(hc0.size() + cs.c_off);
  EXPECT_EQ(cudaMemcpy(da.p + cs.a_off, ha.data(), ha.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(db.p + cs.b_off, hb.data(), hb.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  // beta == 0: poison the whole C (the padding is compared later against this poison).
  std::vector<float> c_in = hc0;
  if (cs.beta == 0.0f) {
    for (int64_t r = 0; r < cs.m; ++r)
      for (int64_t j = 0; j < cs.n; ++j) c_in[r * ldc + j] = kNaN;
  }
  EXPECT_EQ(cudaMemcpy(dc.p + cs.c_off, c_in.data(), c_in.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);

  GemmArgs g{{cs.m, cs.n, cs.k}, cs.alpha, cs.beta, da.p + cs.a_off, lda, db.p + cs.b_off, ldb, dc.p + cs.c_off, ldc};
  const bool by_variant = cs.variant >= 0 && backend->kind() == KernelKind::kPingpong;
  // The caller owns the scratch: exactly what the kernel asks for.
  const size_t ws_bytes =
      by_variant ? pingpong_variant_workspace_bytes(g.shape, cs.variant) : backend->workspace_bytes(g);
  DeviceBuffer ws((ws_bytes + 3) / 4);
  Status st = by_variant ? pingpong_sgemm_variant(g, cs.variant, ws.p, ws_bytes, nullptr)
                         : backend->run(g, ws_bytes ? ws.p : nullptr, ws_bytes, nullptr);
  EXPECT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> hc(c_in.size());
  EXPECT_EQ(cudaMemcpy(hc.data(), dc.p + cs.c_off, hc.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);

  Outcome out;
  for (int64_t r = 0; r < cs.m; ++r)
    for (int64_t j = cs.n; j < ldc; ++j)
      if (std::memcmp(&hc[r * ldc + j], &c_in[r * ldc + j], 4) != 0) out.padding_intact = false;
  const auto a = compact(ha, cs.m, cs.k, lda), b = compact(hb, cs.k, cs.n, ldb);
  const auto c0 = compact(hc0, cs.m, cs.n, ldc), c = compact(hc, cs.m, cs.n, ldc);
  out.verify = verify_gemm(cs.m, cs.n, cs.k, cs.alpha, a.data(), b.data(), cs.beta, c0.data(), c.data(),
                           rows_to_verify(cs.m, cs.n, cs.k, seed, 48));
  return out;
}

class PingpongSgemm : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    SGEMM_REQUIRE_GPUS(1);
    auto pp = make_gemm_backend(KernelKind::kPingpong);
    auto cb = make_gemm_backend(KernelKind::kCublas);
    ASSERT_TRUE(pp.ok()) << pp.status().to_string();
    ASSERT_TRUE(cb.ok()) << cb.status().to_string();
    pingpong_ = std::move(pp).value();
    cublas_ = std::move(cb).value();
  }
  std::unique_ptr<GemmBackend> pingpong_, cublas_;
};

TEST_P(PingpongSgemm, MatchesReferenceAndCublas) {
  const Case cs = GetParam();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("case " + describe(cs) + " seed " + std::to_string(seed));
  const int64_t lda = cs.k + cs.lda_pad, ldb = cs.n + cs.ldb_pad, ldc = cs.n + cs.ldc_pad;
  const auto ha = strided_random(cs.m, cs.k, lda, seed);
  const auto hb = strided_random(cs.k, cs.n, ldb, seed + 1);
  const auto hc0 = strided_random(cs.m, cs.n, ldc, seed + 2);

  ASSERT_TRUE(pingpong_
                  ->can_implement({{cs.m, cs.n, cs.k},
                                   cs.alpha,
                                   cs.beta,
                                   reinterpret_cast<float*>(16),
                                   lda,
                                   reinterpret_cast<float*>(16),
                                   ldb,
                                   reinterpret_cast<float*>(16),
                                   ldc})
                  .ok());
  const Outcome pp = run_one(pingpong_.get(), cs, ha, hb, hc0, seed);
  const Outcome cb = run_one(cublas_.get(), cs, ha, hb, hc0, seed);

  EXPECT_TRUE(pp.padding_intact) << "ping-pong wrote into C's padding";
  EXPECT_EQ(pp.verify.mismatched_nonfinite, 0) << "non-finite output (unwritten or NaN-polluted) first at row "
                                               << pp.verify.worst_row << " col " << pp.verify.worst_col;
  EXPECT_TRUE(pp.verify.passed(kSgemmTolerance)) << "max rel error " << pp.verify.max_rel_error << " at ("
                                                 << pp.verify.worst_row << "," << pp.verify.worst_col << ")";
  EXPECT_TRUE(cb.verify.passed(kSgemmTolerance)) << "cuBLAS itself: max rel error " << cb.verify.max_rel_error;
  EXPECT_LE(pp.verify.max_rel_error, 2.0 * cb.verify.max_rel_error + kErrorFloor)
      << "ping-pong error " << pp.verify.max_rel_error << " vs cuBLAS " << cb.verify.max_rel_error;
}

std::vector<Case> square_cases() {
  std::vector<Case> v;
  for (int64_t s : {1, 2, 3, 7, 31, 64, 127, 128, 129, 255, 257, 1023, 1024, 4095}) v.push_back({s, s, s});
  return v;
}

std::vector<Case> degenerate_cases() {
  return {{1, 1, 1},    {1, 513, 77}, {513, 1, 77}, {300, 200, 1}, {1, 1, 5000},
          {1, 1000, 1}, {1000, 1, 1}, {2, 130, 3},  {129, 2, 17},  {5, 5, 9}};
}

std::vector<Case> rectangular_cases() {
  return {{64, 64, 16384},   {33, 17, 10000}, {128, 256, 8192}, {1000, 37, 129}, {37, 1000, 300},
          {2049, 1025, 513}, {8191, 40, 33},  {40, 8193, 24},   {700, 900, 1100}};
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
    Case ld{m, n, k, 1.0f, 0.5f, 1, 3, 1};               // odd leading dimensions
    Case ptr{m, n, k, 1.0f, 0.5f, 0, 0, 0, 1, 2, 3};     // misaligned pointers, aligned ld
    Case both{m, n, k, -1.0f, 0.0f, 2, 1, 5, 3, 1, 1};   // both
    Case c_only{m, n, k, 1.0f, 0.0f, 0, 0, 0, 0, 0, 1};  // only C misaligned
    Case pad4{m, n, k, 1.0f, 0.0f, 4, 4, 8, 0, 0, 0};    // padded but still aligned
    v.insert(v.end(), {ld, ptr, both, c_only, pad4});
  }
  return v;
}

// Every variant, not only the ones the heuristic picks, on edge shapes, aligned and not.
std::vector<Case> variant_cases() {
  std::vector<Case> v;
  for (int var = 0; var < pingpong_variant_count(); ++var) {
    for (Case c : {Case{129, 131, 37}, Case{300, 520, 301, 1.0f, 1.0f}, Case{7, 9, 5},
                   Case{257, 259, 33, 1.0f, 0.5f, 1, 1, 3, 1, 1, 1}, Case{1, 131, 300, 1.0f, 0.5f},
                   Case{129, 1, 300, -1.0f, 0.0f, 1, 0, 0, 1, 0, 0},
                   // A rows 16-byte aligned (lda % 4 == 0), B and C vectorizable or not: the K-major A
                   // layout's 16-byte copies, with a partial last chunk (k % 4 != 0) and split-K.
                   Case{129, 132, 38, 1.0f, 0.0f, 2}, Case{257, 260, 35, 1.0f, 0.5f, 1, 0, 0, 4, 0, 0},
                   Case{300, 72, 1030, 1.0f, 0.5f, 2, 1}, Case{600, 36, 1100, -1.0f, 0.25f, 4, 4, 4},
                   // A rows not 16-byte aligned with a long K: the transposed fallbacks of the
                   // K-major variants, split K, a partial last tile.
                   Case{600, 36, 1101, -1.0f, 0.25f}, Case{300, 64, 2051, 1.0f, 0.0f, 0, 0, 0, 1, 0, 0}}) {
      c.variant = var;
      // The GEMV variant runs only single rows or columns of C.
      if (pingpong_variant_accepts({c.m, c.n, c.k}, var)) v.push_back(c);
    }
  }
  return v;
}

int variant_named(std::string_view name) {
  for (int v = 0; v < pingpong_variant_count(); ++v)
    if (pingpong_variant_name(v) == name) return v;
  // Tuning variants exist only with -DSGEMM_KERNEL_TUNING=ON.
  return -1;
}

// Few output tiles and a long K: the picker splits K (partials in a workspace,
// reduced in a fixed order); the last cases run the atomic split-K variant.
std::vector<Case> split_k_cases() {
  std::vector<Case> v;
  const float ab[][2] = {{1, 0}, {1, 1}, {-0.5f, 0.5f}, {2, 0}};
  for (auto [alpha, beta] : ab) {
    Case c{200, 300, 5000};
    c.alpha = alpha;
    c.beta = beta;
    v.push_back(c);
  }
  v.push_back(Case{131, 67, 4099, 1.0f, 0.25f, 1, 3, 5, 1, 2, 3});  // unaligned, scalar path
  v.push_back(Case{1, 1, 8191});
  v.push_back(Case{1024, 1024, 16384});
  // Split-K reduced through distributed shared memory inside a cluster of the splits.
  for (int var = 0; var < pingpong_variant_count(); ++var) {
    if (pingpong_variant_name(var).find("_cluster") == std::string_view::npos) continue;
    for (Case c :
         {Case{200, 300, 5000, 1.0f, 0.5f}, Case{131, 67, 4099, 1.0f, 0.25f, 1, 3, 5, 1, 2, 3},
          Case{3000, 40, 3000, -1.0f, 0.0f}, Case{20, 2000, 5000}, Case{1, 1, 8191}, Case{150, 70, 1100, 1.0f, 0.5f}}) {
      c.variant = var;
      v.push_back(c);
    }
  }
  // The TMA-fed kernel (issue 14, kernel3) where TMA can read A and B (lda, ldb % 4 == 0):
  // many tiles per persistent CTA, ragged edges, k % 32 != 0, C with and without float4
  // stores; its split-K variants on few-tile, long-K shapes (and a fallback case).
  for (int var = 0; var < pingpong_variant_count(); ++var) {
    const std::string_view name = pingpong_variant_name(var);
    const bool cp_async = name.rfind("cpasync", 0) == 0;
    if (name.rfind("tma_", 0) != 0 && !cp_async) continue;
    for (Case c :
         {Case{515, 772, 332, 1.0f, 0.5f}, Case{515, 772, 332, -1.0f, 1.0f, 0, 0, 1, 0, 0, 1}, Case{2100, 2100, 64}}) {
      c.variant = var;
      v.push_back(c);
    }
    // The cp.async-fed producer (sixth pass) is for A and B that TMA cannot read: odd leading
    // dimensions with aligned pointers, unaligned pointers, both, on many tiles per CTA and
    // ragged edges (k % 32 != 0), a k < 32 and a k = 1 case, and C unaligned too.
    if (cp_async) {
      for (Case c : {Case{2100, 2100, 64, 1.0f, 0.0f, 3, 1}, Case{515, 772, 332, 1.0f, 0.5f, 1, 3, 1, 1, 2, 3},
                     Case{1023, 1025, 333, -1.0f, 0.25f, 0, 0, 0, 3, 1, 2}, Case{300, 260, 129, 1.0f, 0.5f, 2, 2, 0},
                     Case{130, 129, 7, 1.0f, 0.0f, 1, 1, 1, 1, 1, 1}, Case{257, 383, 1, 2.0f, 0.5f, 3, 3, 0, 2, 1, 0},
                     Case{4095, 300, 100, 1.0f, 0.0f, 0, 0, 0, 0, 0, 0}}) {
        c.variant = var;
        v.push_back(c);
      }
    }
    // Stream-K (fourth pass): on 132 SMs 2100x2100x333 leaves a partial wave after whole
    // ones (tiles cut over several segments, 11 k-blocks), 515x772x1000 and 200x300x5000 are
    // all stream-K, 1x4x8192 one tile cut into many segments; the unaligned case falls back.
    if (name.find("_streamk") != std::string_view::npos) {
      for (Case c : {Case{2100, 2100, 333, 1.0f, 0.5f}, Case{515, 772, 1000, -1.0f, 1.0f, 0, 0, 1, 0, 0, 1},
                     Case{200, 300, 5000}, Case{1, 4, 8192, 2.0f, 0.0f}, Case{3000, 3000, 100},
                     Case{131, 67, 4099, 1.0f, 0.25f, 1, 3, 5, 1, 2, 3}}) {
        c.variant = var;
        v.push_back(c);
      }
    }
    if (name.find("_splitk") == std::string_view::npos) continue;
    for (Case c : {Case{200, 300, 5000, 1.0f, 0.5f}, Case{128, 2000, 5000}, Case{1000, 132, 4100, -1.0f, 0.25f},
                   Case{1, 4, 8192}, Case{131, 67, 4099, 1.0f, 0.25f, 1, 3, 5, 1, 2, 3}}) {
      c.variant = var;
      v.push_back(c);
    }
  }
  const int atomic = variant_named("64x128x16_w32x64_t8x8_s4_splitk_atomic");  // tuning builds only
  for (Case c : {Case{200, 300, 5000, 1.0f, 0.5f}, Case{131, 67, 4099, 1.0f, 0.25f, 1, 3, 5, 1, 2, 3}}) {
    if (atomic < 0) break;
    c.variant = atomic;
    v.push_back(c);
  }
  return v;
}

// Thin C (n <= 64 or m <= 32 with the other side long): tiles shaped to the thin
// side, split K; aligned, unaligned, alpha/beta.
std::vector<Case> thin_cases() {
  return {{2000, 40, 3000},
          {3000, 17, 2500},
          {1500, 64, 1024},
          {2048, 32, 1000},
          {1200, 64, 2048, 1.5f, -0.5f},
          {1100, 30, 2100, 1.0f, 0.5f, 1, 3, 1, 1, 2, 3},
          {25, 2000, 3000},
          {32, 1024, 1100, -1.0f, 1.0f},
          {17, 1500, 2600, 1.0f, 0.0f, 3, 1, 1, 0, 1, 2},
          {128, 1030, 4100, 1.0f, 0.25f},
          {1500, 50, 1100, 1.0f, 0.5f},
          {2000, 64, 1999, 1.0f, 0.0f, 1, 3, 1, 1, 2, 3},
          // 256-1023 rows with K >= 2048: the K-major thin tiles, aligned A or not.
          {512, 32, 8192, 1.0f, 0.5f},
          {700, 24, 4100, -1.0f, 0.0f, 1, 0, 0, 0, 0, 0},
          {300, 60, 2048, 1.0f, 0.25f},
          {257, 64, 8195, 1.0f, 0.0f, 0, 0, 0, 1, 2, 3}};
}

// A single row or column of C: the GEMV kernels (split K for a single row),
// 16-byte and 4-byte paths, a ragged last float4, long K, alpha/beta.
std::vector<Case> gemv_cases() {
  return {{1, 4096, 4096},
          {4096, 1, 4096},
          {1, 1000, 3001, 1.0f, 0.5f, 1, 3, 1},
          {1, 2051, 513, 2.0f, 0.25f},
          {1, 130, 70000},
          {3, 1, 9000, 1.0f, 1.0f},
          {7, 1, 70000},
          {1000, 1, 4097, -0.5f, 0.5f, 3, 2, 0, 1, 1, 1},
          {2000, 1, 1003, 1.0f, 0.0f, 1, 0, 0, 0, 0, 0},
          {1, 1, 100000, 1.0f, 0.5f},
          {1, 777, 1, 1.0f, 0.0f, 0, 0, 0, 0, 1, 0}};
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  std::string s =
      std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k) + "_" + std::to_string(info.index);
  return s;
}

INSTANTIATE_TEST_SUITE_P(Square, PingpongSgemm, ::testing::ValuesIn(square_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Degenerate, PingpongSgemm, ::testing::ValuesIn(degenerate_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Rectangular, PingpongSgemm, ::testing::ValuesIn(rectangular_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(AlphaBeta, PingpongSgemm, ::testing::ValuesIn(alpha_beta_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Unaligned, PingpongSgemm, ::testing::ValuesIn(unaligned_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(SplitK, PingpongSgemm, ::testing::ValuesIn(split_k_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Thin, PingpongSgemm, ::testing::ValuesIn(thin_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Gemv, PingpongSgemm, ::testing::ValuesIn(gemv_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Variants, PingpongSgemm, ::testing::ValuesIn(variant_cases()), case_name);

// A backend refuses what it cannot run, before touching the device.
// Deterministic split-K: the same inputs give bit-identical C run after run.
TEST(PingpongSplitK, RunToRunBitIdentical) {
  SGEMM_REQUIRE_GPUS(1);
  auto pp = make_gemm_backend(KernelKind::kPingpong);
  ASSERT_TRUE(pp.ok()) << pp.status().to_string();
  for (Case cs :
       {Case{1024, 1024, 16384, 1.0f, 0.5f}, Case{131, 67, 4099, -1.0f, 0.25f, 1, 3, 5, 1, 2, 3}, Case{200, 300, 5000},
        Case{1, 3000, 9000, 1.0f, 0.5f}, Case{3000, 40, 3000, 1.0f, 0.5f}, Case{20, 2000, 5000}}) {
    SCOPED_TRACE(describe(cs));
    const int64_t lda = cs.k + cs.lda_pad, ldb = cs.n + cs.ldb_pad, ldc = cs.n + cs.ldc_pad;
    const uint64_t seed = fresh_seed();
    const auto ha = strided_random(cs.m, cs.k, lda, seed);
    const auto hb = strided_random(cs.k, cs.n, ldb, seed + 1);
    const auto hc0 = strided_random(cs.m, cs.n, ldc, seed + 2);
    DeviceBuffer da(ha.size() + cs.a_off), db(hb.size() + cs.b_off), dc(hc0.size() + cs.c_off);
    ASSERT_EQ(cudaMemcpy(da.p + cs.a_off, ha.data(), ha.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(db.p + cs.b_off, hb.data(), hb.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    const GemmArgs g{{cs.m, cs.n, cs.k}, cs.alpha, cs.beta, da.p + cs.a_off, lda, db.p + cs.b_off, ldb,
                     dc.p + cs.c_off,    ldc};
    const std::string_view picked = pingpong_variant_name(pingpong_pick_variant(g.shape, 132));
    ASSERT_TRUE(picked.find("splitk") != std::string_view::npos || picked == "gemv") << picked;
    const size_t ws_bytes = pp.value()->workspace_bytes(g);
    ASSERT_GT(ws_bytes, 0u);
    DeviceBuffer ws(ws_bytes / 4);
    EXPECT_EQ(pp.value()->run(g, nullptr, 0, nullptr).code(), StatusCode::kInvalidArgument);  // names `workspace`
    std::vector<float> first, got(hc0.size());
    for (int run = 0; run < 4; ++run) {
      ASSERT_EQ(cudaMemcpy(dc.p + cs.c_off, hc0.data(), hc0.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
      const Status st = pp.value()->run(g, ws.p, ws_bytes, nullptr);
      ASSERT_TRUE(st.ok()) << st.to_string();
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(got.data(), dc.p + cs.c_off, got.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      if (run == 0)
        first = got;
      else
        EXPECT_EQ(std::memcmp(first.data(), got.data(), got.size() * 4), 0) << "run " << run << " differs";
    }
  }
}

// Stream-K adds a cut tile's partials in a fixed order: bit-identical C run after run, for
// every stream-K variant (the schedule depends only on the shape and the SM count).
TEST(PingpongStreamK, RunToRunBitIdentical) {
  SGEMM_REQUIRE_GPUS(1);
  int variants = 0;
  for (int var = 0; var < pingpong_variant_count(); ++var) {
    if (pingpong_variant_name(var).find("_streamk") == std::string_view::npos) continue;
    ++variants;
    for (Case cs : {Case{2100, 2100, 1000, 1.0f, 0.5f}, Case{1024, 1024, 16384}, Case{300, 500, 7000, -1.0f, 0.0f}}) {
      SCOPED_TRACE(std::string(pingpong_variant_name(var)) + " " + describe(cs));
      const uint64_t seed = fresh_seed();
      const auto ha = strided_random(cs.m, cs.k, cs.k, seed);
      const auto hb = strided_random(cs.k, cs.n, cs.n, seed + 1);
      const auto hc0 = strided_random(cs.m, cs.n, cs.n, seed + 2);
      DeviceBuffer da(ha.size()), db(hb.size()), dc(hc0.size());
      ASSERT_EQ(cudaMemcpy(da.p, ha.data(), ha.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(db.p, hb.data(), hb.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
      const GemmArgs g{{cs.m, cs.n, cs.k}, cs.alpha, cs.beta, da.p, cs.k, db.p, cs.n, dc.p, cs.n};
      const size_t ws_bytes = pingpong_variant_workspace_bytes(g.shape, var);
      ASSERT_GT(ws_bytes, 0u);  // each shape leaves a partial wave on any GPU with 132 or fewer SMs
      DeviceBuffer ws(ws_bytes / 4);
      if (ws_bytes > 16) {
        // Too small a workspace is refused, naming it.
        const Status small = pingpong_sgemm_variant(g, var, ws.p, 16, nullptr);
        EXPECT_EQ(small.code(), StatusCode::kInvalidArgument) << small.to_string();
      }
      std::vector<float> first, got(hc0.size());
      for (int run = 0; run < 4; ++run) {
        ASSERT_EQ(cudaMemcpy(dc.p, hc0.data(), hc0.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
        const Status st = pingpong_sgemm_variant(g, var, ws.p, ws_bytes, nullptr);
        ASSERT_TRUE(st.ok()) << st.to_string();
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(got.data(), dc.p, got.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
        if (run == 0)
          first = got;
        else
          EXPECT_EQ(std::memcmp(first.data(), got.data(), got.size() * 4), 0) << "run " << run << " differs";
      }
    }
  }
  EXPECT_GT(variants, 0);
}

TEST(PingpongBackend, RunRefusesInvalidArguments) {
  SGEMM_REQUIRE_GPUS(1);
  auto pp = make_gemm_backend(KernelKind::kPingpong);
  ASSERT_TRUE(pp.ok());
  GemmArgs g{{4, 4, 4}, 1.0f, 0.0f, nullptr, 4, nullptr, 4, nullptr, 4};
  EXPECT_EQ(pp.value()->run(g, nullptr, 0, nullptr).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sgemm
