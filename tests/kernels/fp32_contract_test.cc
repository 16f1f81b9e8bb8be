// The fp32 contract on the GPU: wherever select_kernel may send an fp32 request
// to fp32x3 (where fp32x3_keeps_fp32_contract admits it), fp32x3's componentwise error (max |c - ref| / (|A||B|)
// against cuBLAS DGEMM of the same inputs, kernels/gemm_accuracy.h) is no larger than cuBLAS SGEMM's on the same
// inputs: uniform, wide-exponent ((U - 0.5) * exp(4 N(0,1))) and cancelling inputs, on the edges of the rule
// (server/planner/kernel_choice.h, fp32x3_contract_rule): its smallest K; where cuBLAS splits K (and its error drops),
// the longest K fp32x3 leaves whole and the cuts of longer K into slices; and long K where C is large enough for cuBLAS
// to keep whole K sums. The rule was set from sgemm-bench --accuracy; this suite holds it there. Each result is also
// checked bitwise identical run to run. Without an sm_90 GPU the suite skips.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels/gemm_accuracy.h"
#include "kernels/gemm_backend.h"
#include "server/planner/kernel_choice.h"
#include "tests/common/gpu_test.h"

namespace sgemm {
namespace {

struct DeviceFloats {
  float* p = nullptr;
  explicit DeviceFloats(std::size_t n) { EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&p), n * 4), cudaSuccess); }
  ~DeviceFloats() { (void)cudaFree(p); }
};

bool have_sm90() {
  if (testing::cuda_device_count() < 1) return false;
  cudaDeviceProp prop{};
  return cudaGetDeviceProperties(&prop, 0) == cudaSuccess && prop.major == 9 && prop.minor == 0;
}

// Runs `be` on device copies of (a, b) and returns C on the host; twice, checking the two bitwise equal.
std::vector<float> run_on(GemmBackend& be, const GemmShape& s, const std::vector<float>& a,
                          const std::vector<float>& b) {
  DeviceFloats da(a.size()), db(b.size()), dc(std::size_t(s.m * s.n));
  EXPECT_EQ(cudaMemcpy(da.p, a.data(), a.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(db.p, b.data(), b.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  const GemmArgs g = dense_gemm_args(s, 1.0f, da.p, db.p, 0.0f, dc.p);
  const std::size_t ws_bytes = be.workspace_bytes(g);
  void* ws = nullptr;
  if (ws_bytes) {
    EXPECT_EQ(cudaMalloc(&ws, ws_bytes), cudaSuccess);
  }
  std::vector<float> c[2];
  for (auto& out : c) {
    EXPECT_EQ(cudaMemset(dc.p, 0xff, std::size_t(s.m * s.n) * 4), cudaSuccess);  // NaN: every element must be written
    const Status st = be.run(g, ws, ws_bytes, nullptr);
    EXPECT_TRUE(st.ok()) << st.to_string();
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    out.resize(std::size_t(s.m * s.n));
    EXPECT_EQ(cudaMemcpy(out.data(), dc.p, out.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  }
  if (ws) (void)cudaFree(ws);
  EXPECT_EQ(std::memcmp(c[0].data(), c[1].data(), c[0].size() * 4), 0)
      << be.kernel_name(g) << " not bitwise repeatable";
  return c[0];
}

TEST(Fp32Contract, Fp32x3KeepsItWhereverTheSelectionUsesIt) {
  if (!have_sm90()) GTEST_SKIP() << "needs an sm_90 GPU: run this suite on the GPU machine (scripts/gpu-check.sh)";
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  auto fp32x3 = make_gemm_backend(KernelKind::kFp32x3);
  auto cublas = make_gemm_backend(KernelKind::kCublas);
  ASSERT_TRUE(fp32x3.ok() && cublas.ok());
  // The rule's edges: its smallest K; where cuBLAS splits K, the longest K fp32x3 leaves
  // whole, the shortest it cuts and long K over few tiles (many slices); and products
  // where cuBLAS keeps whole K sums.
  const Fp32x3ContractRule rule = fp32x3_contract_rule();
  const int64_t whole = rule.slice_k_blocks * 32;
  // Where cuBLAS's sums are shortest that the rule admits: k * tiles just above
  // min_cublas_sum_k per SM (132 SMs: 512^2 x 4096 and 256^2 x 16384).
  const std::vector<GemmShape> shapes = {{1536, 1536, rule.min_k}, {1536, 1536, whole}, {1536, 1536, whole + 32},
                                         {1024, 1024, 1024},       {512, 512, 4096},    {256, 256, 16384},
                                         {256, 256, 131072},       {512, 512, 65536},   {1536, 1536, 65536},
                                         {2048, 2048, 8192},       {4096, 4096, 16384}};
  for (InputDistribution d :
       {InputDistribution::kUniform, InputDistribution::kWideExponent, InputDistribution::kCancelling})
    for (GemmShape s : shapes) {
      const int64_t k = s.k;
      SCOPED_TRACE(std::string(input_distribution_name(d)) + " " + gemm_shape_text(s));
      // select_kernel offers fp32x3 to an fp32 request exactly where the rule admits it
      // (the measured speeds then decide among the kernels it admits).
      ASSERT_TRUE(fp32x3_keeps_fp32_contract(s, prop.multiProcessorCount)) << "the rule no longer admits this shape";
      std::vector<float> a, b;
      fill_inputs(d, s.m, s.n, s.k, 7000 + uint64_t(k), a, b);
      auto probe = GemmAccuracyProbe::create(s, a.data(), b.data());
      ASSERT_TRUE(probe.ok()) << probe.status().to_string();
      const double cw_x3 = (*probe)->componentwise_error(run_on(**fp32x3, s, a, b).data());
      const double cw_sgemm = (*probe)->componentwise_error(run_on(**cublas, s, a, b).data());
      std::printf("%-14s %-16s fp32x3 cw %.3e  cuBLAS SGEMM cw %.3e  ratio %.3f\n", input_distribution_name(d),
                  gemm_shape_text(s).c_str(), cw_x3, cw_sgemm, cw_x3 / cw_sgemm);
      EXPECT_LE(cw_x3, cw_sgemm);
    }
}

}  // namespace
}  // namespace sgemm
